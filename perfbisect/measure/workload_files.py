"""One benchmark for every commit: ``workload.files``, and what plan and doctor say about the files a command names.

A command workload runs in each commit's worktree, so a benchmark written today is missing at old commits, an
untracked one is missing at every commit, and an edit to a tracked one is not what runs. The paths in
``workload.files`` are taken from the working tree once per command (``snapshot``: a copy under
``<cache_dir>/workload-files/<hash>/``, so an edit during a bisection changes nothing) and copied into each
worktree after its build, over the commit's own (``Snapshot.place``). Their hash joins the trial's build identity
(trials of two versions of a benchmark never pool) and is stored with a bisection, whose `resume` and cluster jobs
run that copy again (``kept``), never the working tree's of today.

``named_files`` finds the repository files a command names (``bench.py``, ``{worktree}/tools/b.py``, ``-m pkg.bench``)
and ``file_warnings`` says where one would not be the file the user means: untracked, edited, or missing at an
endpoint, and not in ``workload.files``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..errors import ConfigError
from ..git.gitrepo import TargetRepo
from ..model import Commit, content_hash
from ..placeholders import expand
from ..settings import Config

_SKIPPED = {".git", "__pycache__", ".pytest_cache"}


@dataclass(frozen=True)
class Snapshot:
    """``workload.files`` as they were when the command started: ``root`` holds them at their paths."""

    root: Path
    paths: tuple[str, ...]
    hash: str

    def place(self, worktree: Path) -> None:
        """Copy every file into ``worktree`` at its path, over what the commit has there."""
        worktree = Path(worktree)
        for rel in self.paths:
            src, dst = self.root / rel, worktree / rel
            # The benchmark wins where the commit disagrees about what a path is: a file where the snapshot has a
            # folder along the way, a folder (or a link) where it has a file.
            for parent in reversed(PurePosixPath(rel).parents[:-1]):
                here = worktree / parent
                if here.is_symlink() or (here.exists() and not here.is_dir()):
                    here.unlink()
            if dst.is_symlink() or dst.is_file():
                dst.unlink()
            elif dst.is_dir():
                shutil.rmtree(dst)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)

    def describe(self) -> str:
        shown = ", ".join(self.paths[:4]) + (f" and {len(self.paths) - 4} more" if len(self.paths) > 4 else "")
        return f"{shown} (from your working tree, {self.hash[:10]})"


def _files_of(repo: Path, name: str) -> list[str]:
    """The files ``name`` stands for in the working tree (a folder: every file under it), relative paths."""
    path = repo / name
    if path.is_file():
        return [PurePosixPath(name).as_posix()]
    if not path.is_dir():
        raise ConfigError(
            f"workload.files names {name!r}, which is not in your working tree {repo}. Create it there, or remove it "
            f"from workload.files (a file every commit has needs no entry)."
        )
    found = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED)
        for f in sorted(filenames):
            if not f.endswith((".pyc", ".pyo")):
                found.append((Path(dirpath) / f).relative_to(repo).as_posix())
    return found


def snapshot(cfg: Config) -> Snapshot | None:
    """Copy ``workload.files`` out of the working tree (once per content), or None when it names nothing."""
    names = cfg.workload.files
    if not names:
        return None
    repo = cfg.target.repo
    paths = tuple(sorted({p for name in names for p in _files_of(repo, name)}))
    base = cfg.cache_dir / "workload-files"
    base.mkdir(parents=True, exist_ok=True)
    # Copied first, then hashed: the name is the hash of the bytes kept, whatever an editor saves meanwhile.
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=base))
    for p in paths:
        (tmp / p).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / p, tmp / p)
    digest = _digest(tmp, paths)
    root = base / digest
    try:
        tmp.rename(root)
    except OSError:  # this content is kept already (by an earlier command): the same bytes
        shutil.rmtree(tmp, ignore_errors=True)
    return Snapshot(root=root, paths=paths, hash=digest)


def _digest(root: Path, paths: tuple[str, ...]) -> str:
    return content_hash([(p, (root / p).read_bytes().hex(), os.access(root / p, os.X_OK)) for p in paths])


def kept(cfg: Config, digest: str, bisection_id: int) -> Snapshot:
    """The snapshot a bisection started with (its hash stored with it), for `resume` and its cluster jobs: the
    search goes on with the benchmark it began with, not the working tree's of today."""
    root = cfg.cache_dir / "workload-files" / digest
    if not root.is_dir():
        raise ConfigError(
            f"Bisection #{bisection_id} ran workload.files as they were when it started (copy {digest[:10]}), and that "
            f"copy is gone from {root.parent} (the cache was cleared or another cache_dir is set): going on with "
            f"today's would compare two benchmarks in one search. Start a new `perfbisect run` instead."
        )
    paths = tuple(sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()))
    return Snapshot(root=root, paths=paths, hash=digest)


