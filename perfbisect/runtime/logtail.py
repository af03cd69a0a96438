"""Reading the end of a build or server log for an error message."""

from __future__ import annotations

import os
from pathlib import Path


def log_tail(path: Path | str, lines: int = 20, max_bytes: int = 64 * 1024) -> str:
    """The last ``lines`` lines of a (possibly huge) log file; empty when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))  # the end is all an error message needs
            data = fh.read()
    except OSError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])
