"""The one role setup: from the typed shared part of a context, a RungContext's or an ArtifactContext's
(profile, device, semantics, reciprocal table, seed, accepted baseline), the device a job runs on, its
reference quantizer, the model's shapes, the library path's roles and the baseline's roles (the library
path plus every accepted candidate, in order), and the model built on first use. Every gate, every
baseline artifact, rung 8's profiled children and `replay` start here."""

from __future__ import annotations

from dataclasses import dataclass, field

from h3gates.core.jobs import progress, runtime_device
from h3gates.core.model_profiles import H3Config, load_profile
from h3gates.model.candidates import baseline_roles
from h3gates.model.reference import Reference
from h3gates.model.roles import reference_roles


@dataclass
class RoleSetup:
    ctx: object  # a RungContext or an ArtifactContext (h3gates.core.context; not imported: no key code here)
    device: str
    reference_q: Reference
    profile: H3Config
    reference: dict  # {role: Role}: the library path
    baseline: dict  # {role: Role}: the library path with the accepted candidates
    lazy: bool = True  # blocks made on first use (a job that runs a few blocks)
    _model: object = field(default=None, repr=False)

    @classmethod
    def of(cls, ctx, lazy: bool = True) -> RoleSetup:
        shared = ctx.shared  # the typed shared part both kinds of context carry
        device = runtime_device(shared.device)
        ref = Reference(device, shared.semantics, shared.rcp_table, gemm_reference=shared.gemm_reference)
        prof = load_profile(shared.profile, shared.user_profiles)
        accepted = shared.baseline or {"accepted": [], "candidates": {}}  # the captures run the library path
        base = baseline_roles(accepted, device, ref, prof, ctx.artifacts)
        return cls(ctx, device, ref, prof, reference_roles(ref), base, lazy)

    @property
    def model(self):
        if self._model is None:
            from h3gates.model.h3 import build

            progress(
                f"building the {self.profile.name} model on {self.device}"
                + (" (blocks on first use)" if self.lazy else "")
            )
            self._model = build(
                self.profile,
                seed=self.ctx.shared.seed,
                device=self.device,
                reference=self.reference_q,
                lazy=self.lazy,
            )
        return self._model

    def drop_model(self) -> None:
        self._model = None
