"""`sync(device)`: wait for the device's queued work (a CUDA device), before reading a clock or a
tensor's bytes; nothing on a CPU. The one copy every rung, artifact and the doctor use."""

from __future__ import annotations

import torch


def sync(device) -> None:
    """torch.cuda.synchronize on a CUDA `device` ("cuda", "cuda:N" or a torch.device); a no-op on a CPU."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
