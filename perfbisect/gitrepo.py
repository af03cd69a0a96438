"""The target repository: ranges, path filters, the patch stack and reusable worktrees.

This is the one module that imports GitPython. Every git call is an argument list (never a shell
string). Reading the history of a 10,000-commit range costs one ``git log`` call; checking whether
the patch stack applies uses a temporary index (no checkout) and is only repeated at commits that
touch a file the stack touches.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping, Sequence

import git

from .errors import ConfigError, GitError, InfrastructureError, PatchError, PerfbisectError
from .model import Commit, content_hash

from .settings import SGLANG_IGNORE_PATHS

if TYPE_CHECKING:
    from .settings import PatchesConfig

_LOG_FORMAT = "%H%x00%P%x00%aI%x00%s"
_HUNK_FAILED = re.compile(r"patch failed: (.+):(\d+)\s*$")
_CONFLICTED = re.compile(r"^U (.+)$")
_APPLIED_WITH_CONFLICTS = re.compile(r"Applied patch to '(.+)' with conflicts")
_APPLY_CONFLICT = 1  # `git apply`'s status when a patch does not apply; 128 means git itself failed


def _run_git(
    workdir: Path | str, args: Sequence[str], env: Mapping[str, str] | None = None
) -> tuple[int, str, str]:
    """Run ``git ARGS`` in ``workdir``; return (status, stdout, stderr) without raising."""
    try:
        status, out, err = git.Git(str(workdir)).execute(
            # Paths verbatim (UTF-8, quotes, tabs) wherever git would print them C-quoted.
            ["git", "-c", "core.quotePath=false", *args],
            with_extended_output=True,
            with_exceptions=False,
            strip_newline_in_stdout=False,
            env=dict(env) if env else None,
        )
    except git.GitCommandNotFound:
        raise GitError(
            "The `git` executable was not found on PATH. Install git (2.31 or newer) or put it on PATH."
        ) from None
    return int(status or 0), out, err


def _check_git(
    workdir: Path | str, args: Sequence[str], what: str, env: Mapping[str, str] | None = None,
    error: type[PerfbisectError] = GitError,
) -> str:
    """Run git and raise ``error`` (with git's own words and ``what`` we were doing) on failure."""
    status, out, err = _run_git(workdir, args, env)
    if status != 0:
        raise error(
            f"git {args[0]} failed in {workdir} while {what}: {err.strip() or out.strip()}. "
            f"Fix the repository state shown above (or run `perfbisect gc` to drop perfbisect's "
            f"worktrees) and try again."
        )
    return out


def _records(out: str, n_fields: int, body: Callable[[list[str]], list]) -> Iterator[tuple[list[str], list]]:
    """Split ``git log -z`` output made with a format that starts with ``%x00``.

    Every record is an empty token, ``n_fields`` format fields, then the tokens of its diff part
    (``--name-only`` paths, ``--raw`` pairs), which git separates from the header by one newline.
    Paths and raw entries are never empty, so an empty token is always the next record: no byte a
    subject or a file name may hold (\x01, tabs, quotes, newlines) can split a record or invent one.
    """
    tokens = out.split("\x00")
    i = 0
    while i < len(tokens):
        if tokens[i] != "" or i + n_fields >= len(tokens):
            i += 1
            continue
        fields = tokens[i + 1 : i + 1 + n_fields]
        j = i + 1 + n_fields
        rest = []
        while j < len(tokens) and tokens[j] != "":
            rest.append(tokens[j])
            j += 1
        if rest and rest[0].startswith("\n"):
            rest[0] = rest[0][1:]
        yield fields, body(rest)
        i = j


def _parse_commit(fields: Sequence[str]) -> Commit:
    sha, parents, date, subject = (list(fields) + ["", "", "", ""])[:4]
    return Commit(sha=sha.strip(), subject=subject, parents=tuple(parents.split()), author_date=date)


# --------------------------------------------------------------------------------------------
# Path filters


def _segment_regex(segment: str) -> str:
    out = []
    i = 0
    while i < len(segment):
        ch = segment[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            end = segment.find("]", i + 1)
            if end == -1:
                out.append(re.escape(ch))
            else:
                body = segment[i + 1 : end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def glob_regex(pattern: str) -> str:
    """Regex for one path glob: ``*`` stays inside a directory, ``**`` spans any number of them.

    Patterns are matched against the full path from the repository root. ``dir/`` means
    ``dir/**``; a pattern without wildcards also matches everything under it (``docs`` = ``docs/**``).
    """
    pattern = pattern.strip().lstrip("/")
    if pattern.endswith("/"):
        pattern += "**"
    if not any(c in pattern for c in "*?["):
        return re.escape(pattern) + "(?:/.*)?"
    parts = pattern.split("/")
    rx = []
    for i, seg in enumerate(parts):
        last = i == len(parts) - 1
        if seg == "**":
            rx.append(".*" if last else "(?:[^/]+/)*")
        else:
            rx.append(_segment_regex(seg) + ("" if last else "/"))
    return "".join(rx)


class PathFilter:
    """Globs of paths that cannot change serving throughput (docs, tests, CI, ...).

    A commit is ignorable when every path it changes matches a pattern. A commit that changes no
    path at all (an empty commit, or a merge identical to its first parent) is ignorable too: its
    tree equals its parent's, so measuring it would measure the parent's build again.
    """

    def __init__(self, patterns: Iterable[str], builtin: Iterable[str] = SGLANG_IGNORE_PATHS):
        self.patterns = tuple(p for p in patterns if p.strip())
        # Built-in defaults are not the user's input: one that matches nothing in a range (say
        # `sgl-router/**` after its rename) is expected and not worth a warning.
        self.builtin = frozenset(builtin)
        self._each = [re.compile(glob_regex(p)) for p in self.patterns]
        self._any = re.compile("|".join(f"(?:{glob_regex(p)})" for p in self.patterns)) if self.patterns else None

    def matches(self, path: str) -> bool:
        """True when ``path`` matches one of the patterns."""
        return bool(self._any and self._any.fullmatch(path))

    def only_ignored(self, paths: Iterable[str]) -> bool:
        """True when every path matches (and also when there are no paths: nothing changed)."""
        return all(self.matches(p) for p in paths)

    def unused_patterns(self, paths: Iterable[str]) -> tuple[str, ...]:
        """User patterns (not built-in defaults) that match none of ``paths``: likely typos."""
        left = {p: rx for p, rx in zip(self.patterns, self._each) if p not in self.builtin}
        for path in paths:
            if not left:
                break
            for pat in [p for p, rx in left.items() if rx.fullmatch(path)]:
                del left[pat]
        return tuple(left)

    def __repr__(self) -> str:
        return f"PathFilter({list(self.patterns)!r})"


# --------------------------------------------------------------------------------------------
# The repository


class TargetRepo:
    """The git checkout being bisected (read-only use: worktrees hold every checkout we make)."""

    def __init__(self, path: Path | str):
        path = Path(path).expanduser()
        try:
            self.repo = git.Repo(path, search_parent_directories=False)
        except git.NoSuchPathError:
            raise GitError(
                f"The target repository {path} does not exist. Fix [target] repo in perfbisect.toml "
                f"or clone the repository there."
            ) from None
        except git.InvalidGitRepositoryError:
            raise GitError(
                f"{path} is not a git repository (no .git found there). Point [target] repo at the "
                f"root of your SGLang checkout, or run `git init`/`git clone` first."
            ) from None
        if self.repo.bare or self.repo.working_tree_dir is None:
            raise GitError(f"{path} is a bare repository; perfbisect needs a normal checkout. Clone it without --bare.")
        self.path = Path(self.repo.working_tree_dir)
        # The shared .git of the main checkout: worktree metadata lives under <common>/worktrees.
        self.common_dir = Path(self.git("rev-parse", "--git-common-dir").strip())
        if not self.common_dir.is_absolute():
            self.common_dir = (self.path / self.common_dir).resolve()
        self._changed: dict[str, tuple[str, ...]] = {}
        self._commits: dict[str, Commit] = {}

    def git(self, *args: str, env: Mapping[str, str] | None = None, what: str = "reading the repository") -> str:
        """Run a git command in the repository and return stdout; GitError on failure."""
        return _check_git(self.path, args, what, env)

    def run(self, *args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> tuple[int, str, str]:
        """Run a git command and return (status, stdout, stderr) without raising."""
        return _run_git(cwd or self.path, args, env)

    # -- commits and ranges ------------------------------------------------------------------

    def resolve(self, rev: str) -> Commit:
        """The commit a revision names (sha, branch, tag, HEAD~3, ...)."""
        rev = str(rev).strip()
        if not rev or rev.startswith("-"):
            raise GitError(f"'{rev}' is not a revision. Give a commit sha, branch, tag or HEAD~N.")
        status, out, err = self.run("rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
        if status != 0 or not out.strip():
            raise GitError(
                f"Unknown revision '{rev}' in {self.path}: git cannot resolve it to a commit. "
                f"Fix: `git fetch` if it is on a remote, check its spelling, or use a full sha."
            )
        sha = out.strip()
        if sha not in self._commits:
            fields = self.git("log", "-1", f"--format={_LOG_FORMAT}", sha).rstrip("\n").split("\x00")
            self._commits[sha] = _parse_commit(fields)
        return self._commits[sha]

    def is_ancestor(self, older: str, newer: str) -> bool:
        """True when ``older`` is an ancestor of (or equal to) ``newer``."""
        status, _, err = self.run("merge-base", "--is-ancestor", older, newer)
        if status not in (0, 1):
            raise GitError(f"git merge-base failed in {self.path}: {err.strip()}. Check both revisions exist.")
        return status == 0

    def first_parent_range(self, good: str, bad: str) -> list[Commit]:
        """Commits from good to bad along bad's first-parent line: oldest first, good first, bad last."""
        g, b = self.resolve(good), self.resolve(bad)
        if g.sha == b.sha:
            raise GitError(
                f"good ({good}) and bad ({bad}) are the same commit {g.short}: there is no range to "
                f"search. Fix: pass an older good commit (e.g. the last release you trusted)."
            )
        if not self.is_ancestor(g.sha, b.sha):
            status, base, _ = self.run("merge-base", g.sha, b.sha)
            hint = (
                f" or use their merge-base {base.strip()[:10]} as good"
                if status == 0 and base.strip()
                else " (they share no history)"
            )
            if self.is_ancestor(b.sha, g.sha):
                hint = f"; {bad} is older than {good}, so swap them (good=older, bad=newer)"
            raise GitError(
                f"good {good} ({g.short}) is not an ancestor of bad {bad} ({b.short}) in {self.path}, "
                f"so {good}..{bad} is not a stretch of history. Fix: swap good and bad if they are the "
                f"wrong way round{hint}."
            )
        commits = self._log_range(g.sha, b.sha)
        if not commits or commits[-1].sha != b.sha or not commits[0].parents or commits[0].parents[0] != g.sha:
            raise GitError(
                f"good {good} ({g.short}) is an ancestor of bad {bad} ({b.short}) but not on its "
                f"first-parent line (it sits on a branch that was merged in). Fix: use the merge "
                f"commit's first parent or the merge-base on the main line as good."
            )
        return [g, *commits]

    def _log_range(self, good_sha: str, bad_sha: str) -> list[Commit]:
        """One ``git log`` for the whole range: commits (oldest first) and their changed paths."""
        out = self.git(
            "log",
            "-z",
            "--first-parent",
            "--diff-merges=first-parent",
            "--no-renames",
            "--name-only",
            "--reverse",
            f"--format=%x00{_LOG_FORMAT}",
            f"{good_sha}..{bad_sha}",
        )
        commits = []
        for fields, paths in _records(out, 4, lambda tokens: list(tokens)):
            commit = _parse_commit(fields)
            self._changed[commit.sha] = tuple(paths)
            self._commits[commit.sha] = commit
            commits.append(commit)
        return commits

    def changed_paths(self, commit: Commit | str) -> tuple[str, ...]:
        """Paths changed by ``commit`` against its first parent (renames count as delete + add)."""
        sha = commit.sha if isinstance(commit, Commit) else self.resolve(commit).sha
        if sha not in self._changed:
            c = self.resolve(sha)
            base = ["--root"] if not c.parents else [c.parents[0]]
            out = self.git("diff-tree", "-r", "-z", "--no-commit-id", "--no-renames", "--name-only", *base, sha)
            self._changed[sha] = tuple(p for p in out.split("\x00") if p)
        return self._changed[sha]

    def merged_commits(self, merge: Commit | str) -> list[Commit]:
        """Commits a merge brought in: reachable from its other parents but not its first (oldest first)."""
        m = merge if isinstance(merge, Commit) else self.resolve(merge)
        if not m.is_merge:
            return []
        out = self.git("log", "-z", "--reverse", f"--format={_LOG_FORMAT}", *m.parents[1:], f"^{m.parents[0]}")
        return self._parse_log_z(out)

    def merged_count(self, merge: Commit) -> int:
        """How many commits a merge brought in (0 for a normal commit)."""
        if not merge.is_merge:
            return 0
        return int(self.git("rev-list", "--count", *merge.parents[1:], f"^{merge.parents[0]}").strip() or 0)

    def _parse_log_z(self, out: str) -> list[Commit]:
        fields = out.split("\x00")
        commits = []
        for i in range(0, len(fields) - 3, 4):
            commits.append(_parse_commit([fields[i].lstrip("\n"), *fields[i + 1 : i + 4]]))
        return commits

    def files_at(self, commit: Commit | str) -> tuple[str, ...]:
        """Every file path in the tree of ``commit``."""
        sha = commit.sha if isinstance(commit, Commit) else commit
        out = self.git("ls-tree", "-r", "-z", "--full-tree", "--name-only", sha)
        return tuple(p for p in out.split("\x00") if p)

    def tree_hash(self, commit: Commit | str, globs: Sequence[str] = ("**",)) -> str:
        """Content hash of the files matching ``globs`` at ``commit`` (unpatched)."""
        sha = commit.sha if isinstance(commit, Commit) else self.resolve(commit).sha
        if _all_paths(globs):
            return self.git("rev-parse", f"{sha}^{{tree}}").strip()
        return _hash_entries(_z_entries(self.git("ls-tree", "-r", "-z", "--full-tree", sha)), globs)


def _all_paths(globs: Sequence[str]) -> bool:
    return any(g.strip() in ("**", "**/*", "") for g in globs) or not globs


def _z_entries(out: str) -> list[tuple[str, str]]:
    """(path, mode/type/object) pairs from NUL-separated `ls-tree -z` / `ls-files -s -z` output."""
    entries = []
    for line in out.split("\x00"):
        if line:
            meta, path = line.split("\t", 1)
            entries.append((path, meta))
    return entries


def _hash_entries(entries: Iterable[tuple[str, str]], globs: Sequence[str]) -> str:
    filt = PathFilter(globs)
    h = hashlib.sha256()
    for path, meta in sorted(entries):
        if filt.matches(path):
            h.update(f"{meta}\t{path}\x00".encode())
    return h.hexdigest()


def worktree_tree_hash(worktree: Path | str, globs: Sequence[str] = ("**",)) -> str:
    """Content hash of the files matching ``globs`` in a worktree's index (the patched content).

    The patch stack is applied with ``--index``, so the index holds exactly the patched tree: for
    ``**`` this is ``git write-tree``; for narrower globs the matching index entries are hashed.
    """
    if _all_paths(globs):
        return _check_git(worktree, ["write-tree"], "hashing the patched tree").strip()
    return _hash_entries(_z_entries(_check_git(worktree, ["ls-files", "-s", "-z"], "hashing the patched tree")), globs)


# --------------------------------------------------------------------------------------------
# Patch stack


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
        self._workdir = workdir  # temp dir holding patches exported from a branch

    # -- loading ------------------------------------------------------------------------------

    @classmethod
    def load(cls, config: PatchesConfig, repo: TargetRepo) -> PatchStack:
        """Read the stack from a directory of patch files or from the commits base..branch."""
        workdir = None
        if config.dir is not None:
            primaries = cls._from_dir(Path(config.dir), repo)
            source = str(config.dir)
        elif config.branch:
            if not config.base:
                raise ConfigError("[patches] 'branch' needs 'base': the upstream commit the patch branch starts from.")
            workdir = Path(tempfile.mkdtemp(prefix="perfbisect-patches-"))
            primaries = cls._from_branch(config.base, config.branch, repo, workdir)
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
        stack = [StackPatch(p.name, (p, *alternatives.get(p.name, ()))) for p in primaries]
        return cls(repo, stack, source, workdir)

    from_config = load  # the name docs/architecture.md uses

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
    def _from_branch(base: str, branch: str, repo: TargetRepo, workdir: Path) -> list[Patch]:
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
            path = workdir / f"{i:04d}-{slug}.patch"
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
        sha = sha or _check_git(worktree, ["rev-parse", "HEAD"], "reading HEAD").strip()
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
                first, out, err = failures[0]
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
        with tempfile.TemporaryDirectory(prefix="perfbisect-index-") as tmp:
            for i, c in enumerate(commits):
                if i > 0:
                    for path, entry in changes.get(c.sha, ()):
                        state[path] = entry
                key = tuple(sorted((p, e) for p, e in state.items() if e is not None))
                if key in memo:
                    applied, conflict = memo[key]
                    results.append(PatchCheck(c, applied, _retarget(conflict, c.sha), False))
                    continue
                target = _SmallIndexTarget(self.repo, Path(tmp) / f"index-{i}", key)
                try:
                    applied, conflict = self._apply_all(target, c.sha), None
                except PatchConflictError as exc:
                    applied, conflict = None, exc.conflict
                finally:
                    target.index.unlink(missing_ok=True)
                memo[key] = (applied, conflict)
                results.append(PatchCheck(c, applied, conflict, True))
        return results

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
        for (sha,), raw in _records(out, 1, lambda tokens: list(tokens)):
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
        """Remove the temporary files of a stack exported from a branch."""
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)

    def __len__(self) -> int:
        return len(self.patches)


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
        return _check_git(
            self.worktree, ["write-tree"], "saving the index before trying a patch variant", error=InfrastructureError
        ).strip()

    def restore(self, tree: str) -> None:
        what = "undoing a patch variant that did not apply"
        _check_git(self.worktree, ["read-tree", "--reset", "-u", tree], what, error=InfrastructureError)
        _check_git(self.worktree, ["clean", "-fdq"], what, error=InfrastructureError)

    def apply(self, patch: Path) -> tuple[int, str, str]:
        return _run_git(self.worktree, ["apply", "--3way", "--index", "--whitespace=nowarn", str(patch)])

    def check_hunks(self, patch: Path) -> str:
        return _run_git(self.worktree, ["apply", "--check", "--index", str(patch)])[2]


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


# --------------------------------------------------------------------------------------------
# Worktrees


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
            _check_git(path, ["reset", "--hard", "-q"], f"cleaning worktree {path}")
            _check_git(path, ["clean", "-ffdxq"], f"cleaning worktree {path}")
            _check_git(path, ["checkout", "-q", "--detach", "--force", sha], f"checking out {sha[:10]} in {path}")
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


# --------------------------------------------------------------------------------------------
# Plan


@dataclass(frozen=True)
class PlanWarning:
    """Bad input found while planning that does not stop the run (shown to the user)."""

    kind: str  # "filter-matches-nothing"
    message: str
    pattern: str = ""

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class PlanEntry:
    """One commit of the range: whether it would be measured, and why (not)."""

    commit: Commit
    measure: bool
    reason: str
    changed_paths: tuple[str, ...] = ()
    filtered: bool = False  # only ignorable paths changed: inherits the result of `inherits_from`
    inherits_from: str | None = None
    patch_variants: tuple[tuple[str, str], ...] | None = None  # (patch, file applied); None = not checked
    applied_hash: str | None = None
    conflict: PatchConflict | None = None
    merged_count: int = 0

    @property
    def skipped(self) -> bool:
        """Cannot be tested (patch conflict): never blamed."""
        return self.conflict is not None


@dataclass(frozen=True)
class Plan:
    """The range good..bad (first-parent), one entry per commit, plus warnings about bad input."""

    good: Commit
    bad: Commit
    entries: tuple[PlanEntry, ...]
    warnings: tuple[PlanWarning, ...] = ()
    filters: tuple[str, ...] = ()
    patch_hash: str | None = None

    @property
    def measured(self) -> list[PlanEntry]:
        return [e for e in self.entries if e.measure]

    @property
    def filtered(self) -> list[PlanEntry]:
        return [e for e in self.entries if e.filtered and not e.measure]

    @property
    def skipped(self) -> list[PlanEntry]:
        return [e for e in self.entries if e.skipped]

    def entry(self, sha: str) -> PlanEntry:
        """The entry of a commit (full sha or unique prefix)."""
        for e in self.entries:
            if e.commit.sha.startswith(sha):
                return e
        raise KeyError(sha)

    @property
    def commits(self) -> list[Commit]:
        return [e.commit for e in self.entries]


def plan_range(
    repo: TargetRepo,
    good: str,
    bad: str,
    filters: PathFilter | None = None,
    stack: PatchStack | None = None,
    check_patches: bool = False,
) -> Plan:
    """List good..bad: which commits would be measured, which are skipped or filtered, and why."""
    filters = filters or PathFilter(())
    commits = repo.first_parent_range(good, bad)
    checks = {c.commit.sha: c for c in stack.check_range(commits)} if (stack is not None and check_patches) else {}

    entries: list[PlanEntry] = []
    last_testable: str | None = None
    for i, c in enumerate(commits):
        endpoint = "good endpoint" if i == 0 else ("bad endpoint" if i == len(commits) - 1 else "")
        paths = repo.changed_paths(c) if i > 0 else ()
        filtered = i > 0 and filters.only_ignored(paths)
        merged = repo.merged_count(c) if c.is_merge else 0
        check = checks.get(c.sha)
        variants = check.applied.applied if check is not None and check.applied is not None else None
        applied_hash = check.applied.hash if check is not None and check.applied is not None else None
        common = dict(
            commit=c, changed_paths=paths, patch_variants=variants, applied_hash=applied_hash, merged_count=merged
        )
        if check is not None and check.conflict is not None:
            entries.append(
                PlanEntry(measure=False, reason=f"patch conflict: {check.conflict.describe()}", conflict=check.conflict, filtered=filtered, **common)
            )
            continue
        if endpoint:
            extra = f", merge of {merged} commits" if merged else ""
            entries.append(PlanEntry(measure=True, reason=endpoint + extra, filtered=filtered, **common))
        elif filtered:
            what = f"only {_describe_paths(paths)}" if paths else "no changed paths"
            entries.append(
                PlanEntry(measure=False, reason=f"filtered: {what}", filtered=True, inherits_from=last_testable, **common)
            )
            continue
        elif merged:
            entries.append(PlanEntry(measure=True, reason=f"merge of {merged} commits", **common))
        else:
            entries.append(PlanEntry(measure=True, reason=f"changes {len(paths)} path{'s' if len(paths) != 1 else ''}", **common))
        last_testable = c.sha

    warnings = []
    if filters.patterns:
        universe: set[str] = set()
        for c in commits[1:]:
            universe.update(repo.changed_paths(c))
        unused = filters.unused_patterns(universe)
        if unused:
            for path in (*repo.files_at(commits[0]), *repo.files_at(commits[-1])):
                universe.add(path)
            unused = filters.unused_patterns(universe)
        for pat in unused:
            warnings.append(
                PlanWarning(
                    "filter-matches-nothing",
                    f"Path filter '{pat}' matches no file in {commits[0].short}..{commits[-1].short} (neither "
                    f"the endpoints' files nor any changed path). Fix its spelling in [filters] ignore; "
                    f"patterns are full paths from the repository root and '**' spans directories.",
                    pat,
                )
            )
    return Plan(
        good=commits[0],
        bad=commits[-1],
        entries=tuple(entries),
        warnings=tuple(warnings),
        filters=filters.patterns,
        patch_hash=stack.hash if stack is not None else None,
    )


def check_patches(repo: TargetRepo, good: str, bad: str, stack: PatchStack) -> list[PatchCheck]:
    """For every commit of good..bad (first-parent): does the stack apply, and with which variants."""
    return stack.check_range(repo.first_parent_range(good, bad))


def _describe_paths(paths: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")
