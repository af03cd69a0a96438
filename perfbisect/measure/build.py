"""Build steps with a content-addressed, size-bounded cache.

A step's cache key is the hash of the *patched* content of the paths it depends on (read from the
worktree's index through :mod:`perfbisect.git.gitrepo`), the applied patch-stack hash, its command and
interpreter. A step whose key is cached is not run: its artefacts are copied back into the
worktree. So a Python-only commit never pays the 20–30 minute sgl-kernel rebuild again.

Only steps that declare ``artifacts`` are stored: a step without them leaves nothing in the
worktree we could restore (``pip install -e`` writes into the target's environment), so it runs
every time; such steps are the cheap Python-only ones.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from ..runtime.children import run_bounded
from ..placeholders import expand
from ..settings import BuildStep
from ..errors import BuildError, InfrastructureError
from ..git.gitrepo import worktree_tree_hash
from ..runtime.logtail import log_tail
from ..model import Commit, content_hash
from .usestamp import UseClock, last_use

LOG_TAIL_LINES = 30
_KEY_VERSION = "build-step-v1"  # bump when the key recipe changes, so old entries stop matching
# The build hash of a target with no build steps: every commit gets it, so "one build reused" is not what happened.
NO_BUILD_STEPS_HASH = content_hash(_KEY_VERSION, [])


@dataclass(frozen=True)
class StepResult:
    """What happened to one build step at one commit."""

    name: str
    key: str
    cached: bool  # restored from the cache instead of run
    python_only: bool
    seconds: float
    log_path: str
    stored: bool = False  # its artefacts were added to the cache
    source: str | None = None  # the directory of its [build.steps] sources it built at this commit
    absent: bool = False  # none of its sources exists at this commit: nothing to build, not run


@dataclass(frozen=True)
class BuildResult:
    """A commit's build: its identity (hash of the step keys) and each step's outcome."""

    hash: str
    steps: tuple[StepResult, ...]

    @property
    def cached(self) -> bool:
        """True when no step had to run (every step with artefacts came from the cache)."""
        return all(s.cached or s.python_only or s.absent for s in self.steps)

    @property
    def log_path(self) -> str | None:
        """The last step's log (the one to read first when something looks wrong)."""
        return self.steps[-1].log_path if self.steps else None

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.steps)


@dataclass(frozen=True)
class CacheEntry:
    key: str
    path: Path
    bytes: int
    files: tuple[str, ...]

    @property
    def files_dir(self) -> Path:
        return self.path / "files"


