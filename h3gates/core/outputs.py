"""The rungs and where the workflow writes: one table for the Snakefile (which generates the rung
rules from it), the rungs, promotion and the CLI. No imports."""

from __future__ import annotations

from dataclasses import dataclass

RESULTS = "results"


@dataclass(frozen=True)
class Rung:
    n: int
    name: str  # the report's name, r<n>_<name>.json (ladder.md)
    module: str  # h3gates/rungs/<module>.py runs it
    title: str  # what the HTML report and status call it
    per_block: bool = False  # one report per gated block (rungs 3 and 4)
    fresh: bool = False  # its job never forks from the warm worker (core/warm.py): rung 4 times in its own process
    gpu_shared: bool = (
        False  # its GPU job records no time: it may share the device with others that record none (core/lease.py)
    )


RUNGS = (
    Rung(1, "adversarial", "r1_adversarial", "1 adversarial", gpu_shared=True),
    Rung(2, "tiles", "r2_tiles", "2 tiles", gpu_shared=True),
    Rung(3, "projection", "r3_projection", "3 projection", per_block=True, gpu_shared=True),
    Rung(4, "block", "r4_block", "4 block", per_block=True, fresh=True),  # the gate times: the device alone
    Rung(5, "step", "r5_step", "5 step"),  # reports its baseline artifact's wall time
    Rung(6, "two_step", "r6_two_step", "6 two-step"),  # reports both sides' wall times
    Rung(7, "trajectory", "r7_trajectory", "7 trajectory"),  # reports both trajectories' wall times
    Rung(8, "profile", "r8_profiler", "8 profiler"),  # Nsight Compute's counters and the peak memory
)
RUNG = {r.n: r for r in RUNGS}
RUNG_NAMES = {r.n: r.name for r in RUNGS}
PER_BLOCK = {r.n for r in RUNGS if r.per_block}


def rung_module(rung: int) -> str:
    return f"h3gates/rungs/{RUNG[rung].module}.py"


VARIANT_SEP = "@"  # results/<profile>/<candidate>@<variant>/: a `source:` variant's results, beside the candidate's own


def results_name(candidate: str, source: str | None = None) -> str:
    """The name a candidate's results go under (its results folder and its promotion record and flag): the
    registered name, or `<name>@<stem of source>` for a variant under review (`candidates.<name>.source`),
    so a variant never overwrites the candidate's own reports, record or flag. The stem keeps letters,
    digits, `_`, `-` and `.`; anything else becomes `_`."""
    if not source:
        return candidate
    stem = str(source).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    stem = stem.rsplit(".", 1)[0] if "." in stem.lstrip(".") else stem
    stem = "".join(ch if ch.isalnum() or ch in "_-." else "_" for ch in stem) or "variant"
    return f"{candidate}{VARIANT_SEP}{stem}"


def registered_name(name: str) -> str:
    """The registered candidate a results name belongs to (`qkv_ring@my_ring` -> `qkv_ring`)."""
    return name.split(VARIANT_SEP, 1)[0]


def candidate_dir(profile: str, candidate: str) -> str:
    return f"{RESULTS}/{profile}/{candidate}"


def report_path(profile: str, candidate: str, rung: int, block=None) -> str:
    name = f"r{rung}_{RUNG_NAMES[rung]}" + (f"/block{block}" if rung in PER_BLOCK else "")
    return f"{candidate_dir(profile, candidate)}/{name}.json"


FIRST_BLOCK_FIRST = 4  # the rung whose later blocks wait on its first gated block's report (h3gates/rungs/r4_block.py)


def first_block_report(profile: str, candidate: str, rung: int, block, blocks) -> list[str]:
    """The first gated block's report that rung `rung` at `block` also reads: at rung 4, every block after
    the first is timed only once the first has passed (rules/common.smk first_block_of, links.expected_upstream)."""
    if rung != FIRST_BLOCK_FIRST or not blocks or block is None or int(block) == int(blocks[0]):
        return []
    return [report_path(profile, candidate, rung, blocks[0])]


def report_paths(profile: str, candidate: str, blocks) -> dict[int, list[str]]:
    return {
        r: [report_path(profile, candidate, r, b) for b in blocks]
        if r in PER_BLOCK
        else [report_path(profile, candidate, r)]
        for r in RUNG_NAMES
    }


def token_path(profile: str, candidate: str, rung: int) -> str:
    return f"{candidate_dir(profile, candidate)}/tokens/r{rung}.pass"


def promotion_paths(profile: str, candidate: str) -> tuple[str, str]:
    """(record, flag) of a candidate's promotion."""
    base = f"{RESULTS}/{profile}/promotion/{candidate}"
    return f"{base}.json", f"{base}.env"
