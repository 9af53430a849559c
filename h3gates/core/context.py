"""What a rung and a shared baseline artifact run with, built once from the validated config.

`SharedContext` is what both depend on: the model profile, the device and its reference semantics, the
seed, the GEMM reference and the accepted baseline with its candidates' configs. `RungContext` is the
typed object a gate runs with: that shared part, the candidate and its config, the rung and its
parameters, the workflow artifacts it reads (a study's output, the shared baseline artifact, the
captured block inputs). `ArtifactContext` is a shared baseline artifact's (the baseline side of rungs
5-7, rung 8's Nsight capture on a GPU, and "rung 0": the captured inputs of the gated blocks): the same
shared part (without the baseline for the captures), the rung, the steps and rung 8's profiled block.

Each has one builder (`SharedContext.of`, `RungContext.from_config`, `ArtifactContext.of`), travels to
its job as JSON (`to_json`, a flat dict: the shared part's keys beside the context's own) and is parsed
once there (`from_json`). A rung context's dict (without the artifacts' paths) is what the config digest
of every report covers; an artifact's key is the digest of its context's dict and of the files computing
it (`artifact_files`: the accepted candidates' kernels and the import closure of the module that computes
them, h3gates.rungs.artifacts or h3gates.rungs.r8_baseline). No torch import.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace

from h3gates.core import registry
from h3gates.core.candconfig import cand_config, enforce_perf, scheduling_keys
from h3gates.core.errors import ConfigError, GemmReferenceMismatch
from h3gates.core.fingerprints import ROOT, digest, files_digest, imported, with_loads
from h3gates.core.jobs import FP4_MMA_MAJORS, configured_device, gpu_capabilities
from h3gates.core.outputs import RESULTS, results_name

CAPTURES = 0  # the "rung" of the captured block inputs (rungs 3, 4 and 8 read them)
ENTRY = (
    "h3gates/rungs/artifacts.py"  # the module computing the artifacts of rungs 0 and 5-7 (its import closure keys them)
)
ENTRY_R8 = "h3gates/rungs/r8_baseline.py"  # rung 8's Nsight Compute capture of the baseline block


# ------------------------------------------------------------------ the config's parts, per rung
def rung_params(config: dict, rung: int) -> dict:
    """The config keys a rung's result depends on (besides the shared part)."""
    if rung == 1:
        return {"random_shapes": config["adversarial"]["random_shapes"]}
    if rung == 2:
        return dict(config["tiles"])
    if rung == 4:
        return {**config["timing"], "enforce": enforce_perf(config)}
    if rung == 7:
        return {"steps": config["trajectory"]["steps"]}
    if rung == 8:
        return dict(config["profiler"])
    return {}


def gemm_reference(config: dict) -> str:
    """The GEMM reference this machine's rungs compare against (ladder.md, "Reference by hardware"): Comfy
    Kitchen's scaled_mm_nvfp4 where the GPU has FP4 MMA (capability 10.x, 12.x), the exact emulation
    elsewhere (the H200, CPUs). Part of every context, so of every report's config digest, every baseline
    key and every record; a job on a machine that would choose otherwise is refused
    (h3gates.model.reference)."""
    if configured_device(config) != "cuda":
        return "emulated"
    kinds = set()
    for cap in gpu_capabilities():
        if cap[0] in FP4_MMA_MAJORS:
            kinds.add("fp4_mma")
        elif cap < (10, 0):
            kinds.add("emulated")
        else:
            raise ConfigError(
                f"a GPU of compute capability {cap[0]}.{cap[1]}: neither FP4 MMA (10.x, 12.x) nor without it (< 10.0), "
                "so neither GEMM reference is known to hold there (docs/hardware.md)"
            )
    if len(kinds) > 1:
        raise ConfigError(
            f"GPUs of capabilities {list(gpu_capabilities())} on one host need different GEMM references: lease one kind"
        )
    return kinds.pop() if kinds else "emulated"