class BuildCache:
    """Artefacts of built steps by key, under ``dir``; least-recently-used entries evicted past ``max_bytes``."""

    def __init__(self, dir: Path | str, max_bytes: int):
        self.dir = Path(dir).expanduser()
        self.max_bytes = int(max_bytes)
        self.entries_dir = self.dir / "entries"
        self.tmp_dir = self.dir / "tmp"
        self.entries_dir.mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        # Half-written entries of a killed run are never visible (renamed into place), only left here.
        for leftover in self.tmp_dir.iterdir():
            shutil.rmtree(leftover, ignore_errors=True)
        # The last use stamp given out: the next one is larger, also when the clock has not moved.
        self._clock = UseClock(max((used for used, _, _ in self._entries()), default=0))
        self._tenants: list = []  # other caches under the same bound (the environments)

    def share(self, tenant) -> None:
        """Count ``tenant`` (``perfbisect.measure.envs.EnvCache``) toward ``max_bytes`` and evict its
        entries with these, least recently used first: it lists ``lru_entries()`` ((stamp, bytes,
        path)), removes one with ``remove(path)`` (False: in use, kept), and calls back after it grows."""
        self._tenants.append(tenant)
        tenant.on_grow = lambda key: self.evict(keep=tenant.dir / key)

    def get(self, key: str) -> CacheEntry | None:
        """The entry for ``key`` (marked as just used), or None."""
        path = self.entries_dir / key
        meta = path / "meta.json"
        if not meta.is_file():
            return None
        try:
            data = json.loads(meta.read_text())
        except (OSError, ValueError):
            shutil.rmtree(path, ignore_errors=True)  # a damaged entry is a miss, not a crash
            return None
        self._mark_used(path)
        return CacheEntry(key, path, int(data.get("bytes", 0)), tuple(data.get("files", ())))

    def put(self, key: str, worktree: Path, artifacts: Sequence[str], log_path: Path | None, info: dict) -> CacheEntry:
        """Copy a step's artefacts out of the worktree into the cache; evict to stay within bounds."""
        files = _expand_artifacts(worktree, artifacts)
        staging = self.tmp_dir / f"{key}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        (staging / "files").mkdir(parents=True)
        total = 0
        for rel in files:
            src, dst = worktree / rel, staging / "files" / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_symlink():
                os.symlink(os.readlink(src), dst)
            else:
                shutil.copy2(src, dst)
                total += dst.stat().st_size
        if log_path is not None and log_path.exists():
            shutil.copy2(log_path, staging / "build.log")
        (staging / "meta.json").write_text(json.dumps({**info, "key": key, "bytes": total, "files": files, "stored_at": time.time()}))
        self._mark_used(staging)
        final = self.entries_dir / key
        shutil.rmtree(final, ignore_errors=True)
        os.rename(staging, final)
        self.evict(keep=key)
        return CacheEntry(key, final, total, tuple(files))

    def restore(self, entry: CacheEntry, worktree: Path) -> list[str]:
        """Copy an entry's artefacts back into the worktree at their original paths.

        UnsafeRestore (nothing written) when a path would leave the worktree: a ``..``, or a
        directory on the way that is a symlink, which the checked-out commit may itself carry.
        """
        destinations = [_inside(Path(worktree), rel) for rel in entry.files]
        for rel, dst in zip(entry.files, destinations):
            src = entry.files_dir / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            if dst.is_dir() and not dst.is_symlink():
                shutil.rmtree(dst)
            elif dst.exists() or dst.is_symlink():
                dst.unlink()
            if src.is_symlink():
                os.symlink(os.readlink(src), dst)
            else:
                shutil.copy2(src, dst)
        return list(entry.files)

    def _mark_used(self, path: Path) -> None:
        """Record a use of the entry at ``path``, for LRU eviction (``usestamp``: ordered within one clock tick,
        and after every stamp found on disk when the cache opened)."""
        self._clock.mark(path)

    def _entries(self) -> list[tuple[int, int, Path]]:
        """(last use stamp, bytes, path) of every entry, least recently used first."""
        out = []
        for path in self.entries_dir.iterdir():
            try:
                size = int(json.loads((path / "meta.json").read_text()).get("bytes", 0))
                used = last_use(path)
            except (OSError, ValueError):
                size, used = 0, 0
            out.append((used, size, path))
        return sorted(out)

    def total_bytes(self) -> int:
        """Bytes of artefacts held (the shared environments not counted: see ``evict``)."""
        return sum(size for _, size, _ in self._entries())

    def evict(self, keep: str | Path | None = None) -> list[str]:
        """Drop least-recently-used entries until the cache and the caches it shares its bound with
        (``share``) fit ``max_bytes`` together; an environment in use is never dropped, nor ``keep``
        (a key of this cache or an entry's path). Return the dropped entries' names."""
        if isinstance(keep, str):
            keep = self.entries_dir / keep
        entries = [(used, size, path, _remove_tree) for used, size, path in self._entries()]
        for tenant in self._tenants:
            entries += [(used, size, path, tenant.remove) for used, size, path in tenant.lru_entries()]
        entries.sort(key=lambda e: (e[0], str(e[2])))
        total = sum(size for _, size, _, _ in entries)
        dropped = []
        for _, size, path, remove in entries:
            if total <= self.max_bytes:
                break
            if keep is not None and path == keep:
                continue
            if remove(path):
                total -= size
                dropped.append(path.name)
        return dropped

    def clear(self) -> None:
        """Remove every entry (``perfbisect gc --build-cache``)."""
        shutil.rmtree(self.entries_dir, ignore_errors=True)
        self.entries_dir.mkdir(parents=True, exist_ok=True)


def _remove_tree(path: Path) -> bool:
    shutil.rmtree(path, ignore_errors=True)  # artefacts are copied into a worktree, never used in place
    return True


class UnsafeRestore(Exception):
    """A cached artefact's path would be written outside the worktree (through a symlink, or ``..``)."""


def _inside(worktree: Path, rel: str) -> Path:
    """``worktree / rel``, refusing any path whose directories leave the worktree."""
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or ".." in parts:
        raise UnsafeRestore(f"artefact path {rel!r} is not inside the worktree")
    current = worktree
    for part in parts[:-1]:
        current = current / part
        if current.is_symlink():
            raise UnsafeRestore(
                f"{current.relative_to(worktree)} is a symlink (to {os.readlink(current)!r}) in the checked-out "
                f"commit; restoring {rel} through it would write outside the worktree"
            )
    return worktree / rel


