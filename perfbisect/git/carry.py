"""Carrying the patch stack over history, one boundary at a time, as ``git rebase`` would.

A *boundary* is the first commit of a range where one patch of the stack stops applying (every version of it
fails). To carry the patch over it:

1. **Prepare** a worktree at the boundary with the patches before it applied and committed, then replay the
   patch as it applied one commit earlier (a commit made there, in a second worktree) with ``git cherry-pick``:
   a three-way merge across exactly the upstream change (renames followed), with ``rerere`` on, so a conflict
   resolved once before (in an aborted attempt, another range) is resolved again by itself. Where git resolves
   everything, the result is shown for review; where it cannot, the conflicts are left in place, as ``git
   rebase`` leaves them, for the user to resolve with any tool.
2. **Finish**: nothing unresolved may remain (unmerged paths, conflict markers in the files it touched); the
   resolution becomes a new version of the patch (``variants/<patch>@<boundary>.patch``, format-patch shaped),
   its ``rerere`` resolution is recorded, and the worktree is removed. ``claims`` compares what the new version
   adds and removes with the patch it replaces, context aside: a resolution that changes what the patch does is
   flagged in the file (``Perfbisect-Differs:``) and said.

The state of a carry in progress lives in ``<cache_dir>/carry/state.json`` and the worktree beside it, so a user
who stops halfway loses nothing: ``finish`` or ``abort`` later, from any shell.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import GitError, UsageError
from .gitrepo import TargetRepo, check_git, run_git
from .patches import DIFFERS, Patch, PatchStack, differs_note

# Commits the carry makes in its own worktrees (never on a branch of the user's): an identity of their own.
IDENTITY = {"GIT_AUTHOR_NAME": "perfbisect carry", "GIT_AUTHOR_EMAIL": "perfbisect@localhost",
            "GIT_COMMITTER_NAME": "perfbisect carry", "GIT_COMMITTER_EMAIL": "perfbisect@localhost"}
_MARKER = re.compile(r"^(<<<<<<< |>>>>>>> |=======$)", re.M)


@dataclass
class CarryState:
    """A carry in progress: the range, the boundary, where the user resolves it."""

    good: str
    bad: str
    boundary: str  # the first commit where the patch does not apply
    patch: str  # its name in the stack
    worktree: str
    base: str  # the commit of the worktree before the patch: the boundary with the patches before it
    replayed: str  # the patch as a commit at the boundary's parent (what is cherry-picked)
    replaces: str = ""  # the version of the patch replayed (the one the new version replaces): a file name of the stack
    resolved_by_git: bool = False
    reused: bool = False  # git's resolution came from rerere (a resolution recorded before), not from the merge alone
    conflicts: list[str] = field(default_factory=list)  # git's CONFLICT lines (modify/delete ones have no markers)
    started: float = field(default_factory=time.time)
    written: list[str] = field(default_factory=list)  # variants this carry wrote so far (kept by an abort)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(asdict(self), indent=1))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> "CarryState | None":
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Claims:
    """What a new version of a patch adds and removes beside the patch it replaces (context and positions aside)."""

    added: tuple[str, ...]  # lines it adds that the original does not
    dropped: tuple[str, ...]  # lines the original adds that it does not
    removed: tuple[str, ...]  # lines it removes that the original does not
    kept: tuple[str, ...]  # lines the original removes that it does not

    @property
    def same(self) -> bool:
        return not (self.added or self.dropped or self.removed or self.kept)

    def describe(self) -> str:
        parts = []
        for label, lines in (("adds", self.added), ("no longer adds", self.dropped), ("removes", self.removed),
                             ("no longer removes", self.kept)):
            if lines:
                shown = "; ".join(repr(line if len(line) <= 60 else line[:59] + "…") for line in lines[:2])
                parts.append(f"{label} {len(lines)} line{'s' if len(lines) != 1 else ''} ({shown}{'; …' if len(lines) > 2 else ''})")
        return ", ".join(parts) or "the same lines"


_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def _changes(diff: str) -> tuple[Counter, Counter]:
    """The lines a diff adds and removes, read hunk by hunk by the hunks' own counts (a format-patch signature
    "-- " or a message line starting with "-" is never one)."""
    added, removed = Counter(), Counter()
    old = new = 0
    for line in diff.splitlines():
        if old <= 0 and new <= 0:
            m = _HUNK.match(line)
            if m:
                old = int(m.group(1)) if m.group(1) is not None else 1
                new = int(m.group(2)) if m.group(2) is not None else 1
            continue
        if line.startswith("\\"):
            continue  # "\ No newline at end of file"
        if line.startswith("+"):
            added[line[1:].rstrip()] += 1
            new -= 1
        elif line.startswith("-"):
            removed[line[1:].rstrip()] += 1
            old -= 1
        else:
            old -= 1
            new -= 1
    return added, removed


def claims(original: str, variant: str) -> Claims:
    """How ``variant`` (a diff) differs from ``original`` in the lines it adds and removes."""
    a0, r0 = _changes(_body(original))
    a1, r1 = _changes(_body(variant))
    return Claims(tuple((a1 - a0).elements()), tuple((a0 - a1).elements()), tuple((r1 - r0).elements()),
                  tuple((r0 - r1).elements()))


def _body(text: str) -> str:
    """The diff part of a format-patch file (what follows its message)."""
    at = text.find("\ndiff --git ")
    return text[at + 1:] if at >= 0 else text


# -- the git side ----------------------------------------------------------------------------------


def _git(where: Path, *args: str, what: str) -> str:
    return check_git(where, list(args), what, env=IDENTITY)


def add_worktree(repo: TargetRepo, path: Path, sha: str) -> None:
    if path.exists():
        remove_worktree(repo, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    repo.git("worktree", "add", "--detach", "--force", str(path), sha, what=f"creating the carry worktree {path}")


def remove_worktree(repo: TargetRepo, path: Path) -> None:
    run_git(repo.path, ["worktree", "remove", "--force", str(path)])
    shutil.rmtree(path, ignore_errors=True)
    run_git(repo.path, ["worktree", "prune"])


def apply_and_commit(stack: PatchStack, upto: int, worktree: Path, sha: str, message: str,
                     include: Patch | None = None) -> str:
    """In ``worktree`` (checked out at ``sha``): the stack's first ``upto`` patches (each as the stack chooses),
    then ``include`` if given, committed; the new commit's sha."""
    sub = PatchStack(stack.repo, stack.patches[:upto], stack.source)
    if upto:
        sub.apply(worktree, sha)
    if include is not None:
        status, out, err = run_git(worktree, ["apply", "--3way", "--index", "--whitespace=nowarn", str(include.path)])
        if status != 0:
            raise GitError(f"{include.name} does not apply at {sha[:10]} where the stack check said it did: {err.strip()}")
    _git(worktree, "commit", "-q", "--allow-empty", "--no-verify", "-m", message, what="recording the stack so far")
    return _git(worktree, "rev-parse", "HEAD", what="reading the commit just made").strip()


