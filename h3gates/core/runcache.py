"""The run cache: every rung report the workflow makes is kept by the content it was made from, so that a
rung job whose inputs are those of a kept report restores that report (byte for byte, with the replay
dumps it names) instead of running the gate; as DVC's run-cache or Bazel's action cache. Reverting a
kernel edit reruns no gate, and two `source:` variants' reports coexist (docs/ladder.md, "The run cache").

A rung job's key is the SHA-256 of
- the rung, the block and the report's path (`--out`: the report names its replay dumps after it),
- the rung context (h3gates.core.context.RungContext: the candidate, its config, the config slice the rung
  reads, the workflow artifacts' paths),
- the report's provenance now (h3gates.core.fingerprints.provenance: every kernel file's behaviour digest,
  the code fingerprint of the modules the job imports, the config digest),
- the SHA-256 of every file the gate reads that the workflow made (the upstream reports, the baseline
  artifacts, the captured block inputs, a study's output): what the report records as `upstream`,
- the software it ran with (Python, the numerics' packages; on a GPU the GPUs' names and the driver, and
  where MIG is on, each GPU's MIG mode and the host's MIG instance profiles: a slice's SMs and memory are
  not a whole GPU's),
- KEY_VERSION.

A restore re-reads the kept report (schema and self-digest), checks that its rung, candidate, block,
provenance and upstream digests are those of this job, and serves nothing otherwise: a kept report
whose fingerprint differs is never served. What is kept: every report a gate writes, passing or failing,
except those a rerun at the same key may legitimately change (`cacheable`): a candidate's crash (the
exception may be the machine's: memory, a device fault), and a rung-4 report failing on a performance gate
that did not decide (a rerun is another attempt of the fingerprint's budget, h3gates.core.perfgate).
`H3GATES_RUN_CACHE=off` runs every gate (and keeps nothing). The store lives under
results/<profile>/cache/ (with digests/, the large upstream files' digests: stored_sha256) and may be
deleted at any time. No torch import: a restore costs a Python start.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from h3gates.core import report
from h3gates.core.errors import ReportError
from h3gates.core.fingerprints import digest, large_file_min, provenance
from h3gates.core.jobs import RUN_CACHE, nvidia_smi_list, nvidia_smi_query, progress, switched_on
from h3gates.core.outputs import RESULTS

KEY_VERSION = 1
ENV = RUN_CACHE  # off / 0 / no / false: run every gate, keep nothing
PACKAGES = ("torch", "numpy", "comfy-kitchen", "cuda-python", "nvmath-python", "nvidia-cutlass-dsl")
PACKAGES += ("nvidia-cublas", "nvidia-cublas-cu13", "nvidia-cublas-cu12")  # cuBLASLt (fc2_algo's pin names its version)
DECIDED = ("pass", "fail", "not timed")  # rung-4 decisions a rerun at the same key repeats (h3gates.core.perfgate)


def enabled() -> bool:
    return switched_on(ENV)


def store_dir(profile: str) -> Path:
    return Path(RESULTS, profile, "cache")


def environment(device: str) -> dict:
    """The software a report's bytes may depend on beyond the sources (read without importing it)."""
    from importlib import metadata

    def version(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    env = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "packages": {p: version(p) for p in PACKAGES},
    }
    if device == "cuda":
        env["gpus"], env["driver"] = gpus_and_driver()
        if mig := mig_layout():  # (absent where no GPU has MIG on: the keys of whole GPUs are unchanged)
            env["mig"] = mig
    return env


_GPUS: list = []  # this process's answer, once nvidia-smi gave one: (names, drivers, MIG modes or None)


def _gpu_rows() -> tuple:
    """(names, drivers, MIG modes) of this host's GPUs from one nvidia-smi start (a start per restore job saved;
    a GPU's name holds no comma), else from one query a field (an nvidia-smi that refuses the combined query;
    the modes then None: mig_layout asks for them itself), each None where it did not come. Kept for the
    process once the names and drivers came: the workflow's own process asks it for every rung job it schedules
    (`restorable`); a failed query is asked again."""
    if not _GPUS:
        rows = nvidia_smi_query("name,driver_version,mig.mode.current")
        if rows is not None and all(r.count(",") == 2 for r in rows):
            cols = list(zip(*[[x.strip() for x in r.split(",")] for r in rows])) or [(), (), ()]
            names, drivers, modes = (list(c) for c in cols)
        else:
            names, drivers, modes = nvidia_smi_query("name"), nvidia_smi_query("driver_version"), None
        if names is None or drivers is None:
            return names, drivers, modes
        _GPUS.append((names, drivers, modes))
    return _GPUS[0]