def _expand_artifacts(worktree: Path, artifacts: Sequence[str]) -> list[str]:
    """Artefact globs → the files they name, relative to the worktree (directories walked)."""
    files: list[str] = []
    for pattern in artifacts:
        matches = sorted(worktree.glob(pattern)) if any(c in pattern for c in "*?[") else [worktree / pattern]
        matches = [m for m in matches if m.exists() or m.is_symlink()]
        if not matches:
            raise FileNotFoundError(pattern)
        for m in matches:
            if m.is_dir() and not m.is_symlink():
                files.extend(str(p.relative_to(worktree)) for p in sorted(m.rglob("*")) if p.is_file() or p.is_symlink())
            else:
                files.append(str(m.relative_to(worktree)))
    return list(dict.fromkeys(files))


def step_source(step: BuildStep, worktree: Path) -> str | None:
    """The first of ``step.sources`` that is a directory of the (patched) worktree, or None."""
    return step.source_at(lambda rel: (Path(worktree) / rel).is_dir())


def step_key(step: BuildStep, worktree: Path, applied_stack_hash: str, python: str, source: str | None = None) -> str:
    """Cache key of a step: patched content of its paths (under the commit's source directory, for a
    step with ``sources``) + applied stack + command + interpreter."""
    tree = worktree_tree_hash(worktree, step.key_paths(source))
    extra = [source] if source is not None else []  # none without sources: their cached artefacts keep their key
    return content_hash(_KEY_VERSION, tree, applied_stack_hash or "", list(step.command), python, list(step.artifacts),
                        *extra)


# The key of a step none of whose sources exists at a commit: it does not run there.
ABSENT_KEY = "absent"


def cache_key(key: str, step: BuildStep, worktree: Path) -> str:
    """The key a step's artefacts are stored and found under in the build cache.

    A commit is checked out into worktree slots whose paths differ (perfbisect/layout.py), and the
    cache restores artefacts by their path relative to the worktree, so most artefacts move between
    slots intact. A step whose command names ``{worktree}`` is told the absolute path, and what it
    builds may embed it (a CMake cache, an RPATH, a generated config): its artefacts are kept per
    worktree path, so one is only restored where it was built. The build's identity (``step_key``,
    ``BuildResult.hash``) stays the same in every slot: trials of one build pool as one build.
    A step that embeds the path without naming it should name it (``-DSRC={worktree}``) or set
    ``cache = false``.
    """
    if any("{worktree}" in arg for arg in step.command):
        return content_hash(key, str(Path(worktree).resolve()))
    return key


def _log_name(commit: Commit | str, index: int, step: BuildStep) -> str:
    sha = commit.sha if isinstance(commit, Commit) else str(commit)
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", step.name).strip("-") or "step"
    return f"{sha[:12]}/{index:02d}-{safe}.log"


def run_build(
    steps: Sequence[BuildStep],
    worktree: Path | str,
    commit: Commit | str,
    applied_stack_hash: str,
    cache: BuildCache | None,
    python: str,
    log_dir: Path | str,
) -> BuildResult:
    """Run (or restore from cache) each build step in a patched worktree; BuildError on failure.

    Keys are computed before any step runs, so a step that edits tracked files cannot change the
    keys of the steps after it.
    """
    worktree = Path(worktree)
    log_dir = Path(log_dir)
    sources = [step_source(step, worktree) if step.sources else None for step in steps]
    keys = [ABSENT_KEY if step.sources and source is None else step_key(step, worktree, applied_stack_hash, python, source)
            for step, source in zip(steps, sources)]
    results = []
    for index, (step, key, source) in enumerate(zip(steps, keys, sources), 1):
        log_path = log_dir / _log_name(commit, index, step)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        if key == ABSENT_KEY:
            log_path.write_text(f"step {step.name!r} not run: none of its sources ({', '.join(step.sources)}) exists "
                                f"at this commit, so it has nothing to build\n")
            results.append(StepResult(step.name, key, False, step.python_only, 0.0, str(log_path), absent=True))
            continue
        if source is not None:
            step = replace(step, command=tuple(expand(step.command, source=source)),
                           artifacts=tuple(expand(step.artifacts, source=source)))
        cacheable = cache is not None and step.cache and bool(step.artifacts)
        stored_as = cache_key(key, step, worktree)
        entry = cache.get(stored_as) if cacheable else None
        refused = ""
        if entry is not None:
            try:
                cache.restore(entry, worktree)
            except UnsafeRestore as exc:  # never write outside the worktree: build it for real instead
                entry, refused = None, f"# perfbisect: build cache not used: {exc}\n"
        if entry is not None:
            log_path.write_text(
                f"cache hit: step {step.name!r} key {stored_as}\nrestored {len(entry.files)} artefact file(s) from "
                f"{entry.path}\noriginal build log: {entry.path / 'build.log'}\n"
            )
            results.append(StepResult(step.name, key, True, step.python_only, time.perf_counter() - start, str(log_path),
                                      source=source))
            continue
        _run_step(step, worktree, python, log_path, commit, note=refused)
        stored = False
        if cacheable:
            try:
                cache.put(stored_as, worktree, step.artifacts, log_path, {"step": step.name, "commit": str(getattr(commit, "sha", commit))})
                stored = True
            except FileNotFoundError as exc:
                raise BuildError(
                    f"Build step '{step.name}' succeeded but did not produce the artefact '{exc.args[0]}' "
                    f"it declares (in {worktree}). Fix build.steps[].artifacts (paths relative to the "
                    f"worktree) or the build command. Log: {log_path}",
                    log_path=str(log_path),
                    log_tail=log_tail(log_path, LOG_TAIL_LINES),
                ) from None
        results.append(StepResult(step.name, key, False, step.python_only, time.perf_counter() - start, str(log_path), stored,
                                  source=source))
    return BuildResult(content_hash(_KEY_VERSION, [[r.name, r.key] for r in results]), tuple(results))


