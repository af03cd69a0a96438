"""`perfbisect patches carry`: the patch stack carried over every boundary of a range where it stops applying.

``carry(ws, good, bad)`` finds the first boundary (``PatchStack.check_range``), prepares it
(``git.carry``) and either writes the new version of the patch at once (git resolved the replay and the new version
adds and removes what the patch did) or stops with the conflicts in place for the user. ``resume`` finishes the
boundary the user resolved and goes on to the next; ``abort`` drops the boundary in progress (the versions written
before it stay). Each new version is a ``[[patches.variants]]`` entry appended to the config file, so ``plan``,
``patches check`` and every trial use it from then on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ..config import load_config
from ..errors import UsageError
from ..git import carry as carrying
from ..git.gitrepo import run_git
from ..git.patches import PatchStack
from ..runtime.progress import Progress
from .workspace import Workspace
from ..model import Commit
from .planning import range_of


@dataclass
class Boundary:
    """One boundary met: where, which patch, and what became of it."""

    commit: Commit
    patch: str
    index: int  # how many commits into the range
    files: tuple[str, ...] = ()
    outcome: str = ""  # "carried by git", "resolved", "waiting"
    variant: str | None = None  # the version written
    differs: str | None = None  # how it differs from the patch it replaces
    seconds: float = 0.0


@dataclass
class CarryReport:
    """Where a carry stands after one command: the boundaries it met, and whether the range now applies."""

    good: str
    bad: str
    boundaries: list[Boundary] = field(default_factory=list)
    waiting: carrying.CarryState | None = None  # the boundary left for the user
    unresolved: tuple[str, ...] = ()  # its paths in conflict
    applies: bool = False  # the stack applies at every commit of the range
    earlier: list[str] = field(default_factory=list)  # versions this carry wrote in earlier commands
    commits: int = 0
    seconds: float = 0.0


def _state_path(ws: Workspace) -> Path:
    return ws.config.cache_dir / "carry" / "state.json"


def _variants_dir(ws: Workspace) -> Path:
    if ws.config.patches.dir is not None:
        return Path(ws.config.patches.dir) / "variants"
    return (ws.config.path.parent if ws.config.path else ws.config.cache_dir) / "perfbisect-variants"


def _stack(ws: Workspace) -> PatchStack:
    """The stack as the config file says now (variants written by this carry included)."""
    if ws.config.path is None:
        raise UsageError("patches carry writes the versions it makes into the config file: run it with a perfbisect.toml.")
    cfg = load_config(ws.config.path)
    if not (cfg.patches.dir or cfg.patches.branch):
        raise UsageError(
            f"{ws.config.path} defines no patch stack: set [patches] dir = \"DIR\" (git format-patch files) or "
            f"branch/base, then run this again."
        )
    if ws.stack is not None:
        ws.stack.cleanup()
    ws.stack = PatchStack.load(cfg.patches, ws.repo)
    return ws.stack


def carry(ws: Workspace, good: str, bad: str, progress: Progress | None = None, *, review: bool = False) -> CarryReport:
    """Carry the stack over good..bad from the first boundary on (see the module)."""
    carrying.check_no_carry(_state_path(ws))
    good_c, bad_c, _ = range_of(ws, good, bad)
    return _advance(ws, good_c, bad_c, good_c, progress or Progress(), review, CarryReport(good_c.sha, bad_c.sha))


def resume(ws: Workspace, progress: Progress | None = None, *, review: bool = False) -> CarryReport:
    """Finish the boundary the user resolved (nothing may be left in conflict), then go on to the next."""
    progress = progress or Progress()
    state = carrying.CarryState.load(_state_path(ws))
    if state is None:
        raise UsageError("No carry is in progress. Start one with `perfbisect patches carry good=REV bad=REV`.")
    worktree = Path(state.worktree)
    if not worktree.is_dir():
        raise UsageError(
            f"The carry's worktree {worktree} is gone, so its resolution is lost. Start the boundary again with "
            f"`perfbisect patches carry --abort` then `perfbisect patches carry good={state.good[:10]} bad={state.bad[:10]}`."
        )
    left = carrying.unresolved(worktree)
    if left:
        raise UsageError(
            f"{len(left)} path{'s are' if len(left) != 1 else ' is'} still in conflict in {worktree}: {', '.join(left[:5])}. "
            f"Resolve {'them' if len(left) != 1 else 'it'} (no <<<<<<<, ======= or >>>>>>> lines left), then run "
            f"`perfbisect patches carry --continue` again, or `--abort`."
        )
    report = CarryReport(state.good, state.bad)
    stack = _stack(ws)
    boundary_commit = ws.repo.resolve(state.boundary)
    start = time.perf_counter()
    b = _finish(ws, stack, state, boundary_commit, "carried by git, reviewed" if state.resolved_by_git else "resolved")
    b.index = len(ws.repo.first_parent_range(state.good, state.boundary)) - 1
    b.seconds = time.perf_counter() - start
    report.boundaries.append(b)
    progress.info(f"{state.patch}: the version for {state.boundary[:10]} on is {b.variant}" + (f" ({b.differs})" if b.differs else ""))
    good_c, bad_c = ws.repo.resolve(state.good), ws.repo.resolve(state.bad)
    report.earlier = list(state.written)  # versions this carry wrote before (in earlier commands)
    return _advance(ws, good_c, bad_c, boundary_commit, progress, review, report)


def abort(ws: Workspace) -> str:
    """Drop the boundary in progress and its worktree; what was written before it stays."""
    state = carrying.CarryState.load(_state_path(ws))
    if state is None:
        raise UsageError("No carry is in progress: there is nothing to abort.")
    carrying.remove_worktree(ws.repo, Path(state.worktree))
    _state_path(ws).unlink(missing_ok=True)
    kept = f"; the versions written before it stay: {', '.join(state.written)}" if state.written else ""
    return f"dropped the carry of {state.patch} over {state.boundary[:10]} and its worktree{kept}"


def status(ws: Workspace) -> carrying.CarryState | None:
    return carrying.CarryState.load(_state_path(ws))


def _advance(ws: Workspace, good: Commit, bad: Commit, start: Commit, progress: Progress, review: bool,
             report: CarryReport) -> CarryReport:
    began = time.perf_counter()
    written: list[str] = list(report.earlier) + [b.variant for b in report.boundaries if b.variant]
    all_commits = ws.repo.first_parent_range(good.sha, bad.sha)
    report.commits = len(all_commits)
    position = {c.sha: i for i, c in enumerate(all_commits)}
    while True:
        stack = _stack(ws)
        commits = all_commits[position[start.sha]:]
        progress.info(f"checking the stack at {len(commits)} commits from {start.short} ...")
        checks = stack.check_range(commits)
        failing = next((c for c in checks if not c.ok), None)
        if failing is None:
            report.applies = True
            break
        t0 = time.perf_counter()
        conflict = failing.conflict
        at = position[failing.commit.sha]
        b = Boundary(failing.commit, conflict.patch, at, tuple(conflict.files))
        progress.info(f"boundary at {failing.commit.short} ({at} commits into the range): {conflict.describe()} stops applying")
        previous = all_commits[at - 1] if at > 0 else None
        state = _prepare(ws, stack, failing.commit, previous, conflict.patch, good, bad, written)
        b.seconds = time.perf_counter() - t0
        if state.resolved_by_git:
            diff = carrying.resolution_diff(Path(state.worktree), state.base)
            differs = carrying.claims(_replaced(stack, state).path.read_text(errors="replace"), diff)
            if differs.same and not review:
                how = "carried by git (your earlier resolution, reused by rerere)" if state.reused else "carried by git"
                b = _finish(ws, stack, state, failing.commit, how, diff=diff, index=at)
                b.seconds = time.perf_counter() - t0
                report.boundaries.append(b)
                written.append(b.variant)
                progress.info(f"  git carried it ({b.seconds:.1f} s): {b.variant}, the same lines added and removed")
                start = failing.commit
                continue
            b.outcome = "carried by git (rerere: an earlier resolution), for review" if state.reused else "carried by git, for review"
            b.differs = None if differs.same else differs.describe()
        else:
            b.outcome = "waiting"
        report.boundaries.append(b)
        report.waiting = state
        report.unresolved = tuple(carrying.unresolved(Path(state.worktree)))
        break
    report.seconds = time.perf_counter() - began
    return report


def _prepare(ws: Workspace, stack: PatchStack, boundary: Commit, previous: Commit | None, patch: str,
             good: Commit, bad: Commit, written: list[str]) -> carrying.CarryState:
    """The boundary's worktree: the patches before ``patch`` committed, ``patch`` replayed from ``previous``."""
    index = next(i for i, p in enumerate(stack.patches) if p.name == patch)
    root = ws.config.cache_dir / "carry"
    worktree = root / "worktree"
    carrying.add_worktree(ws.repo, worktree, boundary.sha)
    base = carrying.apply_and_commit(stack, index, worktree, boundary.sha, f"perfbisect carry: the stack before {patch}")
    replayed = None
    chosen = patch
    if previous is not None:
        applied = stack.check_at(previous)
        if applied.ok:
            chosen = dict(applied.applied.variants)[patch] if applied.applied else patch
            candidate = next(c for c in stack.patches[index].candidates if c.name == chosen)
            scratch = root / "replay"
            carrying.add_worktree(ws.repo, scratch, previous.sha)
            try:
                carrying.apply_and_commit(stack, index, scratch, previous.sha, f"perfbisect carry: the stack before {patch}")
                replayed = carrying.apply_and_commit(PatchStack(ws.repo, (), stack.source), 0, scratch, previous.sha,
                                                     f"{patch} as it applied at {previous.short}", include=candidate)
            finally:
                carrying.remove_worktree(ws.repo, scratch)
    if replayed is not None:
        replay = carrying.cherry_pick(worktree, replayed)
    else:  # the good end itself: no commit where it applied to replay from; three-way from the patch's own blobs
        primary = stack.patches[index].candidates[-1]
        status, out, err = run_git(worktree, ["apply", "--3way", "--index", "--whitespace=nowarn", str(primary.path)])
        clean = status == 0 and not carrying.unresolved(worktree) and not carrying.unmerged(worktree)
        replay = carrying.Replay(clean, False, tuple(l.strip() for l in err.splitlines() if "conflict" in l.lower()))
    state = carrying.CarryState(good.sha, bad.sha, boundary.sha, patch, str(worktree), base, replayed or "",
                                replaces=chosen, resolved_by_git=replay.clean, reused=replay.reused,
                                conflicts=list(replay.conflicts), written=list(written))
    state.save(_state_path(ws))
    return state


