"""Reusable detached worktrees of the target repository, one per pool slot.

Every checkout perfbisect makes lives here, under ``<cache_dir>/worktrees``: a slot is reset,
cleaned and checked out again instead of being recreated, and ``perfbisect gc`` removes them all.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from .gitrepo import TargetRepo, check_git
from .model import Commit


@dataclass(frozen=True)
class _WorktreeInfo:
    path: Path
    head: str
    locked: bool
    prunable: bool


class WorktreePool:
    """Detached worktrees under ``<cache_dir>/worktrees``, reused and cleaned between commits."""

    def __init__(self, repo: TargetRepo, cache_dir: Path | str, size: int = 1):
        if size < 1:
            raise ValueError("WorktreePool size must be at least 1")
        self.repo = repo
        self.root = (Path(cache_dir).expanduser() / "worktrees").resolve()
        self.size = size
        self._slots = [self.root / f"wt{i}" for i in range(size)]
        self._order: list[int] = list(range(size))  # least recently used first
        self.prune()

    def _listed(self) -> list[_WorktreeInfo]:
        out = self.repo.git("worktree", "list", "--porcelain")
        infos = []
        for block in out.strip().split("\n\n"):
            fields: dict[str, str] = {}
            for line in block.splitlines():
                key, _, value = line.partition(" ")
                fields[key] = value
            if "worktree" in fields:
                infos.append(
                    _WorktreeInfo(Path(fields["worktree"]), fields.get("HEAD", ""), "locked" in fields, "prunable" in fields)
                )
        return infos

    def _ours(self) -> list[_WorktreeInfo]:
        return [w for w in self._listed() if _is_under(w.path, self.root)]

    def prune(self) -> None:
        """Recover from a crash: drop stale worktree metadata, unlock ours, remove stale index locks."""
        self.repo.git("worktree", "prune", what="pruning stale worktree metadata")
        for info in self._ours():
            if info.locked:
                self.repo.git("worktree", "unlock", str(info.path), what=f"unlocking {info.path}")
            self._remove_stale_locks(info.path)

    def _admin_dir(self, worktree: Path) -> Path | None:
        dotgit = worktree / ".git"
        if dotgit.is_file():
            text = dotgit.read_text().strip()
            if text.startswith("gitdir:"):
                admin = Path(text[len("gitdir:") :].strip())
                return admin if admin.is_absolute() else (worktree / admin).resolve()
        return None

    def _remove_stale_locks(self, worktree: Path) -> None:
        # Only this pool uses its worktrees, so a lock there is a leftover of a killed run.
        admin = self._admin_dir(worktree)
        if admin is not None:
            for name in ("index.lock", "HEAD.lock"):
                (admin / name).unlink(missing_ok=True)

    def checkout(self, commit: Commit | str) -> Path:
        """A clean worktree at ``commit``: reused when one exists (reset, clean, checkout)."""
        sha = commit.sha if isinstance(commit, Commit) else self.repo.resolve(commit).sha
        registered = {w.path.resolve(): w for w in self._ours()}
        slot = next(
            (i for i in self._order if self._slots[i].resolve() in registered and registered[self._slots[i].resolve()].head == sha),
            self._order[0],
        )
        self._order.remove(slot)
        self._order.append(slot)
        path = self._slots[slot]
        if path.resolve() in registered and path.is_dir():
            self._remove_stale_locks(path)
            check_git(path, ["reset", "--hard", "-q"], f"cleaning worktree {path}")
            check_git(path, ["clean", "-ffdxq"], f"cleaning worktree {path}")
            check_git(path, ["checkout", "-q", "--detach", "--force", sha], f"checking out {sha[:10]} in {path}")
            return path
        if path.exists():
            shutil.rmtree(path)  # a leftover directory git no longer knows: start it afresh
        path.parent.mkdir(parents=True, exist_ok=True)
        self.repo.git("worktree", "add", "--detach", "--force", str(path), sha, what=f"creating worktree {path}")
        return path

    def gc(self) -> list[Path]:
        """Remove every worktree of this pool (``perfbisect gc``); return the paths removed."""
        removed = []
        for info in self._ours():
            self.repo.run("worktree", "remove", "--force", "--force", str(info.path))
            if info.path.exists():
                shutil.rmtree(info.path, ignore_errors=True)
            removed.append(info.path)
        if self.root.exists():
            shutil.rmtree(self.root, ignore_errors=True)
        self.repo.git("worktree", "prune", what="pruning worktree metadata")
        return removed


def _is_under(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root)
        return True
    except ValueError:
        return False
