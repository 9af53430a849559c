"""Build what a rung runs: the baseline roles (the library path plus every accepted candidate, in
order, each on top of the ones before) and the candidate's roles on top of that baseline."""

from __future__ import annotations

from . import registry
from .roles import reference_roles


def params_of(name: str, cand_cfg: dict) -> dict:
    return {**registry.get(name).param_defaults(), **cand_cfg.get("params", {})}


def build_one(name: str, cand_cfg: dict, device: str, reference, base: dict, level: str = "schedule") -> dict:
    """{role: Role} of one candidate as configured, on top of `base`. level="kernel" asks for the
    kernel alone where the module has `build_kernel` (e.g. the ring's chunk quantizer over the whole
    activation), which rungs 1-2 gate before the schedule is exercised at rung 3."""
    path = registry.module_path(name, cand_cfg, device)
    mod = registry.load_module(path)
    make = getattr(mod, "build_kernel", mod.build) if level == "kernel" else mod.build
    roles = make(params_of(name, cand_cfg), reference, dict(base))
    missing = set(registry.get(name).roles) - set(roles)
    if missing:
        raise ValueError(f"{name}: kernel {path} provides no implementation for roles {sorted(missing)}")
    return roles


def baseline_roles(ctx: dict, device: str, reference) -> dict:
    roles = reference_roles(reference)
    for acc in ctx["baseline"]["accepted"]:
        roles.update(build_one(acc, ctx["baseline"]["candidates"][acc], device, reference, roles))
    return roles
