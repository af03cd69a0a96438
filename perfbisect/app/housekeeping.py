"""Housekeeping: `perfbisect skip` (mark commits untestable), `patches check` (does the stack apply at
every commit of a range), `gc` (remove worktrees, and with ``--build-cache`` the cached builds and
environments) and `doctor` (is this machine and config ready to give trustworthy numbers).
"""

from __future__ import annotations

import shutil

from pathlib import Path
from typing import Sequence

from ..doctor import Finding, run_doctor
from ..errors import UsageError
from ..git.gitrepo import TargetRepo
from ..git.patches import PatchCheck, check_patches
from ..git.skips import Skip, SkipList, skipped_commits
from .workspace import Workspace
from ..model import Commit
from ..settings import Config
from .planning import range_of


def skip(config: Config, revs: Sequence[str], *, undo: bool = False, reason: str = "") -> tuple[list[Commit], list[Skip]]:
    """`perfbisect skip`: mark commits untestable (or unmark them with ``undo``); (changed, all marked now)."""
    repo = TargetRepo(config.target.repo)
    commits = [repo.resolve(r) for r in revs]
    marks = SkipList(config.cache_dir)
    changed = marks.remove(commits) if undo else (marks.add(commits, reason) or commits)
    return changed, sorted(skipped_commits(repo, config).values(), key=lambda s: (s.source, s.commit.author_date))


def patches_check(ws: Workspace, good: str, bad: str) -> list[PatchCheck]:
    """For every commit in good..bad: does the stack apply, and with which variant."""
    if ws.stack is None:
        raise UsageError(
            f"{ws.config.path} defines no patch stack: set [patches] dir = \"DIR\" (git format-patch files) "
            f"or branch/base, then run this again."
        )
    good_c, bad_c, commits = range_of(ws, good, bad)
    return check_patches(ws.repo, good_c.sha, bad_c.sha, ws.stack)


def gc(ws: Workspace, build_cache: bool = False) -> list[str]:
    """Remove perfbisect's worktrees (and with ``build_cache`` the cached build artefacts and the
    environments)."""
    removed = [f"worktree {p}" for p in ws.pool.gc()]
    logs = ws.config.cache_dir / "logs"  # servers', builds', environments' and Rust builds' logs of past trials
    if logs.is_dir():
        files = [p for p in logs.rglob("*") if p.is_file()]
        size = sum(p.stat().st_size for p in files)
        shutil.rmtree(logs, ignore_errors=True)
        removed.append(f"logs ({len(files)} file{'s' if len(files) != 1 else ''}, {size / 1e6:.1f} MB; reports written "
                       f"before keep the log tails they show, reports rendered from now on show none for those trials)")
    if build_cache:
        size = ws.build_cache.total_bytes()
        ws.build_cache.clear()
        removed.append(f"build cache ({size / 1e6:.1f} MB)")
        envs = ws.environments.cache if ws.environments is not None else None
        if envs is not None and envs.lru_entries():
            count, before = len(envs.lru_entries()), envs.total_bytes()
            kept = envs.clear()
            count, size = count - len(kept), before - envs.total_bytes()
            removed.append(f"{count} environment{'s' if count != 1 else ''} ({size / 1e6:.1f} MB"
                           f"{f'; {len(kept)} in use by a running command kept' if kept else ''})")
    return removed


def doctor(config_path: Path, db: Path | None = None, launch: bool = False,
           range_: tuple[str, str] | None = None) -> list[Finding]:
    """Is this machine and config ready to give trustworthy numbers? One finding per check.

    The config and the ``Workspace`` are opened as every command opens them (what fails to open is
    itself a finding); ``launch`` also starts the server once under the locks a trial holds.
    """
    return run_doctor(config_path, db, launch=launch, range_=range_, open_workspace=Workspace.open)