def gpus_and_driver() -> tuple[list[str] | None, list[str] | None]:
    """The GPUs' names and driver versions (_gpu_rows), each None where nvidia-smi did not give it."""
    names, drivers, _ = _gpu_rows()
    return (None if names is None else list(names)), (None if drivers is None else list(drivers))


_MIG: list = []  # this process's answer, once nvidia-smi gave one


def mig_layout() -> dict | None:
    """Where MIG is on for some GPU of this host: {"modes": each GPU's current MIG mode, "instances": the
    profiles of the MIG devices `nvidia-smi -L` lists (e.g. "3g.40gb"), sorted}; else None (no GPU has it on,
    or the GPUs cannot say: "[N/A]"), so that the keys of hosts without MIG are those they had before it was in
    the key. Where nvidia-smi failed: the modes or the instances None, a key no host without MIG has, asked
    again next time. From the host's nvidia-smi, which a job's leased CUDA_VISIBLE_DEVICES does not change, so
    the workflow's restore prediction and the job agree. The key is the host's, not the job's device: on a
    host with MIG on, jobs on different slices, or on a slice and on a GPU without MIG, share one key. Kept
    for the process once nvidia-smi answered."""
    if not _MIG:
        modes = _gpu_rows()[2]
        if modes is None:
            modes = nvidia_smi_query("mig.mode.current")
        if modes is None:
            return {"modes": None, "instances": None}
        layout = None
        if any(m.strip().lower() == "enabled" for m in modes):
            listed = nvidia_smi_list()
            if listed is None:
                return {"modes": [m.strip() for m in modes], "instances": None}
            profiles = sorted(w.split()[1] for w in listed if w.strip().startswith("MIG ") and len(w.split()) > 1)
            layout = {"modes": [m.strip() for m in modes], "instances": profiles}
        _MIG.append(layout)
    return _MIG[0]


def upstream_digests(ctx, upstream, block) -> dict:
    """What the gate records as `upstream` (h3gates.rungs.gate.Gate): the given reports and artifacts, then
    every workflow artifact the context names for this rung and block that exists."""
    store = store_dir(ctx.profile) / "digests"
    ups = {str(p): stored_sha256(p, store) for p in upstream}
    for p in ctx.workflow_artifacts(block):
        if p not in ups and Path(p).is_file():
            ups[p] = stored_sha256(p, store)
    return ups


SETTLED_NS = 2_000_000_000  # a file changed this recently is hashed, never stored (file times are coarse)


