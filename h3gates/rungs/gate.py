"""What every rung needs: the device and its reference, the baseline roles and the candidate's roles on
top of them, the model (built on first use), and the report header (provenance, environment, verdict)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from .. import candidates, nvfp4, registry, report
from ..model import build, load_profile
from ..paths import RUNG_NAMES
from ..provenance import artifact_files, provenance
from ..reference import Reference
from ..roles import reference_roles

CURRENT: list = []  # the gate of this process, for the crash handler


def progress(msg: str) -> None:
    now = time.time()
    print(f"[h3gates {time.strftime('%H:%M:%S', time.localtime(now))}.{int(now % 1 * 1000):03d}] {msg}", file=sys.stderr, flush=True)


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("config asks for device: cuda but no CUDA GPU is visible")
    return device


class Gate:
    """One rung of one candidate: `reference` roles (the library path), `baseline` roles (the library
    path with the accepted candidates), `candidate` roles (the candidate's own, built on the baseline)."""

    def __init__(self, ctx: dict, rung: int, block: int | None = None, upstream=()):
        CURRENT[:] = [self]
        self.ctx, self.rung, self.block = ctx, rung, block
        self.at: str | None = None  # the case being run, for a crash report
        self.device = resolve_device(ctx["device"])
        self.reference_q = Reference(self.device, ctx["semantics"], ctx["rcp_table"])
        self.name = ctx["candidate"]
        self.spec = registry.get(self.name)
        self.reasons: list[str] = []
        self.notes: list[str] = []  # what a reader must know about a pass (e.g. a gate recorded but not enforced)
        self.replay: list[str] = []
        self.upstream = {str(p): report.file_sha256(p) for p in upstream}
        # every workflow artifact the context names for this rung (and block) is an upstream digest, whatever
        # the caller passed: promotion checks what a report read (one missing here fails the rung that reads it)
        for p in artifact_files(ctx, block):
            if p not in self.upstream and Path(p).is_file():
                self.upstream[p] = report.file_sha256(p)
        self.config = load_profile(ctx["profile"], ctx.get("user_profiles"))
        self.provenance = provenance(ctx)
        self._model = None
        self._scheduled = None
        self.reference = reference_roles(self.reference_q)
        self.baseline = candidates.baseline_roles(ctx, self.device, self.reference_q, self.config)
        # rungs 1-2 gate a candidate's kernel; its schedule (e.g. the ring's chunks) from rung 3 on
        level = "kernel" if rung <= 2 else "schedule"
        self.candidate = candidates.build_one(self.name, ctx["candidate_config"], self.device, self.reference_q, self.baseline, level, ctx, self.config)
        # what a candidate's bytes hold only with (e.g. fc2_algo's cuBLASLt algorithm, library and GPU)
        self.pins = {role: part.pin() for role, r in sorted(self.candidate.items()) for part in (r.producer, r.gemm) if callable(getattr(part, "pin", None))}

    def scheduled(self) -> dict:
        """The candidate's roles as the model runs them (its schedule, e.g. the ring's chunks), also at
        rungs 1-2 where `candidate` is its kernel alone."""
        if self.rung > 2:
            return self.candidate
        if self._scheduled is None:
            self._scheduled = candidates.build_one(self.name, self.ctx["candidate_config"], self.device, self.reference_q, self.baseline, "schedule", self.ctx, self.config)
        return self._scheduled

    @property
    def model(self):
        """The model; where the context names captured block inputs (rungs 3, 4, 8), its blocks are made on
        first use (only the gated block's, the bytes of a full build)."""
        if self._model is None:
            lazy = bool(self.ctx.get("captures"))
            progress(f"building the {self.config.name} model on {self.device}" + (" (blocks on first use)" if lazy else ""))
            self._model = build(self.config, seed=self.ctx["seed"], device=self.device, reference=self.reference_q, lazy=lazy)
        return self._model

    def capture(self, block: int):
        """The reference inputs of `block` (its input and each role's): from the block input the shared
        capture artifact holds when the context names one (checked: h3gates.baseline.load_capture), else
        by running the reference model up to the block in this process."""
        path = self.ctx.get("captures", {}).get(str(block))
        if path is None:
            return self.model.capture(block)
        from ..baseline import load_capture

        x = load_capture(path, self.ctx, block, self.device)
        progress(f"block {block}: input from {path}")
        return self.model.capture_at(block, x)

    def with_candidate(self) -> dict:
        return {**self.baseline, **self.candidate}

    def fail(self, reason: str) -> None:
        self.reasons.append(reason)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def dump(self, out: Path, tag: str, kind: str, **case) -> None:
        """Everything `python -m h3gates replay` needs to rerun one failing case: the rung context
        (candidate, config, device), what to compare (`producer` or `gemm`), and the case's inputs
        and seeds."""
        self.replay.append(nvfp4.dump_replay(out.parent / f"{out.stem}.replay.{tag}.pt", kind=kind, context=self.ctx, rung=self.rung, block=self.block, **case))

    def write(self, out, measurements: dict, timing: dict | None = None) -> str:
        doc = {
            "schema_version": report.SCHEMA_VERSION,
            "rung": self.rung,
            "rung_name": RUNG_NAMES[self.rung],
            "candidate": self.name,
            "flag": self.spec.flag,
            "roles": list(self.spec.roles),
            "overrides": list(self.spec.overrides),
            "block": self.block,
            "profile": self.config.to_dict(),
            "device": report.environment(self.device),
            "reference": self.reference_q.describe(),
            "baseline": {"accepted": self.ctx["baseline"]["accepted"]},
            **self.provenance,
            "upstream": self.upstream,
            "pins": self.pins,
            "measurements": measurements,
            "timing": timing,
            "verdict": "fail" if self.reasons else "pass",
            "reasons": self.reasons,
            "notes": self.notes,
            "replay": self.replay,
        }
        report.write(out, doc)
        for old in Path(out).parent.glob(f"{Path(out).stem}.replay.*.pt"):  # dumps of an earlier run of this gate
            if old.name not in self.replay:
                old.unlink()
        progress(f"rung {self.rung} {self.name}{'' if self.block is None else f' block {self.block}'}: {doc['verdict'].upper()}" + (f" ({self.reasons[0]})" if self.reasons else "")
                 + "".join(f"; NOTE: {n}" for n in self.notes))
        return doc["verdict"]