def _run_step(step: BuildStep, worktree: Path, python: str, log_path: Path, commit: Commit | str, note: str = "") -> None:
    argv = expand(step.command, python=python, worktree=str(worktree))
    short = (commit.short if isinstance(commit, Commit) else str(commit)[:10])
    log_path.write_text(f"{note}$ {argv!r}\n# cwd {worktree}\n", encoding="utf-8")
    try:
        # Its own session, so a timeout stops the compiler processes the step spawned too; it dies
        # with perfbisect, so a killed bisection leaves no compiler running. Its output goes to the
        # log through a pipe, capped (a step printing gigabytes keeps the head and the tail).
        run = run_bounded(argv, cwd=worktree, env=None, timeout_s=step.timeout_s, log_path=log_path, merge_stderr=True,
                          footer=False)
    except FileNotFoundError:
        raise BuildError(
            f"Build step '{step.name}' at {short}: command not found: '{argv[0]}'. Fix: install it, or "
            f"give its full path (or {{python}}) in build.steps[].command.",
            log_path=str(log_path),
        ) from None
    except PermissionError:
        raise BuildError(
            f"Build step '{step.name}' at {short}: '{argv[0]}' is not executable. Fix its permissions "
            f"or the command in build.steps[].command.",
            log_path=str(log_path),
        ) from None
    except OSError as exc:
        raise BuildError(
            f"Build step '{step.name}' at {short}: cannot start '{argv[0]}': {exc.strerror}. Fix build.steps[].command.",
            log_path=str(log_path),
        ) from None
    if run.timed_out:
        raise BuildError(
            f"Build step '{step.name}' at {short} ran past its timeout of {step.timeout_s:g} s and was "
            f"stopped; the commit is skipped. Fix: raise build.steps[].timeout_s. Log: {log_path}\n"
            f"{log_tail(log_path, LOG_TAIL_LINES)}",
            log_path=str(log_path),
            log_tail=log_tail(log_path, LOG_TAIL_LINES),
        )
    status = run.returncode
    if status != 0:
        tail = log_tail(log_path, LOG_TAIL_LINES)
        _refuse_machine_fault(step, short, worktree, log_path, tail)
        raise BuildError(
            f"Build step '{step.name}' failed at {short} (exit status {status}); the commit is skipped, "
            f"never blamed. Fix: read the log {log_path} and fix the step's command (build.steps[]) "
            f"if it fails at every commit. Last {LOG_TAIL_LINES} lines:\n{tail}",
            log_path=str(log_path),
            log_tail=tail,
        )


# What a build prints when the machine, not the commit, failed it.
_MACHINE_FAULTS = ("No space left on device", "Disk quota exceeded", "Read-only file system")
_FULL_DISK_BYTES = 64 * 1024 * 1024


def _refuse_machine_fault(step: BuildStep, short: str, worktree: Path, log_path: Path, tail: str) -> None:
    """A step that failed because the disk is full (or read-only) says nothing about the commit:
    raise InfrastructureError (the run stops, exit 4) instead of a BuildError that skips it."""
    try:
        free = shutil.disk_usage(worktree).free
    except OSError:
        free = None
    fault = next((f for f in _MACHINE_FAULTS if f in tail), None)
    if fault is None and (free is None or free >= _FULL_DISK_BYTES):
        return
    what = fault or f"only {free / 1e6:.0f} MB free"
    raise InfrastructureError(
        f"Build step '{step.name}' at {short} failed because of the machine, not the commit ({what} on the "
        f"disk of {worktree}). Free space (`perfbisect gc --build-cache` drops perfbisect's build cache) and "
        f"run again: `perfbisect resume` continues a bisection. Log: {log_path}"
    )


