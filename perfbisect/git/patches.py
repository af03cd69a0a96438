"""The patch stack: patches re-applied on top of every tested commit, and where they are applied.

A stack comes from a directory of patch files or from the commits base..branch of the target
repository (exported to a temporary directory that the stack owns: use it as a context manager or
call ``cleanup()``). Applying goes into a worktree and its index (``git apply --3way --index``);
checking whether the stack applies uses a temporary index (no checkout) and is only repeated at
commits that change a file the stack touches.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..errors import ConfigError, InfrastructureError, PatchError, PerfbisectError
from .gitrepo import TargetRepo, check_git, log_records, run_git
from ..model import Commit, content_hash

if TYPE_CHECKING:
    from ..settings import PatchesConfig

_HUNK_FAILED = re.compile(r"patch failed: (.+):(\d+)\s*$")
_CONFLICTED = re.compile(r"^U (.+)$")
_APPLIED_WITH_CONFLICTS = re.compile(r"Applied patch to '(.+)' with conflicts")
_APPLY_CONFLICT = 1  # `git apply`'s status when a patch does not apply; 128 means git itself failed


@dataclass(frozen=True)
class Patch:
    """One patch of the stack: a file on disk, its name, what it touches, its content hash."""

    name: str
    path: Path
    sha256: str
    files: tuple[str, ...]


@dataclass(frozen=True)
class StackPatch:
    """A position in the stack: the primary patch and the alternatives tried after it, in order."""

    name: str
    candidates: tuple[Patch, ...]

    @property
    def touched(self) -> frozenset[str]:
        return frozenset(f for c in self.candidates for f in c.files)


@dataclass(frozen=True)
class AppliedStack:
    """What was applied at one commit: content hash of the applied patches and the variants used."""

    hash: str
    applied: tuple[tuple[str, str], ...]  # (patch name, file actually applied)

    @property
    def variants(self) -> dict[str, str]:
        """Patch name → the file applied for it (the patch itself or one of its alternatives)."""
        return dict(self.applied)


@dataclass(frozen=True)
class PatchConflict:
    """Why the stack does not apply at a commit: which patch, files, hunks; which variants were tried."""

    commit: str
    patch: str
    files: tuple[str, ...]
    hunks: tuple[str, ...]  # "path:line" of the hunks git could not place
    tried: tuple[str, ...]
    detail: str

    def describe(self) -> str:
        files = ", ".join(self.files) or "unknown files"
        return f"{self.patch} ({files})"


class PatchConflictError(PatchError):
    """PatchError carrying the structured conflict (hunks, variants tried, commit)."""

    def __init__(self, conflict: PatchConflict, subject: str = ""):
        hunks = f" Hunks that did not apply: {', '.join(conflict.hunks)}." if conflict.hunks else ""
        tried = f" Variants tried: {', '.join(conflict.tried)}." if len(conflict.tried) > 1 else ""
        detail = f" git said: {conflict.detail}" if conflict.detail else ""
        super().__init__(
            f"Patch {conflict.patch} does not apply at commit {conflict.commit[:10]}"
            f"{' (' + subject + ')' if subject else ''}: conflicts in {', '.join(conflict.files) or 'unknown files'}."
            f"{hunks}{tried}{detail} This commit is skipped, never blamed. Fix: refresh the patch "
            f"against this commit, or add a version that fits it under [patches.variants].",
            patch=conflict.patch,
            files=conflict.files,
        )
        self.conflict = conflict
        self.hunks = conflict.hunks
        self.commit = conflict.commit


@dataclass(frozen=True)
class PatchCheck:
    """Whether the stack applies at one commit, and with which variants."""

    commit: Commit
    applied: AppliedStack | None
    conflict: PatchConflict | None
    rechecked: bool  # False when inherited from the parent (no file the stack touches changed)

    @property
    def ok(self) -> bool:
        return self.conflict is None


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class PatchStack:
    """Ordered patches re-applied on top of every tested commit (three-way, into the index)."""

    def __init__(self, repo: TargetRepo, patches: Sequence[StackPatch], source: str, workdir: Path | None = None):
        self.repo = repo
        self.patches = tuple(patches)
        self.source = source
        self._workdir = workdir  # temp dir holding patches exported from a branch: this stack owns it
        self._patched_memo: dict[tuple, dict[str, str | None] | None] = {}  # patched_files by blob state
        # Removed by cleanup() (or leaving a ``with`` block); should an owner forget, when the
        # stack is garbage-collected or the interpreter exits, so a command never leaks it.
        self._remove_workdir = (
            weakref.finalize(self, shutil.rmtree, workdir, ignore_errors=True) if workdir is not None else None
        )

    # -- loading ------------------------------------------------------------------------------

    @classmethod
    def load(cls, config: PatchesConfig, repo: TargetRepo) -> PatchStack:
        """Read the stack from a directory of patch files or from the commits base..branch.

        A stack read from a branch holds its exported patch files in a temporary directory until
        ``cleanup()``: use the stack as a context manager, or have its owner call ``cleanup()``.
        """
        if config.dir is None and config.branch and config.base:
            workdir = Path(tempfile.mkdtemp(prefix="perfbisect-patches-"))
        else:
            workdir = None
        try:
            patches, source = cls._read(config, repo, workdir)
            if workdir is not None and (config.versions or config.reflog):
                return VersionedStack.of(repo, config, patches, source, workdir)
        except BaseException:
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)
            raise
        return cls(repo, patches, source, workdir)

    @classmethod
    def _read(cls, config: PatchesConfig, repo: TargetRepo, workdir: Path | None) -> tuple[list[StackPatch], str]:
        if config.dir is not None:
            primaries = cls._from_dir(Path(config.dir), repo)
            source = str(config.dir)
        elif config.branch:
            if not config.base or workdir is None:
                raise ConfigError("[patches] 'branch' needs 'base': the upstream commit the patch branch starts from.")
            base = config.base
            if config.versions or config.reflog:  # `base` is upstream (origin/main): each version leaves it somewhere
                status, out, _ = repo.run("merge-base", repo.resolve(config.base).sha, repo.resolve(config.branch).sha)
                base = out.strip() if status == 0 and out.strip() else base
            primaries = cls._from_branch(base, config.branch, repo, workdir)
            source = f"{config.base}..{config.branch}"
        else:
            raise ConfigError("[patches] needs 'dir' (a directory of patch files) or 'branch' and 'base'.")
        by_name = {p.name: p for p in primaries}
        alternatives: dict[str, list[Patch]] = {}
        for variant in config.variants:
            if variant.patch not in by_name:
                raise ConfigError(
                    f"[patches.variants] names patch '{variant.patch}', which is not in the stack "
                    f"({source}). Known patches: {', '.join(by_name) or '(none)'}. Fix the name."
                )
            for alt in variant.alternatives:
                alternatives.setdefault(variant.patch, []).append(_read_patch(Path(alt), repo, alt.name))
        return [StackPatch(p.name, (p, *alternatives.get(p.name, ()))) for p in primaries], source

    @staticmethod
    def _from_dir(directory: Path, repo: TargetRepo) -> list[Patch]:
        if not directory.is_dir():
            raise ConfigError(
                f"Patch directory {directory} does not exist. Fix [patches] dir in perfbisect.toml, or "
                f"create it with `git format-patch -o {directory} BASE..BRANCH`."
            )
        files = sorted(p for p in directory.iterdir() if p.is_file() and p.suffix in (".patch", ".diff"))
        if not files:
            others = sorted(p.name for p in directory.iterdir())
            seen = f" (it holds: {', '.join(others[:5])})" if others else ""
            raise ConfigError(
                f"Patch directory {directory} has no *.patch or *.diff files{seen}. Fix: write the "
                f"stack with `git format-patch -o {directory} BASE..BRANCH`, or remove [patches]."
            )
        return [_read_patch(f, repo, f.name) for f in files]

    @staticmethod
    def _from_branch(base: str, branch: str, repo: TargetRepo, workdir: Path, suffix: str = "") -> list[Patch]:
        b, tip = repo.resolve(base), repo.resolve(branch)
        if not repo.is_ancestor(b.sha, tip.sha):
            raise ConfigError(
                f"[patches] base {base} is not an ancestor of branch {branch}, so {base}..{branch} is "
                f"not a patch stack. Fix 'base' to the upstream commit the branch started from."
            )
        out = repo.git("rev-list", "--reverse", "--no-merges", f"{b.sha}..{tip.sha}")
        shas = [s for s in out.split() if s]
        if not shas:
            raise ConfigError(f"[patches] {base}..{branch} holds no commits: the stack is empty. Fix 'base' or 'branch'.")
        patches = []
        for i, sha in enumerate(shas, 1):
            text = repo.git("format-patch", "-1", "--stdout", "--full-index", "--binary", "--no-signature", sha)
            subject = repo.resolve(sha).subject
            slug = re.sub(r"[^A-Za-z0-9]+", "-", subject).strip("-")[:52] or "patch"
            path = workdir / f"{i:04d}-{slug}{suffix}.patch"
            path.write_text(text)
            patches.append(_read_patch(path, repo, path.name))
        return patches

    # -- identity -------------------------------------------------------------------------------

    @cached_property
    def hash(self) -> str:
        """Content hash of the whole configured stack, alternatives included."""
        return content_hash([[p.name, [c.sha256 for c in p.candidates]] for p in self.patches])

    @cached_property
    def touched_paths(self) -> frozenset[str]:
        """Every path any patch or alternative touches: only commits changing these need rechecking."""
        return frozenset().union(*(p.touched for p in self.patches)) if self.patches else frozenset()

    @staticmethod
    def applied_hash(applied: Sequence[tuple[str, Patch]]) -> str:
        return content_hash([[name, patch.sha256] for name, patch in applied])

    # -- applying ---------------------------------------------------------------------------

    def apply(self, worktree: Path | str, commit: Commit | str = "") -> AppliedStack:
        """Apply the stack to a clean worktree with ``git apply --3way --index``; PatchConflictError if not."""
        worktree = Path(worktree)
        subject = commit.subject if isinstance(commit, Commit) else ""
        sha = commit.sha if isinstance(commit, Commit) else str(commit)
        sha = sha or check_git(worktree, ["rev-parse", "HEAD"], "reading HEAD").strip()
        return self._apply_all(_WorktreeTarget(worktree), sha, subject)

    def check_at(self, commit: Commit | str) -> PatchCheck:
        """Whether the stack applies at ``commit``, using a temporary index (nothing checked out)."""
        c = commit if isinstance(commit, Commit) else self.repo.resolve(commit)
        with tempfile.TemporaryDirectory(prefix="perfbisect-index-") as tmp:
            target = _IndexTarget(self.repo, Path(tmp) / "index", c.sha)
            try:
                applied = self._apply_all(target, c.sha)
            except PatchConflictError as exc:
                return PatchCheck(c, None, exc.conflict, True)
        return PatchCheck(c, applied, None, True)

    def _apply_all(self, target: "_ApplyTarget", commit: str, subject: str = "") -> AppliedStack:
        applied: list[tuple[str, Patch]] = []
        for sp in self.patches:
            snapshot = target.snapshot()
            chosen = None
            failures: list[tuple[Patch, str, str]] = []
            for cand in sp.candidates:
                status, out, err = target.apply(cand.path)
                if status == 0:
                    chosen = cand
                    break
                if status != _APPLY_CONFLICT:
                    # 128 is git dying (index.lock held, disk full, patch file unreadable): a fault of
                    # this machine, not of the commit, so it must stop the run, never skip the commit.
                    try:
                        target.restore(snapshot)
                    except PerfbisectError:
                        pass  # the same fault; the worktree is cleaned at its next checkout
                    words = " ".join(l.strip() for l in err.splitlines() if l.strip())[:400] or f"exit status {status}"
                    raise InfrastructureError(
                        f"git could not apply {cand.name} at {commit[:10]} (exit status {status}): {words}. "
                        f"This is a problem of the repository or the machine (a stale index.lock, a full disk, "
                        f"permissions), not a patch conflict: fix it and run again (`perfbisect resume` "
                        f"continues a bisection)."
                    )
                # A failed three-way apply leaves conflict markers: undo before anything else.
                target.restore(snapshot)
                failures.append((cand, out, err))
            if chosen is None:
                # Described by the newest version tried (the last): the one nearest to this commit, whose files
                # are the ones that conflict here (the first may edit a file upstream has since moved or deleted).
                first, out, err = failures[-1]
                raise PatchConflictError(
                    self._conflict(target, commit, sp, first, out, err, [c.name for c, _, _ in failures]), subject
                )
            applied.append((sp.name, chosen))
        return AppliedStack(self.applied_hash(applied), tuple((n, p.name) for n, p in applied))

    def _conflict(self, target, commit, sp, patch, out, err, tried) -> PatchConflict:
        text = f"{out}\n{err}"
        files = []
        for line in text.splitlines():
            m = _CONFLICTED.match(line.strip()) or _APPLIED_WITH_CONFLICTS.search(line)
            if m and m.group(1) not in files:
                files.append(m.group(1))
        hunks = []
        for line in target.check_hunks(patch.path).splitlines():
            m = _HUNK_FAILED.search(line)
            if m:
                hunks.append(f"{m.group(1)}:{m.group(2)}")
                if m.group(1) not in files:
                    files.append(m.group(1))
        if not files:
            files = list(patch.files)
        detail = " ".join(l.strip() for l in err.splitlines() if l.strip().startswith(("error", "fatal")))[:400]
        return PatchConflict(commit, sp.name, tuple(files), tuple(hunks), tuple(tried), detail)

    def check_range(self, commits: Sequence[Commit]) -> list[PatchCheck]:
        """Whether the stack applies at each commit of a first-parent range, cheaply.

        Applying depends only on the content of the files the stack touches. One ``git log --raw``
        over the range gives the blob of each such file at every commit; a commit whose blobs
        were already seen (its parent's, or an earlier state after a revert) reuses that answer.
        A new state is checked in a temporary index holding only the touched files (no checkout,
        no full-tree index), so a check costs a few small git calls.
        """
        if not commits:
            return []
        touched = sorted(self.touched_paths)
        state = self._blobs_at(commits[0].sha, touched)
        changes = self._blob_changes(commits[0].sha, commits[-1].sha, touched) if len(commits) > 1 else {}
        memo: dict[tuple, tuple[AppliedStack | None, PatchConflict | None]] = {}
        results: list[PatchCheck] = []
        self._prepare_range(commits)
        with tempfile.TemporaryDirectory(prefix="perfbisect-index-") as tmp:
            for i, c in enumerate(commits):
                if i > 0:
                    for path, entry in changes.get(c.sha, ()):
                        state[path] = entry
                key = (self._range_key(c), tuple(sorted((p, e) for p, e in state.items() if e is not None)))
                if key in memo:
                    applied, conflict = memo[key]
                    results.append(PatchCheck(c, applied, _retarget(conflict, c.sha), False))
                    continue
                target = _SmallIndexTarget(self.repo, Path(tmp) / f"index-{i}", key[1])
                try:
                    applied, conflict = self._apply_all(target, c.sha), None
                except PatchConflictError as exc:
                    applied, conflict = None, exc.conflict
                finally:
                    target.index.unlink(missing_ok=True)
                memo[key] = (applied, conflict)
                results.append(PatchCheck(c, applied, conflict, True))
        return results

    def _range_key(self, commit: Commit | str) -> tuple:
        """What besides the touched files' content decides how the stack applies at ``commit`` (nothing here)."""
        return ()

    def _prepare_range(self, commits: Sequence[Commit]) -> None:
        """A hook for ``check_range`` to learn the range before checking it (nothing here)."""

    def patched_files(self, commit: Commit | str, paths: Sequence[str]) -> dict[str, str | None] | None:
        """The text of ``paths`` at ``commit`` with the stack applied, or None where it does not apply.

        Read from a small temporary index (the touched files and ``paths``, no checkout) into which the
        whole stack is applied as a trial would (``git apply --cached --3way``, variants in order); a
        path the patched tree lacks is None. Memoized by the blobs of those files: commits whose
        touched files are the same cost nothing more. A stack that does not apply answers None: the
        commit is untestable for that reason (``check_range``, the trial), whatever its files say.
        """
        sha = commit.sha if isinstance(commit, Commit) else self.repo.resolve(commit).sha
        wanted = tuple(dict.fromkeys(paths))
        state = self._blobs_at(sha, sorted(self.touched_paths | set(wanted)))
        key = (wanted, self._range_key(sha), tuple(sorted((p, e) for p, e in state.items() if e is not None)))
        memo = self._patched_memo
        if key not in memo:
            with tempfile.TemporaryDirectory(prefix="perfbisect-index-") as tmp:
                target = _SmallIndexTarget(self.repo, Path(tmp) / "index", key[2])
                try:
                    self._apply_all(target, sha)
                except PatchConflictError:
                    memo[key] = None
                else:
                    memo[key] = {path: target.read(path) for path in wanted}
        return memo[key]

    def _blobs_at(self, sha: str, paths: Sequence[str]) -> dict[str, tuple[str, str] | None]:
        state: dict[str, tuple[str, str] | None] = {p: None for p in paths}
        if not paths:
            return state
        out = self.repo.git("ls-tree", "-r", "-z", "--full-tree", sha, "--", *paths)
        for line in out.split("\x00"):
            if line:
                meta, path = line.split("\t", 1)
                mode, _kind, blob = meta.split()
                state[path] = (mode, blob)
        return state

    def _blob_changes(self, good: str, bad: str, paths: Sequence[str]) -> dict[str, list[tuple[str, tuple[str, str] | None]]]:
        """Per commit of good..bad (first parent): new (mode, blob) of each touched file it changed."""
        if not paths:
            return {}
        out = self.repo.git(
            "log", "-z", "--first-parent", "--diff-merges=first-parent", "--no-renames", "--raw", "--no-abbrev",
            "--format=%x00%H", f"{good}..{bad}", "--", *paths,
        )
        changes: dict[str, list[tuple[str, tuple[str, str] | None]]] = {}
        for (sha,), raw in log_records(out, 1, lambda tokens: list(tokens)):
            rows = changes.setdefault(sha.strip(), [])
            # --raw -z: ":old_mode new_mode old_blob new_blob status", then the path, as two tokens.
            for j in range(0, len(raw) - 1, 2):
                meta, path = raw[j], raw[j + 1]
                if not meta.startswith(":"):
                    continue
                _old_mode, new_mode, _old, new_blob, _status = meta[1:].split()
                rows.append((path, None if set(new_blob) == {"0"} else (new_mode, new_blob)))
        return changes

    def cleanup(self) -> None:
        """Remove the temporary files of a stack exported from a branch (idempotent).

        The stack cannot be applied or checked afterwards: its patch files are gone.
        """
        if self._remove_workdir is not None:
            self._remove_workdir()

    def __enter__(self) -> PatchStack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def differing(self) -> dict[str, str]:
        """Each version of a patch (file name) that says it differs from the one it replaces → how."""
        return {c.name: note for sp in self.patches for c in sp.candidates if (note := differs_note(c.path))}

    def __len__(self) -> int:
        return len(self.patches)


DIFFERS = "Perfbisect-Differs:"  # a version's own line on how it differs from the version it replaces (patches carry)


def differs_note(path: Path) -> str | None:
    """What a version of a patch says of how it differs from the one it replaces (None: it does not say so)."""
    try:
        for line in Path(path).read_text(errors="replace").splitlines():
            if line.startswith(DIFFERS):
                return line[len(DIFFERS):].strip()
            if line.startswith("diff --git "):
                return None
    except OSError:
        return None
    return None


def _retarget(conflict: PatchConflict | None, sha: str) -> PatchConflict | None:
    if conflict is None:
        return None
    return PatchConflict(sha, conflict.patch, conflict.files, conflict.hunks, conflict.tried, conflict.detail)


def _read_patch(path: Path, repo: TargetRepo, name: str) -> Patch:
    if not path.is_file():
        raise ConfigError(f"Patch file {path} does not exist. Fix the path in [patches] (dir or variants).")
    # -z: names verbatim (never C-quoted: non-ASCII, quotes, tabs), a rename as two more tokens.
    status, out, err = repo.run("apply", "--numstat", "-z", str(path.resolve()))
    files = []
    tokens = out.split("\x00")
    i = 0
    while i < len(tokens):
        parts = tokens[i].split("\t", 2)
        i += 1
        if len(parts) != 3:
            continue
        if parts[2]:
            files.append(parts[2])
        else:  # "added\tdeleted\t" then the old and the new name
            files.extend(t for t in tokens[i : i + 2] if t)
            i += 2
    if status != 0 or not files:
        why = err.strip().splitlines()[-1] if err.strip() else "it holds no diff"
        # A config error (exit 2), not a PatchError: that would mark every commit untestable.
        raise ConfigError(
            f"{path} is not a patch git can read ({why}). Fix: regenerate it with `git format-patch`, "
            f"or move it out of the patch directory."
        )
    return Patch(name=name, path=path.resolve(), sha256=_sha256_file(path), files=tuple(dict.fromkeys(files)))


class _ApplyTarget:
    def snapshot(self): ...
    def restore(self, snap) -> None: ...
    def apply(self, patch: Path) -> tuple[int, str, str]: ...
    def check_hunks(self, patch: Path) -> str: ...


class _WorktreeTarget(_ApplyTarget):
    """Apply into a worktree and its index (what a build will see)."""

    def __init__(self, worktree: Path):
        self.worktree = worktree

    # A failure here is git's or the machine's (index.lock, disk), never the commit's: exit 4, no skip.
    def snapshot(self) -> str:
        return check_git(
            self.worktree, ["write-tree"], "saving the index before trying a patch variant", error=InfrastructureError
        ).strip()

    def restore(self, tree: str) -> None:
        what = "undoing a patch variant that did not apply"
        check_git(self.worktree, ["read-tree", "--reset", "-u", tree], what, error=InfrastructureError)
        check_git(self.worktree, ["clean", "-fdq"], what, error=InfrastructureError)

    def apply(self, patch: Path) -> tuple[int, str, str]:
        return run_git(self.worktree, ["apply", "--3way", "--index", "--whitespace=nowarn", str(patch)])

    def check_hunks(self, patch: Path) -> str:
        return run_git(self.worktree, ["apply", "--check", "--index", str(patch)])[2]


class _IndexTarget(_ApplyTarget):
    """Apply into a temporary index file only: no files are written, so a check costs milliseconds."""

    def __init__(self, repo: TargetRepo, index: Path, sha: str):
        self.repo = repo
        self.index = index
        self.env = {"GIT_INDEX_FILE": str(index)}
        repo.git("read-tree", sha, env=self.env, what=f"loading {sha[:10]} into a temporary index")

    def snapshot(self) -> bytes:
        return self.index.read_bytes()

    def restore(self, data: bytes) -> None:
        self.index.write_bytes(data)

    def apply(self, patch: Path) -> tuple[int, str, str]:
        return self.repo.run("apply", "--cached", "--3way", "--whitespace=nowarn", str(patch), env=self.env)

    def check_hunks(self, patch: Path) -> str:
        return self.repo.run("apply", "--cached", "--check", str(patch), env=self.env)[2]

    def read(self, path: str) -> str | None:
        """The text of ``path`` in this index (as patched so far), or None where it has no such entry."""
        status, out, _ = self.repo.run("show", f":{path}", env=self.env)
        return out if status == 0 else None


class _SmallIndexTarget(_IndexTarget):
    """A temporary index holding only the files the stack touches: each apply reads and writes
    a few entries instead of the whole tree. (A patch adding a file where the tree has a
    directory of that name would pass here and fail in the worktree; the build step then reports it.)"""

    def __init__(self, repo: TargetRepo, index: Path, entries: Sequence[tuple[str, tuple[str, str]]]):
        self.repo = repo
        self.index = index
        self.env = {"GIT_INDEX_FILE": str(index)}
        if entries:
            args = [a for path, (mode, blob) in entries for a in ("--cacheinfo", f"{mode},{blob},{path}")]
            repo.git("update-index", "--add", *args, env=self.env, what="building a temporary index")
        else:
            repo.git("read-tree", "--empty", env=self.env, what="building a temporary index")


def check_patches(repo: TargetRepo, good: str, bad: str, stack: PatchStack) -> list[PatchCheck]:
    """For every commit of good..bad (first-parent): does the stack apply, and with which variants."""
    return stack.check_range(repo.first_parent_range(good, bad))


class VersionedStack(PatchStack):
    """A patch branch the user rebases, with its earlier versions (``[patches] versions``: tags, branches or shas
    of earlier tips; ``reflog = true``: every tip the branch's reflog holds). Each version is the branch's commits
    over its own base (where it leaves upstream: ``git merge-base`` with ``[patches] base``). At a commit the
    version based nearest before it is tried first (the one a user would have rebased onto it), then the others,
    nearest base first; the applied files name the version (``NNNN-subject@TIP.patch``)."""

    def __init__(self, repo: TargetRepo, versions: Sequence[tuple[str, str, PatchStack]], source: str, workdir: Path):
        newest = versions[-1][2]
        super().__init__(repo, newest.patches, source, workdir)
        self.versions = tuple(versions)  # (base sha, tip sha, its stack), oldest base first
        self._preference: dict[str, tuple[int, ...]] = {}

    @classmethod
    def of(cls, repo: TargetRepo, config: "PatchesConfig", newest: Sequence[StackPatch], source: str,
           workdir: Path) -> "VersionedStack":
        tip = repo.resolve(config.branch).sha
        tips = [repo.resolve(v).sha for v in config.versions]
        if config.reflog:
            status, out, _ = repo.run("reflog", "show", "--format=%H", config.branch, "--")
            if status == 0:
                tips += [line.strip() for line in out.splitlines() if line.strip()]
        upstream = repo.resolve(config.base).sha
        versions: dict[str, tuple[int, str, str, PatchStack]] = {}
        for t in dict.fromkeys([tip, *tips]):
            status, out, _ = repo.run("merge-base", t, upstream)
            if status != 0 or not out.strip():
                raise ConfigError(f"[patches] version {t[:10]} of {config.branch} shares no history with base {config.base}: "
                                  f"it cannot be a version of the stack. Remove it from [patches] versions.")
            base = out.strip()
            if base == t or (base in versions and t != tip):
                continue  # no commits of its own, or a second tip on one base (the newest is kept)
            depth = int(repo.git("rev-list", "--count", base).strip())
            if t == tip:
                stack = PatchStack(repo, newest, source, None)
            else:
                vdir = workdir / f"v-{t[:10]}"
                vdir.mkdir(parents=True, exist_ok=True)
                primaries = cls._from_branch(base, t, repo, vdir, suffix=f"@{t[:7]}")
                stack = PatchStack(repo, [StackPatch(p.name, (p,)) for p in primaries], f"{base[:10]}..{t[:10]}", None)
            versions[base] = (depth, base, t, stack)
        ordered = [(b, t, st) for _, b, t, st in sorted(versions.values(), key=lambda v: v[0])]
        return cls(repo, ordered, f"{source} (+{len(ordered) - 1} earlier version{'s' if len(ordered) != 2 else ''})", workdir)

    @cached_property
    def hash(self) -> str:
        return content_hash([[b, t, st.hash] for b, t, st in self.versions])

    @cached_property
    def touched_paths(self) -> frozenset[str]:
        return frozenset().union(*(st.touched_paths for _, _, st in self.versions))

    def _order(self, chosen: int) -> tuple[int, ...]:
        n = len(self.versions)
        return (chosen, *sorted((i for i in range(n) if i != chosen), key=lambda i: (abs(i - chosen), -i)))

    def _prepare_range(self, commits: Sequence[Commit]) -> None:
        """Which version each commit of a first-parent range prefers: the newest base at or before it."""
        position = {c.sha: i for i, c in enumerate(commits)}
        starts = []
        for i, (base, _, _) in enumerate(self.versions):
            if base in position:
                starts.append((position[base], i))
            elif commits and self.repo.is_ancestor(base, commits[0].sha):
                starts.append((-1, i))
        for p, c in enumerate(commits):
            chosen = max((i for start, i in starts if start <= p), default=0)
            self._preference[c.sha] = self._order(chosen)

    def _range_key(self, commit: Commit | str) -> tuple:
        return self._prefers(commit.sha if isinstance(commit, Commit) else commit)

    def _prefers(self, sha: str) -> tuple[int, ...]:
        if sha not in self._preference:
            chosen = max((i for i, (base, _, _) in enumerate(self.versions) if self.repo.is_ancestor(base, sha)), default=0)
            self._preference[sha] = self._order(chosen)
        return self._preference[sha]

    def _apply_all(self, target: "_ApplyTarget", commit: str, subject: str = "") -> AppliedStack:
        first: PatchConflictError | None = None
        for i in self._prefers(commit):
            snapshot = target.snapshot()
            try:
                return self.versions[i][2]._apply_all(target, commit, subject)
            except PatchConflictError as exc:
                target.restore(snapshot)
                first = first or exc
        assert first is not None
        raise first

    def differing(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for _, _, st in self.versions:
            out.update(st.differing())
        return out
