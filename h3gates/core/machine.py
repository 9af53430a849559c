"""The machine a result is made on, described once: a report's `device` (h3gates.rungs.gate), what a
shared baseline artifact is checked against (h3gates.rungs.artifacts: a projection of it), the FC2
study's `environment` and the fc2_algo pin's check (h3gates.fc2), and the doctor's `machine`.

Importable without torch (the core's rule): torch and the GPU are asked only inside `describe`.

`describe(device)` returns every field below; a field is None where it cannot be known here, and the
GPU fields are None on a CPU device (and where torch sees no GPU). The fields are the union of what the
copies it replaces recorded, under one name each:

  python, platform        Python's version, platform.platform()
  host                    the CPU architecture, platform.machine() (the reports' name for it)
  hostname                the node name, platform.node() (the doctor's former `host`)
  cpu_count, cpu_threads  os.cpu_count(), torch's intra-op threads (the reports recorded it on a CPU)
  torch, cuda             torch's version and the CUDA runtime it was built with (None: a CPU build;
                          the doctor's former `cuda_runtime`)
  comfy_kitchen           the installed comfy-kitchen (the oracle of every gate)
  device_type             "cpu" or "cuda", of the device asked about
  cuda_available          whether torch sees a CUDA GPU
  gpu, gpu_uuid           the GPU's name and UUID
  capability, sm_count    "major.minor", streaming multiprocessors
  gpu_memory_gib          the GPU's memory, GiB to one decimal
  cublas                  torch's preferred BLAS library
  driver                  the NVIDIA driver (NVML, else `nvidia-smi` through h3gates.core.jobs; the
                          host's, so also known on a CPU device of a GPU host)
  gpu_lease               this job's GPU lease (h3gates.core.lease: index, UUID, seconds waited), or None

Layers above add what only they can know: the report its GEMM backend (`gemm`), rung 8's artifacts the
Nsight Compute version (`ncu`), the FC2 study and the pin cuBLASLt's version and libraries (nvmath), the
doctor the device it checked and whether the capability is faked.
"""

from __future__ import annotations

import functools
import os
import platform
from importlib import metadata

# what a shared baseline artifact's bytes depend on besides its context and code (h3gates.rungs.artifacts)
ARTIFACT_FIELDS = ("torch", "comfy_kitchen", "gpu", "sm_count", "cuda")


def package_version(name: str) -> str | None:
    """The installed distribution's version, or None."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def driver_version() -> str | None:
    """The NVIDIA driver's version (NVML, else nvidia-smi), or None (no driver, no GPU). Asked once
    per process."""
    try:
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:  # noqa: BLE001 -- no nvidia-ml-py or no driver: try nvidia-smi, else None
        pass
    from h3gates.core.jobs import nvidia_smi_query

    versions = nvidia_smi_query("driver_version", timeout=10)
    return versions[0] if versions else None


def describe(device: str = "cpu") -> dict:
    """This machine, for results made on `device` ("cpu", "cuda" or "cuda:N"); imports torch."""
    import torch

    dev = torch.device(device)
    m = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": platform.machine(),
        "hostname": platform.node(),
        "cpu_count": os.cpu_count(),
        "cpu_threads": torch.get_num_threads(),
        "torch": str(torch.__version__),
        "cuda": torch.version.cuda,
        "comfy_kitchen": package_version("comfy-kitchen"),
        "device_type": dev.type,
        "cuda_available": bool(torch.cuda.is_available()),
        "gpu": None,
        "gpu_uuid": None,
        "capability": None,
        "sm_count": None,
        "gpu_memory_gib": None,
        "cublas": None,
        "driver": driver_version(),
        "gpu_lease": None,
    }
    if dev.type == "cuda" and m["cuda_available"]:
        from h3gates.core.lease import current

        p = torch.cuda.get_device_properties(dev)
        lease = current()
        m.update(
            gpu=str(p.name),
            gpu_uuid=str(getattr(p, "uuid", "")) or None,
            capability=f"{p.major}.{p.minor}",
            sm_count=int(p.multi_processor_count),
            gpu_memory_gib=round(p.total_memory / 2**30, 1),
            cublas=str(torch.backends.cuda.preferred_blas_library())
            if hasattr(torch.backends.cuda, "preferred_blas_library")
            else None,
            gpu_lease=None
            if lease is None
            else {"index": lease.index, "uuid": lease.uuid, "waited_s": round(lease.waited_s, 3)},
        )
    return m
