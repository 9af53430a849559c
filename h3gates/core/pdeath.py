"""A child process that dies with its parent (Linux's PR_SET_PDEATHSIG), for the warm worker's children
(core/warm.py) and rung 8's Nsight Compute capture (rungs/nsight.py). No imports beyond the standard library."""

from __future__ import annotations

import functools
import os
import sys

PR_SET_PDEATHSIG = 1


@functools.cache
def libc_prctl():
    """libc's prctl, or None where there is none (not Linux). Resolve it in the parent, before a fork: a dlopen
    in the forked child of a threaded process (the warm worker has imported torch) can deadlock on the loader's
    lock another thread held at the fork."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent(sig: int, parent: int | None = None, prctl=None) -> bool:
    """Have `sig` sent to this process when its parent dies; with `parent`, exit at once (137) if that parent
    died before this was set. `prctl` as libc_prctl() returned it in the parent. False where it cannot be set."""
    f = prctl if prctl is not None else libc_prctl()
    if f is None:
        return False
    f(PR_SET_PDEATHSIG, sig)
    if parent is not None and os.getppid() != parent:
        os._exit(137)
    return True
