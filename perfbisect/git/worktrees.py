"""Reusable detached worktrees of the target repository, one per pool slot.

Every checkout perfbisect makes lives here, under ``<cache_dir>/worktrees``: a slot is reset,
cleaned and checked out again instead of being recreated, and ``perfbisect gc`` removes them all.
Slot directories have names of clearly different lengths (``slot_name``), so a trial's layout
(``perfbisect.layout``) can pick the length of the path it runs at.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from .gitrepo import TargetRepo, check_git
from ..errors import GitError
from ..model import Commit


# How much longer each slot's directory name is than the one before. Not a multiple of 8 or 16, so
# the path lengths (and what embeds them: PYTHONPATH, argv, __file__ strings) land on different
# alignments, and tens of characters, as the path length that moved a benchmark by 7-8% differed.
SLOT_NAME_STEP = 29


def slot_name(index: int) -> str:
    """The directory name of slot ``index``: "wt0", then "wt1-xxx…" 29 characters longer per slot.

    Slot 0 is "wt0", the path trials stored without a layout ran at, so a fixed layout checks out
    exactly where they did. Eight slots stay far below a file name's 255 bytes.
    """
    if index == 0:
        return "wt0"
    length = 3 + SLOT_NAME_STEP * index
    head = f"wt{index}-"
    return head + "x" * (length - len(head))


@dataclass(frozen=True)
class _WorktreeInfo:
    path: Path
    head: str
    locked: bool
    prunable: bool


class WorktreePool:
    """Detached worktrees under ``<cache_dir>/worktrees``, reused and cleaned between commits.

    ``size`` slots, named by ``slot_name`` (paths of different lengths). ``checkout(commit)`` picks
    one (a slot already at that commit, else the least recently used); ``checkout(commit, slot=i)``
    uses slot ``i``, as a trial's layout asks.
    """

    def __init__(self, repo: TargetRepo, cache_dir: Path | str, size: int = 1):
        if size < 1:
            raise ValueError("WorktreePool size must be at least 1")
        self.repo = repo
        self.root = (Path(cache_dir).expanduser() / "worktrees").resolve()
        self.size = size
        self._slots = [self.root / slot_name(i) for i in range(size)]
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

    def path(self, slot: int) -> Path:
        """Where slot ``slot`` checks out (whether or not it exists yet)."""
        return self._slots[self._slot_index(slot)]

    def _slot_index(self, slot: int) -> int:
        if not 0 <= slot < self.size:
            raise ValueError(f"worktree slot {slot} is outside this pool's {self.size} slots")
        return slot

    def checkout(self, commit: Commit | str, slot: int | None = None) -> Path:
        """A clean worktree at ``commit``: reused when one exists (reset, clean, checkout).

        ``slot``: check out into that slot (its path has that slot's length); None: a slot already
        at ``commit`` if there is one, else the least recently used.
        """
        sha = commit.sha if isinstance(commit, Commit) else self.repo.resolve(commit).sha
        registered = {w.path.resolve(): w for w in self._ours()}
        if slot is None:
            slot = next(
                (i for i in self._order if self._slots[i].resolve() in registered and registered[self._slots[i].resolve()].head == sha),
                self._order[0],
            )
        else:
            slot = self._slot_index(slot)
        self._order.remove(slot)
        self._order.append(slot)
        path = self._slots[slot]
        if path.resolve() in registered and path.is_dir():
            self._remove_stale_locks(path)
            check_git(path, ["reset", "--hard", "-q"], f"cleaning worktree {path}")
            check_git(path, ["clean", "-ffdxq"], f"cleaning worktree {path}")
            check_git(path, ["checkout", "-q", "--detach", "--force", sha], f"checking out {sha[:10]} in {path}")
            return path
        self._clear_leftover(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.repo.git("worktree", "add", "--detach", "--force", str(path), sha, what=f"creating worktree {path}")
        return path

    def fixed(self, commit: Commit, name: str = "client") -> Path:
        """A worktree that stays at ``commit`` (``<root>/<name>-<sha12>``), made once and reused as it
        is: the pinned benchmark client runs from it at every trial. ``gc`` removes it with the rest."""
        path = self.root / f"{name}-{commit.sha[:12]}"
        registered = {w.path.resolve(): w for w in self._ours()}
        info = registered.get(path.resolve())
        if info is not None and info.head == commit.sha and path.is_dir():
            return path
        if info is not None:
            self.repo.run("worktree", "remove", "--force", "--force", str(path))
        self._clear_leftover(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.repo.git("worktree", "add", "--detach", "--force", str(path), commit.sha, what=f"creating worktree {path}")
        return path

    def gc(self) -> list[Path]:
        """Remove every worktree of this pool (``perfbisect gc``); return the paths removed."""
        removed = []
        for info in self._ours():
            self.repo.run("worktree", "remove", "--force", "--force", str(info.path))
            if info.path.exists():
                shutil.rmtree(info.path, ignore_errors=True)
            removed.append(info.path)
        # What is left under the root is removed only where it is perfbisect's own leftover (an empty
        # directory, a worktree of this repository git lost track of): a directory someone else put
        # there stays, as everywhere perfbisect might otherwise delete what it did not make.
        if self.root.is_dir():
            for entry in sorted(self.root.iterdir()):
                if entry.is_dir() and not entry.is_symlink() and self._leftover(entry):
                    shutil.rmtree(entry, ignore_errors=True)
                    removed.append(entry)
            try:
                self.root.rmdir()
            except OSError:
                pass  # not empty: what stays is not perfbisect's
        self.repo.git("worktree", "prune", what="pruning worktree metadata")
        return removed

    # -- what is perfbisect's to delete ---------------------------------------------------------

    def _common_dir(self) -> Path:
        out = self.repo.git("rev-parse", "--git-common-dir", what="finding the repository's git directory").strip()
        common = Path(out)
        return (common if common.is_absolute() else self.repo.path / common).resolve()

    def _leftover(self, path: Path) -> bool:
        """Whether the directory ``path`` (not a worktree git lists) is perfbisect's own leftover: empty
        (a ``worktree add`` killed before it wrote anything), or a checkout whose ``.git`` file points at
        this repository's worktree metadata (git lost track of it: a pruned or re-created admin entry)."""
        try:
            if not any(path.iterdir()):
                return True
        except OSError:
            return False
        admin = self._admin_dir(path) if (path / ".git").is_file() else None
        return admin is not None and _is_under(admin, self._common_dir() / "worktrees")

    def _clear_leftover(self, path: Path) -> None:
        """Make room for a new worktree at ``path``: remove perfbisect's own leftover there; refuse
        anything else (deleting it would delete what someone else put there, without a word)."""
        if not path.exists() and not path.is_symlink():
            return
        if path.is_dir() and not path.is_symlink() and self._leftover(path):
            shutil.rmtree(path)
            return
        what = "a symbolic link" if path.is_symlink() else "a directory" if path.is_dir() else "a file"
        other = self._admin_dir(path) if path.is_dir() and (path / ".git").is_file() else None
        whose = f" (a worktree of another repository, {other})" if other is not None else ""
        raise GitError(
            f"{path} is {what} perfbisect did not create{whose}, at the path where it checks out one of its "
            f"worktrees; checking out there would first delete it, so perfbisect stops. Move it away (or "
            f"delete it yourself if it is not needed), or set [target] cache_dir to a directory of "
            f"perfbisect's own. Nothing was deleted."
        )


def _is_under(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root)
        return True
    except ValueError:
        return False
