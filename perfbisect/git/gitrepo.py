"""The target repository: resolving commits and ranges, and the one git runner.

This is the one module that imports GitPython: ``run_git``/``check_git`` run every git command
as an argument list (never a shell string), for this module and for the others that use git. Reading the history of a 10,000-commit
range costs one ``git log`` call. Path filters live in :mod:`perfbisect.git.pathfilter`, the patch
stack in :mod:`perfbisect.git.patches`, reusable worktrees in :mod:`perfbisect.git.worktrees` and the plan
of a range in :mod:`perfbisect.git.plan`.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import git

from ..errors import GitError, PerfbisectError
from ..model import Commit
from .pathfilter import PathFilter

_LOG_FORMAT = "%H%x00%P%x00%aI%x00%s"


# Every git call perfbisect makes runs with these: paths verbatim, and nothing of the repository's own run by our
# calls — its core.fsmonitor command (git runs it on every status, diff, checkout, apply) and its hooks
# (post-checkout on `worktree add`, post-index-change, reference-transaction, pre-commit ...). Only a trial's own
# build steps, server and workload run the target's code, by the config's word.
SAFE_CONFIG = ("-c", "core.quotePath=false", "-c", "core.fsmonitor=false", "-c", f"core.hooksPath={os.devnull}")


def run_git(
    workdir: Path | str, args: Sequence[str], env: Mapping[str, str] | None = None
) -> tuple[int, str, str]:
    """Run ``git ARGS`` in ``workdir``; return (status, stdout, stderr) without raising."""
    where = str(Path(workdir).absolute())
    try:
        status, out, err = git.Git(where).execute(
            # Paths verbatim (UTF-8, quotes, tabs) wherever git would print them C-quoted. `-C`: a
            # workdir that does not exist is git's error (GitPython would run in our own cwd instead).
            ["git", "-C", where, *SAFE_CONFIG, *args],
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


def check_git(
    workdir: Path | str, args: Sequence[str], what: str, env: Mapping[str, str] | None = None,
    error: type[PerfbisectError] = GitError,
) -> str:
    """Run git and raise ``error`` (with git's own words and ``what`` we were doing) on failure."""
    status, out, err = run_git(workdir, args, env)
    if status != 0:
        raise error(
            f"git {args[0]} failed in {workdir} while {what}: {err.strip() or out.strip()}. "
            f"Fix the repository state shown above (or run `perfbisect gc` to drop perfbisect's "
            f"worktrees) and try again."
        )
    return out


def log_records(out: str, n_fields: int, body: Callable[[list[str]], list]) -> Iterator[tuple[list[str], list]]:
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
        return check_git(self.path, args, what, env)

    def run(self, *args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> tuple[int, str, str]:
        """Run a git command and return (status, stdout, stderr) without raising."""
        return run_git(cwd or self.path, args, env)

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
        for fields, paths in log_records(out, 4, lambda tokens: list(tokens)):
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

    def file_at(self, commit: Commit | str, path: str) -> str | None:
        """The text of ``path`` at ``commit`` (no checkout), or None where the commit has no such file."""
        sha = commit.sha if isinstance(commit, Commit) else str(commit)
        status, out, _ = self.run("show", f"{sha}:{path}")
        return out if status == 0 else None

    def is_dir_at(self, commit: Commit | str, path: str) -> bool:
        """Whether ``path`` is a directory (a tree) at ``commit`` (no checkout)."""
        sha = commit.sha if isinstance(commit, Commit) else str(commit)
        status, out, _ = self.run("cat-file", "-t", f"{sha}:{path.strip('/')}")
        return status == 0 and out.strip() == "tree"

    def has_path(self, commit: Commit | str, path: str) -> bool:
        """Whether ``commit``'s tree has ``path`` (a file or a folder; no checkout)."""
        sha = commit.sha if isinstance(commit, Commit) else str(commit)
        status, _, _ = self.run("cat-file", "-e", f"{sha}:{path.strip('/')}")
        return status == 0

    def modified(self, path: str) -> bool:
        """Whether the working tree's ``path`` differs from HEAD (staged or not)."""
        status, _, _ = self.run("diff", "--quiet", "HEAD", "--", path)
        return status == 1

    def files_at(self, commit: Commit | str) -> tuple[str, ...]:
        """Every file path in the tree of ``commit``."""
        sha = commit.sha if isinstance(commit, Commit) else commit
        out = self.git("ls-tree", "-r", "-z", "--full-tree", "--name-only", sha)
        return tuple(p for p in out.split("\x00") if p)


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
        return check_git(worktree, ["write-tree"], "hashing the patched tree").strip()
    return _hash_entries(_z_entries(check_git(worktree, ["ls-files", "-s", "-z"], "hashing the patched tree")), globs)
