"""Where the workflow writes: one definition for the Snakefile, the rungs and the CLI."""

RUNG_NAMES = {1: "adversarial", 2: "tiles", 3: "projection", 4: "block", 5: "step", 6: "two_step", 7: "trajectory", 8: "profile"}
PER_BLOCK = {3, 4}
RESULTS = "results"


def report_path(profile: str, candidate: str, rung: int, block=None) -> str:
    name = f"r{rung}_{RUNG_NAMES[rung]}" + (f"/block{block}" if rung in PER_BLOCK else "")
    return f"{RESULTS}/{profile}/{candidate}/{name}.json"


def report_paths(profile: str, candidate: str, blocks) -> dict[int, list[str]]:
    return {r: [report_path(profile, candidate, r, b) for b in blocks] if r in PER_BLOCK else [report_path(profile, candidate, r)] for r in RUNG_NAMES}


def token_path(profile: str, candidate: str, rung: int) -> str:
    return f"{RESULTS}/{profile}/{candidate}/tokens/r{rung}.pass"


def promotion_paths(profile: str, candidate: str) -> tuple[str, str]:
    """(record, flag) of a candidate's promotion."""
    base = f"{RESULTS}/{profile}/promotion/{candidate}"
    return f"{base}.json", f"{base}.env"