def check_planned_reference(ctx) -> None:
    """What every job does first (rung, baseline, perf-worker, profile-target), before its lease, any torch
    import or model build: refuse in one line (a ConfigError: exit 2, nothing checked, no report) where
    this host is not the one the job was planned for. `ctx`: a RungContext, an artifact context (dict) or
    either's JSON. Torch-free: the host is asked through nvidia-smi (h3gates.core.jobs), as the DAG was.
    - The GEMM reference this host would choose (gemm_reference) must be the one the context names
      (GemmReferenceMismatch): its reports and keys say which reference their bytes were gated against.
    - The declared needs of the candidate's implementation and of the accepted candidates' (compute
      capabilities, reference semantics, packages: registry.unmet_needs) must hold on this host: a
      login node without a GPU plans them unchecked, the job host checks them."""
    d = json.loads(ctx) if isinstance(ctx, str) else ctx if isinstance(ctx, dict) else ctx.to_dict()
    device, planned = d["device"], d.get("gemm_reference")
    here = gemm_reference({"device": device})
    caps = gpu_capabilities() if device == "cuda" else ()
    host = (
        f"its GPUs are of compute capability {', '.join(f'{a}.{b}' for a, b in caps)}"
        if caps
        else "no GPU answers nvidia-smi here"
        if device == "cuda"
        else f"the device is {device}"
    )
    if planned is not None and planned != here:
        raise GemmReferenceMismatch(
            f"this job was planned with the {planned} GEMM reference, but this host would choose {here} ({host}), "
            "so its bytes would be gated against another reference than its context names (docs/hardware.md); "
            f"fix: plan the run where its jobs run (snakemake on a host of that GPU kind), or run it on GPUs that choose {planned}"
        )
    cands = dict((d.get("baseline") or {}).get("candidates") or {})
    if d.get("candidate"):
        cands[d["candidate"]] = d["candidate_config"]
    for name, cfg in cands.items():
        why = registry.unmet_needs(name, cfg, device, caps, d["semantics"])
        if why:
            raise ConfigError(
                f"{name} cannot run on this host ({host}): {why}; fix: run the workflow where its needs hold, or leave {name} out"
            )


def candidate_config(config: dict, candidate: str) -> dict:
    """The config as one candidate's promotion sees it: other candidates' settings left out, so
    changing them does not touch this candidate's record, and so is every key the schema marks `x-scheduling`
    (`gpu`, how jobs share a GPU: scheduling, on which no report depends)."""
    keep, drop = {candidate, *config["baseline"]["accepted"]}, scheduling_keys()
    out = {k: v for k, v in config.items() if k not in drop}
    return {**out, "candidates": {k: v for k, v in config["candidates"].items() if k in keep}}


def results_name_of(config: dict, candidate: str) -> str:
    """The name a candidate's results go under in this config: its own, or `<name>@<stem>` where its config
    names a `source:` variant (h3gates.core.outputs.results_name): its reports, tokens, record and flag."""
    return results_name(candidate, cand_config(config, candidate).get("source"))


# ------------------------------------------------------------------ the shared part
class _OnShared:
    """The shared part's fields, read through a context (`ctx.device` is `ctx.shared.device`)."""

    shared: SharedContext

    @property
    def profile(self) -> str:
        return self.shared.profile

    @property
    def user_profiles(self) -> dict:
        return self.shared.user_profiles

    @property
    def device(self) -> str:
        return self.shared.device

    @property
    def semantics(self) -> str:
        return self.shared.semantics

    @property
    def rcp_table(self) -> str:
        return self.shared.rcp_table

    @property
    def seed(self) -> int:
        return self.shared.seed

    @property
    def gemm_reference(self) -> str:
        return self.shared.gemm_reference

    @property
    def baseline(self) -> dict | None:
        return self.shared.baseline


