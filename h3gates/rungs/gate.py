"""What every rung needs: its typed context, the device and its reference, the baseline roles and the
candidate's roles on top of them (h3gates.model.setup), the model (built on first use), and the report
header (provenance, environment, verdict)."""

from __future__ import annotations

from pathlib import Path

from h3gates.core import machine, registry, report
from h3gates.core.context import RungContext
from h3gates.core.fingerprints import provenance
from h3gates.core.jobs import progress
from h3gates.core.outputs import RUNG_NAMES
from h3gates.model import candidates
from h3gates.model.setup import RoleSetup
from h3gates.nvfp4.compare import dump_replay

CURRENT: list = []  # the gate of this process, for the crash handler
REPLAY_LIMIT = 24  # replay dumps a failing gate keeps (the first ones; the report still lists every failing case)


class Gate:
    """One rung of one candidate: `reference` roles (the library path), `baseline` roles (the library
    path with the accepted candidates), `candidate` roles (the candidate's own, built on the baseline)."""

    def __init__(
        self, ctx: RungContext, rung: int, block: int | None = None, upstream=(), digests: bool = True, read=None
    ):
        """`digests`: record the upstream files' SHA-256 (False in a process that writes no report: a rung-4
        timing worker, whose parent's report holds them); `read`: the block's capture as
        artifacts.read_capture gave it before this process's GPU turn (a rung-4 worker), for capture()."""
        CURRENT[:] = [self]
        self._read, self._digests = read, digests
        self.ctx, self.rung, self.block = ctx, rung, block
        self._at: str | None = None  # the case being run, for a crash report
        self.pending: dict | None = None  # the case being run as gate.dump takes it: a crash dumps it for replay
        self.name = ctx.candidate
        self.spec = registry.get(self.name)
        self.reasons: list[str] = []
        self.notes: list[str] = []  # what a reader must know about a pass (e.g. a gate recorded but not enforced)
        self.replay: list[str] = []
        self.replay_dropped = 0
        self.untrusted_artifact: dict | None = None  # (untrusted: the shared artifact the gate could not trust)
        self.pins: dict = {}  # (set after the candidate is built; a crash while building it writes none)
        self.inputs: dict = {}  # block -> the block's input on the device, as r4_block.sides_of's sides read it
        self.upstream = {str(p): report.file_sha256(p) for p in upstream} if digests else {}
        # every workflow artifact the context names for this rung (and block) is an upstream digest, whatever
        # the caller passed: promotion checks what a report read (one missing here fails the rung that reads it)
        for p in ctx.workflow_artifacts(block) if digests else ():
            if p not in self.upstream and Path(p).is_file():
                self.upstream[p] = report.file_sha256(p)
        self.setup = RoleSetup.of(ctx, lazy=bool(ctx.captures))
        self.device, self.reference_q, self.model_profile = (
            self.setup.device,
            self.setup.reference_q,
            self.setup.profile,
        )
        self.reference, self.baseline = self.setup.reference, self.setup.baseline
        self.provenance = provenance(ctx)
        self._scheduled = None
        # rungs 1-2 gate a candidate's kernel; its schedule (e.g. the ring's chunks) from rung 3 on
        self.candidate = self._build("kernel" if rung <= 2 else "schedule")
        # what a candidate's bytes hold only with (e.g. fc2_algo's cuBLASLt algorithm, library and GPU)
        self.pins = {
            role: part.pin()
            for role, r in sorted(self.candidate.items())
            for part in (r.producer, r.gemm)
            if callable(getattr(part, "pin", None))
        }

    def _build(self, level: str) -> dict:
        c = self.ctx
        return candidates.build_one(
            self.name,
            c.candidate_config,
            self.device,
            self.reference_q,
            self.baseline,
            level,
            self.model_profile,
            c.artifacts.get(self.name),
        )

    def scheduled(self) -> dict:
        """The candidate's roles as the model runs them (its schedule, e.g. the ring's chunks), also at
        rungs 1-2 where `candidate` is its kernel alone."""
        if self.rung > 2:
            return self.candidate
        if self._scheduled is None:
            self._scheduled = self._build("schedule")
        return self._scheduled

    @property
    def model(self):
        """The model; where the context names captured block inputs (rungs 3, 4, 8), its blocks are made on
        first use (only the gated block's, the bytes of a full build)."""
        return self.setup.model

    def drop_model(self) -> None:
        self.setup.drop_model()

    def release_device(self) -> None:
        """Everything of the device this gate holds, let go where its process will run no block again (rung 4's
        own process once its timing sides close: a later cohort's processes need the memory): the model, the
        block inputs its sides read (`inputs`), and the roles, whose kernels may keep buffers of a block's size.
        What the report needs stays (the reference's description, the pins, the upstream digests)."""
        self.setup.drop_model()
        self.inputs.clear()
        self.candidate, self._scheduled, self.reference, self.baseline = {}, None, {}, {}
        self.setup.reference, self.setup.baseline = {}, {}

    def capture(self, block: int, lap=None):
        """The reference inputs of `block` (its input and each role's): from the block input the shared
        capture artifact holds when the context names one (checked: h3gates.rungs.artifacts.load_capture),
        else by running the reference model up to the block in this process. `lap(name)`, where given, is
        called after each step of a captured input's (a rung-4 worker's account): `input_s` the input on the
        device, `model_s` the model's inputs and the block made, `first_s` the block's reference run (the
        process's first block forward); the same steps in the same order as without it."""
        lap = lap or (lambda name: None)
        path = self.ctx.captures.get(str(block))
        if path is None:
            return self.model.capture(block)
        from h3gates.rungs.artifacts import load_capture

        read = self._read if self._read is not None and block == self.block else None
        x = load_capture(path, self.ctx.capture_context(), block, self.device, read)
        if read is not None:
            self._read = None  # its host copy goes once on the device
        progress(f"block {block}: input from {path}")
        lap("input_s")
        self.model.blocks[block]  # made here rather than in the forward's first line: the same order
        lap("model_s")
        cap = self.model.capture_at(block, x)
        lap("first_s")
        return cap

    def baseline_artifact(self, here: dict | None = None) -> dict:
        """The shared baseline artifact this rung reads, checked against its context (ArtifactError if not)."""
        from h3gates.rungs.artifacts import load

        return load(self.ctx.baseline_artifact, self.ctx.artifact_context(), here)

    def with_candidate(self) -> dict:
        return {**self.baseline, **self.candidate}

    def fail(self, reason: str) -> None:
        self.reasons.append(reason)

    def untrusted(self, e: Exception) -> None:
        """Fail because the shared baseline artifact cannot be trusted here (an ArtifactError): not the kernel's doing."""
        from h3gates.core.errors import UNTRUSTED

        # the reason says what is wrong; the way on is the pass token's (h3gates.core.tokens): it moves this report and
        # the file the measurements name aside, so that the same command makes both again (a rerun alone would not)
        self.fail(f"{UNTRUSTED}{getattr(e, 'problem', e)}")
        self.untrusted_artifact = {"path": getattr(e, "path", None)}

    def note(self, text: str) -> None:
        self.notes.append(text)

    def dump(self, out: Path, tag: str, kind: str, **case) -> None:
        """Everything `python -m h3gates replay` needs to rerun one failing case: the rung context
        (candidate, config, device), what to compare (`producer` or `gemm`), and the case's inputs
        and seeds. The first REPLAY_LIMIT failing cases are dumped; the report counts the others."""
        if len(self.replay) >= REPLAY_LIMIT:
            self.replay_dropped += 1
            return
        self.replay.append(
            dump_replay(
                out.parent / f"{out.stem}.replay.{tag}.pt",
                kind=kind,
                context=self.ctx.to_dict(),
                rung=self.rung,
                block=self.block,
                **case,
            )
        )

    @property
    def at(self) -> str | None:
        """The case being run, for a crash report (setting it forgets the inputs of the case before)."""
        return self._at

    @at.setter
    def at(self, value: str | None) -> None:
        self._at, self.pending = value, None

    def case(self, at: str, tag: str, kind: str, **case) -> None:
        """The case about to run: what a crash report names (`at`) and, should the candidate raise on it, the
        replay dump it gets (gate.dump's arguments)."""
        self._at, self.pending = at, {"tag": tag, "kind": kind, **case}

    def write(self, out, measurements: dict, timing: dict | None = None) -> str:
        if not self._digests:  # a report without its upstream digests would read as one that read nothing
            raise RuntimeError(
                f"rung {self.rung}: this gate was made without its upstream digests and writes no report"
            )
        if self.replay_dropped:
            self.note(
                f"{len(self.replay) + self.replay_dropped} failing cases, {len(self.replay)} dumped for replay (the first; the rest are in the report)"  # noqa: E501
            )
        doc = {
            "schema_version": report.SCHEMA_VERSION,
            "rung": self.rung,
            "rung_name": RUNG_NAMES[self.rung],
            "candidate": self.name,
            "flag": self.spec.flag,
            "roles": list(self.spec.roles),
            "overrides": list(self.spec.overrides),
            "block": self.block,
            "profile": self.model_profile.to_dict(),
            "device": environment(self.device),
            "reference": self.reference_q.describe(),
            "baseline": {"accepted": self.ctx.baseline["accepted"]},
            **self.provenance,
            "upstream": self.upstream,
            "pins": self.pins,
            "measurements": measurements,
            "timing": timing,
        }
        # the failures the gate found are measurements too (h3gates.core.derive re-derives the verdict from the
        # numbers and these): a failure its numbers cannot show, e.g. a shared artifact it could not trust
        if self.reasons:
            measurements["gate_failures"] = list(self.reasons)
        if self.untrusted_artifact is not None:
            measurements["untrusted_artifact"] = self.untrusted_artifact
        doc = {
            **doc,
            "verdict": "fail" if self.reasons else "pass",
            "reasons": self.reasons,
            "notes": self.notes,
            "replay": self.replay,
        }
        report.write(out, doc)
        from h3gates.core.links import remove_stale_replays  # (here: a timing worker imports this module, not links)

        remove_stale_replays(out, self.replay)  # dumps of an earlier run of this gate, and their links
        progress(
            f"rung {self.rung} {self.name}{'' if self.block is None else f' block {self.block}'}: {doc['verdict'].upper()}"
            + (f" ({self.reasons[0]})" if self.reasons else "")
            + "".join(f"; NOTE: {n}" for n in self.notes)
        )
        return doc["verdict"]


def environment(device) -> dict:
    """The report's `device`: the machine (h3gates.core.machine: host, GPU with its name, SM count,
    capability, driver and CUDA, the libraries, the GPU lease of this job) and the GEMM backend whose
    bytes the gate's reference depends on."""
    from h3gates.nvfp4.gemm import backend_info

    return {**machine.describe(device), "gemm": backend_info(device)}