def stored_sha256(path, store: Path) -> str:
    """SHA-256 of a file's content, kept across processes in `store` per (path, device, inode, size, mtime,
    ctime), as git's index and DVC's state database keep theirs: a key's upstream artifacts (a canonical
    block capture is 406 MB) are hashed once per run, not once per job. Any write to a file, and any change
    of its times, moves its ctime, which no process can set back; a file changed within 2 s before this
    call began is not stored, as two writes inside one tick of the file-time clock would share a ctime
    (git's "racy" entries). The identity is read from the open file (fstat: on a network filesystem the
    open revalidates what a path's stat may serve from the client's cache), and a miss hashes the file from
    that descriptor, never from the per-process cache (keyed by path, mtime and size only). Only the run
    cache's key reads it: a key that served a wrong report would still meet promotion and verify, which
    hash every file they check."""
    began = time.time_ns()
    p = Path(path)
    with open(p, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_size < large_file_min():  # (smaller: hashed each time, cheaper than the lookup)
            return hashlib.file_digest(f, "sha256").hexdigest()
        ident = (os.path.realpath(p), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        kept = store / hashlib.sha256("\0".join(map(str, ident)).encode()).hexdigest()[:40]
        try:
            h = kept.read_text()
            if len(h) == 64 and all(c in "0123456789abcdef" for c in h):
                return h
        except (OSError, ValueError):  # (absent, unreadable or not text: hashed below, and stored again)
            pass
        h = hashlib.file_digest(f, "sha256").hexdigest()
        after = os.fstat(f.fileno())
    same = (after.st_dev, after.st_ino, after.st_size, after.st_mtime_ns, after.st_ctime_ns) == ident[1:]
    if same and began - max(st.st_mtime_ns, st.st_ctime_ns) > SETTLED_NS:
        from h3gates.core.fsutil import atomic_write

        try:
            store.mkdir(parents=True, exist_ok=True)
            atomic_write(kept, h)
        except OSError:
            pass  # (a read-only results/: hashed again next time)
    return h


def cacheable(doc: dict) -> tuple[bool, str]:
    """Whether a report is what any rerun at its key would write (apart from its timing) -> (yes, why not)."""
    if "crash" in (doc.get("measurements") or {}):
        return False, "a candidate crash (it may be the machine's) is not kept: a rerun runs the gate again"
    gate = (doc.get("timing") or {}).get("performance_gate") or {}
    if doc["verdict"] == "fail" and gate.get("enforced") and gate.get("decision") not in DECIDED:
        return False, f"an enforced performance gate that did not decide ({gate.get('decision')}) is another attempt"
    if doc.get("rung") == 8 and (doc.get("device") or {}).get("device_type") == "cuda":
        ns = (doc.get("timing") or {}).get("nsight") or {}
        if not all((ns.get(side) or {}).get("available") for side in ("baseline", "candidate")):
            # (the key does not hold whether ncu is found: a deployable promotion refuses such a report and moves it
            # aside, h3gates.core.promotion.promote, and its rerun must capture, not get it back)
            return (
                False,
                "a GPU rung 8 without Nsight Compute captures of both sides is not kept: a run that finds ncu makes them",
            )
    return True, ""


class Entry:
    """One rung job's place in the run cache."""

    def __init__(self, ctx, rung: int, out, block=None, upstream=()):
        self.ctx, self.rung, self.out, self.block = ctx, rung, Path(out), block
        self.provenance = provenance(ctx)
        self.upstream = upstream_digests(ctx, upstream, block)
        self.inputs = {
            "version": KEY_VERSION,
            "rung": rung,
            "block": block,
            "out": str(out),
            "context": ctx.to_dict(),
            "provenance": self.provenance,
            "upstream": self.upstream,
            "environment": environment(ctx.device),
        }
        self.key = digest(self.inputs)
        self.dir = store_dir(ctx.profile) / self.key[:2] / self.key

    def where(self) -> str:
        return f"rung {self.rung} {self.ctx.candidate}" + ("" if self.block is None else f" block {self.block}")

    def _problem(self, doc: dict, replay_dir: Path) -> str | None:
        """Why a report is not this job's to keep or serve (None: it is)."""
        want = {"rung": self.rung, "candidate": self.ctx.candidate, "block": self.block, **self.provenance}
        for k, v in want.items():
            if doc.get(k) != v:
                return f"its {k} differs"
        if doc.get("upstream") != self.upstream:
            return "its upstream digests differ"
        ok, why = cacheable(doc)
        if not ok:
            return why
        missing = [r for r in doc.get("replay") or [] if not (replay_dir / r).is_file()]
        return f"replay dump {missing[0]} is missing" if missing else None

    def servable(self, say=progress) -> dict | None:
        """The kept report at this key if it is this job's to serve (None: the gate must run; `say` is told why)."""
        kept = self.dir / "report.json"
        if not enabled() or not kept.is_file():
            return None
        try:
            doc = report.read(kept)
        except ReportError as e:
            say(f"run cache: {self.where()}: kept report unusable ({e}); running the gate")
            return None
        why = self._problem(doc, self.dir)
        if why:
            say(f"run cache: {self.where()}: kept report not served ({why}); running the gate")
            return None
        return doc

    def restore(self) -> bool:
        """Put the kept report (and its replay dumps) in place if this key has one that is this job's."""
        doc = self.servable()
        if doc is None:
            return False
        from h3gates.core.fsutil import atomic_write
        from h3gates.core.links import remove_stale_replays

        for name in doc.get("replay") or []:
            atomic_write(self.out.parent / name, (self.dir / name).read_bytes())
        remove_stale_replays(self.out, doc.get("replay"))  # dumps of another run of this gate, and their links
        atomic_write(self.out, (self.dir / "report.json").read_bytes())
        progress(
            f"{self.where()}: {doc['verdict'].upper()} restored from the run cache (key {self.key[:16]}, "
            f"written {doc['written_at']}): not run"
        )
        return True

    def keep(self) -> None:
        """Keep the report the gate wrote (and its replay dumps), if it is cacheable."""
        if not enabled() or not self.out.is_file():
            return
        data = self.out.read_bytes()
        doc = json.loads(data)
        why = self._problem(doc, self.out.parent)
        if why:
            progress(f"run cache: {self.where()}: not kept ({why})")
            return
        self.dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=self.dir.parent, prefix=f".{self.key}."))
        try:
            (tmp / "report.json").write_bytes(data)
            for name in doc.get("replay") or []:
                shutil.copyfile(self.out.parent / name, tmp / name)
            (tmp / "key.json").write_text(json.dumps(self.inputs, indent=1, sort_keys=True) + "\n")
            for f in tmp.iterdir():
                f.chmod(0o644)
            tmp.chmod(0o755)
            if self.dir.exists():  # kept before at this key (a forced rerun): the newest run's bytes
                shutil.rmtree(self.dir)
            os.rename(tmp, self.dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        progress(f"run cache: {self.where()}: kept under {self.dir}")


def entry(ctx, rung: int, out, block=None, upstream=()) -> Entry | None:
    """The job's cache entry, or None where the cache is off or the key cannot be computed (a missing kernel
    source: the gate runs and says so)."""
    if not enabled():
        return None
    try:
        return Entry(ctx, rung, out, block, upstream)
    except (OSError, ValueError) as e:
        print(f"h3gates: run cache unused for this job ({type(e).__name__}: {e})", file=sys.stderr)
        return None


def gpu_resource(context, rung: int, profile: str, candidate: str, block, inputs, gpu: int) -> int:
    """A rung job's `gpu` resource as the workflow's own process sees it once the job's inputs exist (Snakemake
    evaluates a job's resources again then, before it starts the job): none where the job will restore its
    report from the run cache, so that a revert's restores (three blocks of rung 3, of rung 4) run side by side
    instead of one at a time under the run's one GPU. `context`: a callable giving the job's RungContext;
    `inputs`: the rule's named inputs the job passes as its `--upstream` (a path or a list of paths each).
    Anything that goes wrong keeps the GPU (a hint to the scheduler never stops the run)."""
    if not gpu:
        return gpu
    try:
        from h3gates.core.outputs import report_path

        out = report_path(profile, candidate, rung, block)
        upstream = [p for x in inputs for p in ([x] if isinstance(x, str) else x)]
        return 0 if restorable(context(), rung, out, None if block is None else int(block), upstream) else gpu
    except Exception as e:  # noqa: BLE001
        _hint_failed(e)
        return gpu


_HINT_FAILED: list = []


def _hint_failed(e: Exception) -> None:
    """Say once per process why the scheduler's hint failed (the restores then wait for the GPU resource)."""
    if not _HINT_FAILED:
        _HINT_FAILED.append(e)
        print(f"h3gates: run cache: no restore predicted for the scheduler ({type(e).__name__}: {e})", file=sys.stderr)


def restorable(ctx, rung: int, out, block=None, upstream=()) -> bool:
    """Whether this rung job will restore its report rather than run its gate, asked by the workflow before it
    starts the job (rules/common.smk, `gpu_unless_restorable`): such a job needs no GPU, so a revert's restores
    need not wait for each other's GPU resource. A guess for the scheduler only: the job decides again itself,
    and a gate that runs after all still takes its GPU lease (h3gates.core.lease). False where the key cannot be
    computed (an input not made yet)."""
    if not enabled():
        return False
    try:
        return Entry(ctx, rung, out, block, upstream).servable(say=lambda _: None) is not None
    except (OSError, ValueError):  # an input not made yet: the usual case before the job is ready
        return False
