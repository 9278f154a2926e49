"""Write a file so that a crash leaves either the old file or the new one, never half of one."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_atomic"]


def write_atomic(path: str | os.PathLike, data: bytes, mode: int = 0o644) -> Path:
    """Write `data` to a temporary file beside `path`, fsync it, then rename it over `path`.

    The rename is atomic on POSIX and Windows when both names are on one file system, which is why
    the temporary file lives in the destination's directory rather than in /tmp.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path