@dataclass(frozen=True)
class SharedContext:
    """What every rung and every baseline artifact depends on: the model profile, the device and its
    reference semantics, the seed, the GEMM reference, and the accepted baseline with its candidates'
    configs (None in the captured block inputs' context: they run the library path, its GEMMs included)."""

    profile: str
    user_profiles: dict
    device: str
    semantics: str
    rcp_table: str
    seed: int
    gemm_reference: str  # "emulated" or "fp4_mma" (gemm_reference)
    baseline: dict | None  # {"accepted": [...], "candidates": {name: config}}; None: the captures' context

    @classmethod
    def of(cls, config: dict) -> SharedContext:
        """The one builder, from the validated config."""
        acc = config["baseline"]["accepted"]
        name = config["profile"]
        return cls(
            profile=name,
            user_profiles={name: config["profiles"][name]} if name in config["profiles"] else {},
            device=configured_device(config),
            semantics=config["semantics"],
            rcp_table=config["rcp_table"],
            seed=config["seed"],
            gemm_reference=gemm_reference(config),
            baseline={"accepted": acc, "candidates": {a: cand_config(config, a) for a in acc}},
        )

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.baseline is None:
            del d["baseline"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> SharedContext:
        return cls(**{**d, "baseline": d.get("baseline")})


SHARED_FIELDS = tuple(f.name for f in fields(SharedContext))


def _split(d: dict, own: tuple[str, ...], kind: str) -> tuple[SharedContext, dict]:
    """A context's flat dict as (its shared part, its own keys); a key of neither refused."""
    unknown = sorted(set(d) - set(SHARED_FIELDS) - set(own))
    if unknown:
        raise ValueError(f"{kind}: unknown keys {unknown} (known: {sorted((*SHARED_FIELDS, *own))})")
    shared = SharedContext.from_dict({k: d[k] for k in SHARED_FIELDS if k in d})
    return shared, {k: d[k] for k in own if k in d}


# ------------------------------------------------------------------ shared baseline artifacts
@dataclass(frozen=True)
class ArtifactContext(_OnShared):
    """The context of a shared baseline artifact: the shared part (without the baseline for the captured
    block inputs, "rung 0"), the rung, the trajectory length (rung 6: two steps, rung 7: the configured
    ones) and rung 8's profiled block. Its dict is what the artifact's key covers and what the artifact
    records of itself."""

    shared: SharedContext
    rung: int
    steps: int | None = None
    profiler: dict | None = None  # rung 8: {"block", "ncu_timeout"}

    @classmethod
    def of(cls, shared: SharedContext, rung: int, params: dict) -> ArtifactContext:
        """The one builder, from a shared part and the rung's params: rung 0 (the captured block inputs)
        keeps the model and the device's reference only; rungs 5-8 the accepted baseline too, the
        trajectory length (5: one step, 6: two) and rung 8's profiled block."""
        if rung == CAPTURES:
            return cls(replace(shared, baseline=None), CAPTURES)
        return cls(
            shared,
            rung,
            steps={5: None, 6: 2, 7: params.get("steps"), 8: None}[rung],
            profiler={k: params[k] for k in ("block", "ncu_timeout")} if rung == 8 else None,
        )

    @property
    def artifacts(self) -> dict:
        """The candidates' own workflow artifacts an artifact's job reads: none (its inputs are its files
        and, for rung 8, its block's capture)."""
        return {}

    def capture_context(self) -> ArtifactContext:
        """The context of the captured block inputs of this artifact's shared part (rung 8 starts from one)."""
        return ArtifactContext.of(self.shared, CAPTURES, {})

    def to_dict(self) -> dict:
        """The JSON the job receives, the key covers and the artifact records (flat: the shared part's keys,
        the rung, and for rungs 5-8 the steps, for rung 8 the profiler)."""
        d = {**self.shared.to_dict(), "rung": self.rung}
        if self.rung != CAPTURES:
            d["steps"] = self.steps
        if self.profiler is not None:
            d["profiler"] = dict(self.profiler)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> ArtifactContext:
        shared, own = _split(d, ("rung", "steps", "profiler"), "an artifact context")
        return cls(shared, **own)

    @classmethod
    def from_json(cls, text: str) -> ArtifactContext:
        return cls.from_dict(json.loads(text))


def baseline_context(config: dict, rung: int) -> ArtifactContext:
    """The context of the baseline side of rung 5, 6, 7 or 8 under `config`."""
    return ArtifactContext.of(SharedContext.of(config), rung, rung_params(config, rung))


def capture_context(shared: SharedContext) -> ArtifactContext:
    """The context of the captured block inputs (from any context's shared part)."""
    return ArtifactContext.of(shared, CAPTURES, {})


def artifact_files(actx: ArtifactContext, root=None) -> list[str]:
    """The files an artifact's bytes depend on: the accepted candidates' kernel files and the h3gates
    modules its computation imports (with the .cu files they compile on a GPU)."""
    out = []
    base = actx.baseline or {"accepted": [], "candidates": {}}
    for acc in base["accepted"]:
        out += [f for f in registry.sources(acc, base["candidates"][acc], actx.device, root) if f not in out]
    entries = (ENTRY if actx.rung != 8 else ENTRY_R8, *[f for f in out if f.endswith(".py")])
    return out + with_loads([f for f in imported(entries, str(root or ROOT)) if f not in out], actx.device, root)


def artifact_key(actx: ArtifactContext, root=None) -> str:
    return digest({"context": actx.to_dict(), "files": files_digest(artifact_files(actx, root), root)})[:16]


def artifact_path(actx: ArtifactContext, root=None, block: int | None = None) -> str:
    tail = f".block{int(block)}" if actx.rung == CAPTURES else ""
    return f"{RESULTS}/{actx.profile}/baseline/r{actx.rung}-{artifact_key(actx, root)}{tail}.pt"


def captured_blocks(config: dict) -> list[int]:
    """The blocks whose inputs are captured: the gated blocks and rung 8's block."""
    return sorted({*config["blocks"], config["profiler"]["block"]})


def captures_for(config: dict, rung: int, shared: SharedContext | None = None) -> dict[str, str]:
    """{block: capture path} of the blocks a rung starts from: rungs 3 and 4 the gated blocks, rung 8 its
    block; other rungs none."""
    blocks = config["blocks"] if rung in (3, 4) else [config["profiler"]["block"]] if rung == 8 else []
    cctx = capture_context(shared or SharedContext.of(config))
    return {str(b): artifact_path(cctx, block=b) for b in blocks}


def reads_baseline_artifact(rung: int, device: str) -> bool:
    """Rungs 5-7 always read a baseline artifact; rung 8 on a GPU (its Nsight Compute capture; on a CPU
    rung 8 is a torch-profiler capture of both sides in its own process)."""
    return rung in (5, 6, 7) or (rung == 8 and device == "cuda")


def artifact_meta(actx: ArtifactContext, root=None) -> dict:
    """What the computing job writes into an artifact besides its outputs: the context, the key and the
    behaviour digest of each file it was computed from (h3gates.core.sourcedigest; the CLI passes it: the
    computing module needs no key code)."""
    from h3gates.core.sourcedigest import source_sha256

    return {
        "context": actx.to_dict(),
        "key": artifact_key(actx, root),
        "files": {f: source_sha256(ROOT / f) for f in artifact_files(actx, root)},
    }


# ------------------------------------------------------------------ the rung context
@dataclass(frozen=True)
class RungContext(_OnShared):
    shared: SharedContext
    candidate: str
    candidate_config: dict
    rung: int
    rung_params: dict
    artifacts: dict = field(default_factory=dict)  # {candidate: {name: path}}: studies the candidate's rungs read
    baseline_artifact: str | None = None  # rungs 5-7 (and 8 on a GPU): the shared baseline side
    captures: dict = field(default_factory=dict)  # {block: path}: rungs 3, 4 and 8 start from their block's input

    @classmethod
    def from_config(cls, config: dict, candidate: str, rung: int) -> RungContext:
        """The one builder, from the validated config."""
        shared = SharedContext.of(config)
        acc = config["baseline"]["accepted"]
        params = rung_params(config, rung)
        reads = reads_baseline_artifact(rung, shared.device)
        return cls(
            shared,
            candidate=candidate,
            candidate_config=cand_config(config, candidate),
            rung=rung,
            rung_params=params,
            artifacts={
                c: a
                for c in (candidate, *acc)
                if (a := registry.artifacts(c, cand_config(config, c), config["profile"]))
            },
            baseline_artifact=artifact_path(ArtifactContext.of(shared, rung, params)) if reads else None,
            captures=captures_for(config, rung, shared),
        )

    @classmethod
    def from_dict(cls, d: dict) -> RungContext:
        own = ("candidate", "candidate_config", "rung", "rung_params", "artifacts", "baseline_artifact", "captures")
        shared, rest = _split(d, own, "a rung context")
        if shared.baseline is None:
            raise ValueError("a rung context: no baseline (every rung runs on the accepted baseline)")
        return cls(shared, **rest)

    @classmethod
    def from_json(cls, text: str) -> RungContext:
        return cls.from_dict(json.loads(text))

    def to_dict(self) -> dict:
        """The JSON the job receives (flat: the shared part's keys, then the rung's; optional parts only
        where present)."""
        d = {
            **self.shared.to_dict(),
            **{k: getattr(self, k) for k in ("candidate", "candidate_config", "rung", "rung_params", "artifacts")},
        }
        if self.baseline_artifact is not None:
            d["baseline_artifact"] = self.baseline_artifact
        if self.captures:
            d["captures"] = dict(self.captures)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @property
    def results_name(self) -> str:
        """Where this candidate's results go (a `source:` variant's beside the candidate's own)."""
        return results_name(self.candidate, self.candidate_config.get("source"))

    def artifact_context(self) -> ArtifactContext:
        """The context of the baseline artifact this rung reads (rungs 5-8)."""
        return ArtifactContext.of(self.shared, self.rung, self.rung_params)

    def capture_context(self) -> ArtifactContext:
        return capture_context(self.shared)

    def config_digest(self) -> str:
        """The digest of the rung's configuration. The artifacts' paths are left out: they carry a content
        key, and each artifact's own SHA-256 is an upstream digest of the report (a module edit is then
        reported as the code or the artifact that changed, not as a config change)."""
        return digest({k: v for k, v in self.to_dict().items() if k not in ("baseline_artifact", "captures")})

    def workflow_artifacts(self, block=None) -> list[str]:
        """Workflow artifacts the rung reads: the candidate's (and the accepted candidates') own, e.g. a
        sweep; for rungs 5-7 (and 8 on a GPU) the shared baseline artifact; for rungs 3 and 4 (of
        `block`) and 8 the captured input of their block. Inputs of the rung, recorded among the
        report's upstream digests."""
        out = [p for arts in self.artifacts.values() for p in arts.values()]
        if self.rung in (3, 4):
            out += [self.captures[str(block)]] if block is not None and str(block) in self.captures else []
        else:
            out += list(self.captures.values())
        return out + ([self.baseline_artifact] if self.baseline_artifact else [])


class Contexts:
    """Every rung context of one config, each built once (the Snakefile asks for the same one many times)."""

    def __init__(self, config: dict):
        self.config = config
        self._made: dict = {}

    def __call__(self, candidate: str, rung: int) -> RungContext:
        key = (candidate, rung)
        if key not in self._made:
            self._made[key] = RungContext.from_config(self.config, candidate, rung)
        return self._made[key]