def _replaced(stack: PatchStack, state: carrying.CarryState):
    """The version of the patch the new one replaces (replayed from the commit before the boundary)."""
    candidates = next(p for p in stack.patches if p.name == state.patch).candidates
    return next((c for c in candidates if c.name == state.replaces), candidates[0])


def _finish(ws: Workspace, stack: PatchStack, state: carrying.CarryState, boundary: Commit, outcome: str,
            diff: str | None = None, index: int = 0) -> Boundary:
    worktree = Path(state.worktree)
    diff = diff if diff is not None else carrying.resolution_diff(worktree, state.base)
    if not diff.strip():
        raise UsageError(
            f"The resolution in {worktree} changes nothing against the boundary: {state.patch} would do nothing from "
            f"{state.boundary[:10]} on. If that is what you want, remove the patch from the stack; otherwise resolve the "
            f"conflicts keeping its change, then `perfbisect patches carry --continue`."
        )
    replaced = _replaced(stack, state)
    differs = carrying.claims(replaced.path.read_text(errors="replace"), diff)
    primary = next(p for p in stack.patches if p.name == state.patch).candidates[0]
    path = carrying.write_variant(_variants_dir(ws), primary, replaced, boundary.sha, diff, differs)
    carrying.add_variant_entry(ws.config.path, state.patch, path, boundary.sha)
    carrying.remove_worktree(ws.repo, worktree)
    _state_path(ws).unlink(missing_ok=True)
    return Boundary(boundary, state.patch, index, outcome=outcome, variant=str(path),
                    differs=None if differs.same else differs.describe())

