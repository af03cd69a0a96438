"""One complete Python environment per lock, content-addressed and cached beside the build cache.

A commit's environment is what its own requirements resolve to (``perfbisect.measure.resolver``): uv's
lock of every package, at one version each. Commits whose locks list the same packages share one
environment, kept under ``<cache_dir>/envs/<key>`` and made like this, by uv alone:

- ``uv venv --python <target.python>``: the same Python version and standard library as the target
  interpreter, nothing of its site-packages (a complete environment, never an overlay on the user's);
- ``uv pip sync`` of the lock into it, from the indexes and wheelhouses the lock names (uv links from
  its cache: a 10 GB CUDA environment takes seconds once its wheels were downloaded for another);
- verified: the installed versions (``uv pip freeze``) equal the lock, and ``uv pip check`` finds the
  environment consistent; a mismatch makes the lock's commits untestable with what differs;
- ``env.json`` written last: a directory without it is a half-built environment and is built again.

The key is the hash of the lock's pins and index lines (``Lock.key``) and the target interpreter (its real
path and version). ``sglang`` itself is not in it: each worktree is put on the server's PYTHONPATH.

Environments count toward ``[build] cache_max_gb`` with the build artefacts and are evicted least recently
used, never while a process holds one in use.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import EnvironmentBuildError, InfrastructureError
from ..model import content_hash
from .resolver import Lock, Resolver, run_uv, is_infrastructure, parse_lock, uv_error, uv_version
from .usestamp import UseClock, last_use

_KEY_VERSION = "uv-env-v1"  # bump when the recipe changes, so old environments stop matching
_MARKER = "env.json"
_KEY_NAME = re.compile(r"[0-9a-f]{16}")  # an environment's directory: its key (model.content_hash)


@dataclass(frozen=True)
class LockedEnv:
    """A built environment: where it is, which lock it holds, and whether this call built it."""

    key: str
    path: Path
    lock: Lock
    cached: bool
    seconds: float = 0.0
    uv: str = ""

    @property
    def python(self) -> str:
        return str(self.path / "bin" / "python")


class EnvCache:
    """Environments by key under ``dir``; a failed build is remembered for this process."""

    def __init__(self, dir: Path | str, resolver: Resolver, log_dir: Path | str | None = None):
        self.dir = Path(dir).expanduser()
        self.resolver = resolver
        self.log_dir = Path(log_dir) if log_dir else self.dir / "logs"
        self._failed: dict[str, str] = {}
        # Environments this process uses, each held by a shared lock on ``.<key>.use`` until close():
        # eviction (any process's) takes that lock exclusively, so it never removes one in use.
        self._held: dict[str, object] = {}
        self._clock = UseClock()  # the last use stamp given out (see _mark_used)
        # Called with the key of a newly built environment: the build cache's bound ([build]
        # cache_max_gb) then evicts least recently used entries of both (Workspace wires it).
        self.on_grow: Callable[[str], object] | None = None

    def key(self, lock: Lock) -> str:
        interp = self.resolver.interpreter
        return content_hash(_KEY_VERSION, lock.key, interp.executable, interp.version)

    def path(self, lock: Lock) -> Path:
        return self.dir / self.key(lock)

    def lookup(self, lock: Lock) -> LockedEnv | None:
        """The built environment of ``lock``, or None."""
        key = self.key(lock)
        try:
            data = json.loads((self.dir / key / _MARKER).read_text())
        except (OSError, ValueError):
            return None
        return LockedEnv(key, self.dir / key, lock, True, float(data.get("seconds", 0.0)), data.get("uv", ""))

    def failure(self, lock: Lock) -> str | None:
        """Why the last attempt (by any command) to install ``lock``'s environment from today's sources failed, for
        ``plan`` and ``doctor`` to show; None when none failed. A trial tries again (``ensure``)."""
        key = self.key(lock)
        if key in self._failed:
            return self._failed[key]
        try:
            data = json.loads((self.dir / f".{key}.failed").read_text())
        except (OSError, ValueError):
            return None
        if data.get("sources") != self._sources() or self.lookup(lock) is not None:
            return None
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(float(data.get("at", 0))))
        return f"{data.get('reason')} (tried {when} UTC; `plan --prepare` tries again)"

    def _sources(self) -> list:
        return [self.resolver.source_args(), self.resolver.wheelhouse_state()]

    def ensure(self, lock: Lock) -> LockedEnv:
        """The environment of ``lock``, built unless cached; EnvironmentBuildError when it cannot be.

        The environment is held in use (never evicted) until ``close()``, and marked as just used."""
        key = self.key(lock)
        if key in self._failed:
            raise EnvironmentBuildError(self._failed[key])
        self.dir.mkdir(parents=True, exist_ok=True)
        self._hold(key)
        found = self.lookup(lock)
        if found is None:
            # Cluster jobs may share the cache directory: one builds an environment while the others wait for it.
            with open(self.dir / f".{key}.lock", "w") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                found = self.lookup(lock)
                if found is None:
                    found = self._build_locked(lock, key)
        self._mark_used(found.path)
        if not found.cached and self.on_grow is not None:
            self.on_grow(key)
        return found

    def _hold(self, key: str) -> None:
        """Take the shared in-use lock of ``key`` (waits while an eviction removes it)."""
        if key not in self._held:
            handle = open(self.dir / f".{key}.use", "a")
            fcntl.flock(handle, fcntl.LOCK_SH)
            self._held[key] = handle

    def close(self) -> None:
        """Release the environments this process held in use: eviction may remove them now."""
        for handle in self._held.values():
            handle.close()  # type: ignore[attr-defined]
        self._held.clear()

    def _mark_used(self, path: Path) -> None:
        """Stamp a use of the environment at ``path`` for LRU eviction: nanoseconds since the epoch in
        its ``used`` file, always larger than the last stamp this cache gave (as the build cache does)."""
        try:
            self._clock.mark(path)
        except OSError:
            pass  # a stamp is a hint for eviction, never a reason to fail a trial

    def lru_entries(self) -> list[tuple[int, int, Path]]:
        """(last use stamp, bytes, path) of every environment directory, built or half-built."""
        if not self.dir.is_dir():
            return []
        out = []
        for path in self.dir.iterdir():
            if not _KEY_NAME.fullmatch(path.name) or not path.is_dir():
                continue  # not an environment (the default log directory, lock files)
            try:
                size = int(json.loads((path / _MARKER).read_text())["bytes"])
            except (OSError, ValueError, KeyError, TypeError):
                size = _tree_bytes(path)  # half-built, or built by an older perfbisect
            try:
                used = last_use(path)
            except (OSError, ValueError):
                try:
                    used = path.stat().st_mtime_ns
                except OSError:
                    continue
            out.append((used, size, path))
        return sorted(out)

    def remove(self, path: Path) -> bool:
        """Remove the environment at ``path`` unless a process holds it in use; True when removed."""
        path = Path(path)
        with open(self.dir / f".{path.name}.use", "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # a trial's server or build runs with it right now
            (path / _MARKER).unlink(missing_ok=True)  # first: a partly removed one reads as half-built
            shutil.rmtree(path, ignore_errors=True)
            (self.dir / f".{path.name}.lock").unlink(missing_ok=True)
        return True

    def _build_locked(self, lock: Lock, key: str) -> LockedEnv:
        start = time.perf_counter()
        path = self.dir / key
        log_path = self.log_dir / f"{key}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(path, ignore_errors=True)  # a half-built one (no env.json) is built again
        (self.dir / f".{key}.failed").unlink(missing_ok=True)
        uv = self.resolver.uv
        try:
            with open(log_path, "w") as log:
                self._step(log, [uv, "venv", "--no-config", "--quiet", "--python", self.resolver.python, str(path)], lock)
                lock_file = path / "perfbisect-lock.txt"
                lock_file.write_text(lock.text)
                python = str(path / "bin" / "python")
                self._step(log, [uv, "pip", "sync", "--no-config", "--python", python, str(lock_file),
                                 *self.resolver.source_args()], lock)
                installed = parse_lock(self._step(log, [uv, "pip", "freeze", "--no-config", "--python", python], lock))
                self._verify(lock, installed)
                self._step(log, [uv, "pip", "check", "--no-config", "--python", python], lock, what="is not consistent")
        except EnvironmentBuildError as exc:
            shutil.rmtree(path, ignore_errors=True)
            self._failed[key] = str(exc)
            try:  # for the next plan and doctor: the lock's failure (never the machine's: that is not an EnvironmentBuildError)
                (self.dir / f".{key}.failed").write_text(json.dumps({"reason": str(exc), "sources": self._sources(),
                                                                     "at": time.time()}))
            except OSError:
                pass
            raise
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        seconds = time.perf_counter() - start
        version = uv_version(uv)
        (path / _MARKER).write_text(json.dumps({
            "bytes": _tree_bytes(path), "key": key, "lock_key": lock.key, "packages": lock.packages,
            "resolved_as_of": lock.resolved_as_of, "python": self.resolver.python,
            "interpreter": self.resolver.interpreter.executable, "uv": version, "seconds": seconds,
            "built_at": time.time(),
        }, indent=1))
        return LockedEnv(key, path, lock, False, seconds, version)

    def _step(self, log, argv: list[str], lock: Lock, what: str = "cannot be installed") -> str:
        """Run one uv command into the build log; its stdout. A failure of the lock's: EnvironmentBuildError;
        of the machine's: InfrastructureError (never a property of the commits)."""
        log.write("$ " + " ".join(argv) + "\n")
        log.flush()
        proc = run_uv(argv, cwd=self.dir)
        log.write(proc.stdout + proc.stderr)
        log.flush()
        if proc.returncode == 0:
            return proc.stdout
        reason = uv_error(proc.stderr or proc.stdout)
        if is_infrastructure(proc.stderr + proc.stdout, self.resolver.config.offline):
            raise InfrastructureError(
                f"uv could not make an environment because of this machine, not the commit: {reason}. Fix that (the "
                f"network or an index it cannot reach, disk space; a wheel stub such as cuda-tile's downloads the real "
                f"wheel from its vendor's index at install time) and run again, or give the packages in a wheelhouse "
                f"(environment.find_links); nothing was recorded against any commit. Log: {log.name}"
            )
        raise EnvironmentBuildError(
            f"the environment of its lock ({len(lock.packages)} packages{', resolved as of ' + lock.resolved_as_of if lock.resolved_as_of else ''}) "
            f"{what}: {reason} (log: {log.name})"
        )

    @staticmethod
    def _verify(lock: Lock, installed: dict[str, str]) -> None:
        """The environment holds exactly the lock's versions."""
        wrong = [f"{name} {installed.get(name, 'missing')} (lock: {version})" for name, version in lock.packages.items()
                 if not version.startswith("@") and installed.get(name) != version]
        extra = sorted(set(installed) - set(lock.packages))
        if wrong or extra:
            said = "; ".join(wrong[:5] + [f"{n} {installed[n]} not in the lock" for n in extra[:5]])
            raise EnvironmentBuildError(f"the installed environment differs from its lock: {said}")

    def entries(self) -> list[Path]:
        """Built environments (directories with their marker)."""
        if not self.dir.is_dir():
            return []
        return sorted(p for p in self.dir.iterdir() if (p / _MARKER).is_file())

    def total_bytes(self) -> int:
        """Bytes of the environments held (as counted toward ``[build] cache_max_gb``)."""
        return sum(size for _, size, _ in self.lru_entries())

    def clear(self) -> list[Path]:
        """Remove every environment no process holds in use (``perfbisect gc --build-cache``), and
        the build logs; the ones in use are returned, left in place."""
        kept = [path for _, _, path in self.lru_entries() if not self.remove(path)]
        for failed in self.dir.glob(".*.failed") if self.dir.is_dir() else ():
            failed.unlink(missing_ok=True)
        shutil.rmtree(self.log_dir, ignore_errors=True)
        return kept


def _tree_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (symlinks not followed: a venv's ``bin/python`` is one)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if not stat.S_ISLNK(st.st_mode):
                total += st.st_size
    return total