@dataclass(frozen=True)
class Replay:
    """What a cherry-pick of the patch did: resolved by git (by the merge, or by rerere's recorded resolution), or
    conflicts left in place, with git's own CONFLICT lines."""

    clean: bool
    reused: bool
    conflicts: tuple[str, ...]


def cherry_pick(worktree: Path, commit: str) -> Replay:
    """Replay ``commit`` onto the worktree (three-way, rerere on, nothing committed)."""
    status, out, err = run_git(worktree, ["-c", "rerere.enabled=true", "-c", "rerere.autoUpdate=true",
                                          "cherry-pick", "--no-commit", commit], env=IDENTITY)
    words = out + "\n" + err
    conflicts = tuple(line.strip() for line in words.splitlines() if line.strip().startswith("CONFLICT"))
    reused = "using previous resolution" in words
    if status == 0:
        return Replay(True, reused, conflicts)
    # Conflicts stay in place unless rerere resolved every one (its resolution staged, nothing unmerged). A
    # modify/delete conflict (upstream deleted the file the patch edits) has no markers: only the index says it.
    clean = not unmerged(worktree) and not unresolved(worktree)
    return Replay(clean, reused and clean, conflicts)


def unmerged(worktree: Path) -> list[str]:
    """Paths git left unmerged in the index."""
    out = run_git(worktree, ["diff", "--name-only", "--diff-filter=U", "-z"])[1]
    return [p for p in out.split("\x00") if p]


