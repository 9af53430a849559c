"""The one atomic write of the package: a file appears whole or not at all (a crash, a kill or a full
disk leaves no valid-looking artifact), through a uniquely named temporary file beside it (two writers
never share a temporary name) and one rename. Files are written 0644: reports, tokens, records, flags
and artifacts carry no secrets (deployment tooling often runs as another user); their integrity is the
digests' job. Keys are the exception (`mode=0o600`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path, data: bytes | str | None = None, *, writer=None, mode: int = 0o644) -> Path:
    """Write `data` (bytes or text), or call `writer(tmp_path)` to write the temporary file (e.g.
    torch.save), then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        if writer is None:
            with os.fdopen(fd, "wb") as f:
                f.write(
                    data.encode() if isinstance(data, str) else bytes(data) if isinstance(data, memoryview) else data
                )
        else:
            os.close(fd)
            writer(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.close(fd)
        except OSError:
            pass
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