def named_files(cfg: Config) -> list[str]:
    """The scripts of this repository the workload command runs: arguments with a script's suffix (``.py``, ``.sh``,
    …; ``{worktree}/x`` counts as ``x``) and ``-m``'s module where its package is in the repository. Options, the
    value after a ``--long`` option, data and output files, anything outside the repository: not scripts of it."""
    repo = cfg.target.repo
    marker = "\0worktree\0"
    argv = expand(cfg.workload.command, python=cfg.target.python, worktree=marker)
    found: list[str] = []
    for i, arg in enumerate(argv[1:], start=1):
        before = argv[i - 1]
        if before == "-m" and arg and not arg.startswith("-"):
            # only a module of this repository (its first part a folder or file here): not `-m pytest`, not a
            # package the environment installs
            base = arg.replace(".", "/")
            top = base.split("/", 1)[0]
            if (repo / top).is_dir() or (repo / f"{top}.py").is_file():
                found.append(next((c for c in (f"{base}.py", f"{base}/__main__.py") if (repo / c).exists()), f"{base}.py"))
            continue
        if (arg.startswith("-") or "=" in arg.split("/")[0] or any(c.isspace() for c in arg)
                or (before.startswith("--") and "=" not in before)):
            continue  # an option, its value (an output file, a size), a shell snippet: not a file the command runs
        if arg.startswith(marker):
            rel = arg[len(marker):].lstrip("/")
        elif os.path.isabs(arg):
            try:
                rel = Path(arg).resolve().relative_to(repo.resolve()).as_posix()
            except ValueError:
                continue
        else:
            rel = arg
        if rel and not rel.startswith("..") and _looks_like_script(rel):
            found.append(PurePosixPath(rel).as_posix())
    return list(dict.fromkeys(found))


def _looks_like_script(rel: str) -> bool:
    return PurePosixPath(rel).suffix in {".py", ".sh", ".js", ".rb", ".pl", ".lua", ".jl", ".R"}


def _covered(path: str, files: tuple[str, ...]) -> bool:
    names = [PurePosixPath(f).as_posix() for f in files]  # "./bench.py" is bench.py
    return any(path == f or path.startswith(f + "/") for f in names)


def file_warnings(cfg: Config, repo: TargetRepo, endpoints: tuple[tuple[str, Commit], ...] = ()) -> list[str]:
    """Where a file the command names is not the one the user means: untracked, edited (against HEAD), missing
    at an endpoint (``endpoints``: (label, commit) pairs). Files in ``workload.files`` are the user's: no warning."""
    out = []
    fix = "add it to workload.files to run your working tree's version at every commit"
    for path in named_files(cfg):
        if _covered(path, cfg.workload.files):
            continue
        in_tree = (cfg.target.repo / path).is_file()
        tracked = repo.has_path("HEAD", path)
        if in_tree and not tracked:
            out.append(f"workload.command names {path}, which is untracked: no commit has it, so every trial would fail; {fix}.")
            continue
        if in_tree and repo.modified(path):
            out.append(f"workload.command names {path}, which has uncommitted edits: trials run each commit's own {path}, "
                       f"not your edit; {fix}.")
        missing = [f"{label} {c.short}" for label, c in endpoints if not repo.has_path(c.sha, path)]
        if missing:
            where = " and ".join(missing)
            out.append(f"workload.command names {path}, which is missing at the {where}: trials there would fail"
                       + ("" if in_tree else " (and it is not in your working tree either: check workload.command)")
                       + (f"; {fix}." if in_tree else "."))
        elif not in_tree and not tracked and not endpoints:
            out.append(f"workload.command names {path}, which is neither in your working tree nor at HEAD: check workload.command.")
    return out