def unresolved(worktree: Path) -> list[str]:
    """Paths still in conflict: those git left unmerged or changed that still carry conflict markers. As with
    ``git rebase``, what the worktree holds is the resolution; unlike it, no ``git add`` is needed (a file
    git marked unmerged whose markers are gone is taken as resolved)."""
    unmerged = run_git(worktree, ["diff", "--name-only", "--diff-filter=U", "-z"])[1]
    changed = run_git(worktree, ["diff", "--name-only", "-z", "HEAD"])[1]
    paths = []
    for rel in dict.fromkeys(p for p in (unmerged + "\x00" + changed).split("\x00") if p):
        f = worktree / rel
        try:
            if f.is_file() and _MARKER.search(f.read_text(errors="replace")):
                paths.append(rel)
        except OSError:
            continue
    return paths


def resolution_diff(worktree: Path, base: str) -> str:
    """The resolved patch: everything staged or changed in the worktree since ``base`` (new files included)."""
    _git(worktree, "add", "-A", what="staging the resolution")
    run_git(worktree, ["-c", "rerere.enabled=true", "rerere"])  # remember this resolution for the next carry
    return _git(worktree, "diff", "--cached", "--full-index", "--binary", base, what="reading the resolution")


def write_variant(directory: Path, primary: Patch, replaced: Patch, boundary: str, diff: str, differs: Claims) -> Path:
    """``directory/<patch stem>@<boundary>.patch``: the patch's own message, a line on where it was carried from which
    version and how it differs from that version, then the resolved diff."""
    directory.mkdir(parents=True, exist_ok=True)
    text = primary.path.read_text(errors="replace")
    # The patch's own message, without its diffstat (which names the files of the old version).
    at = text.find("\n---\n")
    head = text[:at + 1] if at >= 0 and text.startswith("From ") else f"Subject: [PATCH] {primary.name}\n\n"
    head = head.rstrip("\n") + "\n\n"
    note = f"Carried by perfbisect over {boundary[:10]} from {replaced.name}, which stopped applying there.\n"
    earlier = differs_note(replaced.path)
    if earlier:
        note += f"{replaced.name} already differed from the version before it: {earlier}\n"
    old_files, new_files = _files(replaced.path.read_text(errors="replace")), _files(diff)
    if old_files != new_files:
        note += f"Files: {', '.join(new_files) or 'none'} (the version it replaces: {', '.join(old_files) or 'none'}).\n"
    if not differs.same:
        note += f"{DIFFERS} {differs.describe()}" + ("; in other files" if old_files != new_files else "") + "\n"
    out = directory / f"{Path(primary.name).stem}@{boundary[:10]}.patch"
    out.write_text(head + note + "---\n" + diff)
    return out


def _files(diff: str) -> list[str]:
    """The files a diff edits (its "diff --git a/X b/Y" lines, Y)."""
    return sorted({line.rsplit(" b/", 1)[-1] for line in diff.splitlines() if line.startswith("diff --git ")})


def add_variant_entry(config_path: Path, patch: str, variant: Path, boundary: str) -> None:
    """Append a ``[[patches.variants]]`` entry for ``variant`` to the config file (relative to its folder when
    it lies under it): the next command tries it after the versions before it."""
    try:
        rel = variant.resolve().relative_to(config_path.resolve().parent)
        shown = str(rel)
    except ValueError:
        shown = str(variant.resolve())
    block = (f"\n# Written by `perfbisect patches carry` on {time.strftime('%Y-%m-%d', time.gmtime())}: {patch} as carried "
             f"over {boundary[:10]}.\n[[patches.variants]]\npatch = {json.dumps(patch)}\nalternatives = [{json.dumps(shown)}]\n")
    text = config_path.read_text()
    config_path.write_text(text + ("" if text.endswith("\n") else "\n") + block)


def check_no_carry(state_path: Path) -> None:
    state = CarryState.load(state_path)
    if state is not None:
        raise UsageError(
            f"A carry of {state.patch} over {state.boundary[:10]} is in progress (worktree {state.worktree}). Resolve it "
            f"there and run `perfbisect patches carry --continue`, or drop it with `perfbisect patches carry --abort`."
        )
