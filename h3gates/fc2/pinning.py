"""The `cublaslt` pin of fc2_algo checked on this machine: the cuBLASLt version, GPU name and SM count
must be those the gates ran with (h3gates.fc2.spec.check_pin). Imports torch and nvmath only when
called."""

from __future__ import annotations

from h3gates.core import machine
from h3gates.fc2 import spec as S


def environment_here() -> dict:
    """{gpu, sm_count, cublaslt_version} of this machine (the GPU fields of h3gates.core.machine's
    description, cuBLASLt's version through nvmath); a value is None where it cannot be known, and
    `unavailable` says why."""
    env = dict.fromkeys(S.PIN_KEYS)
    try:
        import torch
    except ImportError as e:
        return {**env, "unavailable": f"torch is not importable ({e})"}
    if not torch.cuda.is_available():
        return {**env, "unavailable": "no CUDA GPU is visible here"}
    m = machine.describe("cuda")
    env.update(gpu=m["gpu"], sm_count=m["sm_count"])
    try:
        from h3gates.fc2 import cublaslt

        env["cublaslt_version"] = int(cublaslt.lib().lt.get_version())
    except cublaslt.NvmathMissing as e:
        env["unavailable"] = str(e)
    return env


def check(pin: dict) -> list[str]:
    env = environment_here()
    reasons = S.check_pin(pin, env)
    if reasons and env.get("unavailable"):
        reasons.append(
            f"{env['unavailable']}: the algorithm's bytes were measured on {pin.get('gpu')!r} ({pin.get('sm_count')} SMs) "
            f"with cuBLASLt {pin.get('cublaslt_version')}, and hold only there"
        )
    return reasons
