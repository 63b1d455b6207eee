"""Report files are replaced atomically, so a browser or a second report never reads half a file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_file(path: Path, data: str | bytes) -> Path:
    """Write through a unique temporary file and a rename; readable by others (0644), to share on a cluster."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
