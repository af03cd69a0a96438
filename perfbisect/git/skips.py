"""Commits marked untestable by hand, as `git bisect skip` does: never measured, never blamed.

Two sources, one answer (``skipped_commits``): ``perfbisect skip REV…`` keeps full shas in
``<cache_dir>/skipped.json`` (beside the worktrees, per target repository; ``--undo`` removes them),
and ``[filters] skip = [REV…]`` in the config. The search sees such a commit exactly as it sees a
patch conflict or a command that exited 125: an observation without a value (``model.Observation``
with ``value=None``), so a change next to it is reported as a set.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ..errors import ConfigError, GitError, StoreError
from .gitrepo import TargetRepo
from ..model import Commit
from ..settings import Config

SKIP_FILE = "skipped.json"


@dataclass(frozen=True)
class Skip:
    """One commit marked untestable, and why (``by hand`` or ``[filters] skip``)."""

    commit: Commit
    source: str  # "perfbisect skip" | "[filters] skip"
    reason: str = ""
    at: float | None = None  # when it was marked (by hand only)

    def describe(self) -> str:
        why = f": {self.reason}" if self.reason else ""
        return f"skipped ({self.source}{why})"


class SkipList:
    """The commits ``perfbisect skip`` marked, in ``<cache_dir>/skipped.json`` (written atomically)."""

    def __init__(self, cache_dir: Path):
        self.path = Path(cache_dir) / SKIP_FILE

    def read(self) -> dict[str, dict]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise StoreError(
                f"Cannot read the list of skipped commits {self.path}: {exc}. Fix or delete that file "
                f"(it only holds what `perfbisect skip` marked)."
            ) from None
        return {str(k): v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}

    def _write(self, data: dict[str, dict]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{SKIP_FILE}.{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)

    def add(self, commits: Iterable[Commit], reason: str = "") -> None:
        data = self.read()
        for c in commits:
            data[c.sha] = {"reason": reason, "at": time.time()}
        self._write(data)

    def remove(self, commits: Iterable[Commit]) -> list[Commit]:
        """Unmark ``commits``; the ones that were marked."""
        data = self.read()
        removed = [c for c in commits if data.pop(c.sha, None) is not None]
        self._write(data)
        return removed


def skipped_commits(repo: TargetRepo, config: Config) -> dict[str, Skip]:
    """Every commit marked untestable, by full sha: ``[filters] skip`` and ``perfbisect skip``."""
    out: dict[str, Skip] = {}
    for rev in config.filters.skip:
        try:
            commit = repo.resolve(rev)
        except GitError:
            raise ConfigError(
                f"{config.path}: key 'filters.skip' names '{rev}', which git cannot resolve to a commit in "
                f"{config.target.repo}. Fix its spelling (a sha, tag or branch) or remove it."
            ) from None
        out[commit.sha] = Skip(commit, "[filters] skip")
    for sha, entry in SkipList(config.cache_dir).read().items():
        if sha in out:
            continue
        try:
            commit = repo.resolve(sha)
        except GitError:
            continue  # a commit that left the repository (rewritten history) cannot be in a range
        out[sha] = Skip(commit, "perfbisect skip", str(entry.get("reason") or ""), entry.get("at"))
    return out
