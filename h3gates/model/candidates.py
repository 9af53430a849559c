"""Build what a rung runs: the baseline roles (the library path plus every accepted candidate, in
order, each on top of the ones before) and the candidate's roles on top of that baseline."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

from h3gates.core import registry
from h3gates.model.roles import reference_roles


@dataclass(frozen=True)
class Workflow:
    """What a kernel module's `build(params, reference, base, workflow)` may ask of the run it is built
    for, when its signature names `workflow`: the model profile and the candidate's artifacts."""

    profile: object = None  # h3gates.core.model_profiles.H3Config
    artifacts: dict = field(default_factory=dict)  # {name: path} (registry.artifacts)


def build_one(
    name: str, cand_cfg: dict, device: str, reference, base: dict, level: str = "schedule", profile=None, artifacts=None
) -> dict:
    """{role: Role} of one candidate as configured, on top of `base`. level="kernel" asks for the
    kernel alone where the module has `build_kernel` (e.g. the ring's chunk quantizer over the whole
    activation), which rungs 1-2 gate before the schedule is exercised at rung 3. `profile` (an
    H3Config) and `artifacts` ({name: path}) are what a module's `build(..., workflow)` may ask for."""
    path = registry.module_path(name, cand_cfg, device)
    mod = registry.load_module(path)
    make = getattr(mod, "build_kernel", mod.build) if level == "kernel" else mod.build
    args = [cand_cfg["params"], reference, dict(base)]  # defaults filled by the validated config
    if "workflow" in inspect.signature(make).parameters:
        roles = make(*args, workflow=Workflow(profile, dict(artifacts or {})))
    else:
        roles = make(*args)
    missing = set(registry.get(name).roles) - set(roles)
    if missing:
        raise ValueError(f"{name}: kernel {path} provides no implementation for roles {sorted(missing)}")
    return roles


def baseline_roles(baseline: dict, device: str, reference, profile=None, artifacts: dict | None = None) -> dict:
    """The library path's roles with each accepted candidate (`baseline`: {accepted, candidates}) on top,
    in order. `artifacts`: {candidate: {name: path}}, the workflow artifacts the accepted candidates may read."""
    arts = artifacts or {}
    roles = reference_roles(reference)
    for acc in baseline["accepted"]:
        roles.update(
            build_one(
                acc, baseline["candidates"][acc], device, reference, roles, profile=profile, artifacts=arts.get(acc)
            )
        )
    return roles
