"""Reading /proc/<pid>/stat: one parser for the server, the store's owner check and the sampler.

The command name (field 2) sits in parentheses and may itself hold spaces and ')', so the fields
are split after the last ')'. Stdlib only.
"""

from __future__ import annotations

from pathlib import Path

PROC = Path("/proc")


def stat_fields(pid: int, proc_root: Path = PROC) -> list[str] | None:
    """Fields 3 onwards of proc(5)'s stat line (state, ppid, pgrp, session, …), or None if unreadable."""
    try:
        raw = (Path(proc_root) / str(pid) / "stat").read_text()
    except OSError:
        return None
    return raw.rpartition(")")[2].split()
