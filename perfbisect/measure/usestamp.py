"""Least-recently-used stamps for the caches that share `[build] cache_max_gb`: build artefacts
(``build.BuildCache``) and environments (``envs.EnvCache``).

A use is the *content* of the directory's ``used`` file — nanoseconds since the epoch — not its mtime,
which some filesystems keep to the second or two; each stamp a clock gives is larger than the last it
gave or was started from, so two uses within one clock tick keep their order.
"""

from __future__ import annotations

import time
from pathlib import Path

USED = "used"


class UseClock:
    """Gives out strictly increasing use stamps and writes them into a directory's ``used`` file."""

    def __init__(self, last: int = 0) -> None:
        self.last = last  # the last stamp given out, or the newest found on disk when the cache opened

    def mark(self, directory: Path) -> None:
        """Record a use of ``directory`` now (OSError when it cannot be written)."""
        self.last = max(time.time_ns(), self.last + 1)
        (directory / USED).write_text(str(self.last))


def last_use(directory: Path) -> int:
    """The stamp of the last use of ``directory``. An empty ``used`` file is an entry of an older perfbisect,
    which kept the last use in the file's mtime. OSError or ValueError when there is no readable stamp."""
    used = directory / USED
    text = used.read_text().strip()
    return int(text) if text else used.stat().st_mtime_ns


__all__ = ["USED", "UseClock", "last_use"]
