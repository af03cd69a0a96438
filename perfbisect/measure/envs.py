"""One Python environment per pin set, content-addressed and cached beside the build cache.

A commit's pinned compiled dependencies (``perfbisect.git.pins``) must be installed for its server to
start, but the user's interpreter must never change. So each pin set gets its own venv under
``<cache_dir>/envs/<key>``, made like this:

- ``python -m venv --without-pip`` with the target interpreter (``target.python``): the same Python
  version and standard library;
- a ``.pth`` file that adds the target interpreter's site directories *behind* the venv's own (their
  ``.pth`` files processed too, so editable installs and ``sitecustomize`` still work): torch,
  transformers and everything else the user installed is seen as it is, without a copy — this is
  ``--system-site-packages`` for whatever the target interpreter is (a venv, conda, the system);
- the pinned requirements installed into the venv alone, ``--no-deps`` (exactly the pinned wheels;
  a dependency a new pin needs is itself a package to pin), from ``[build] wheel_dir``
  (``--find-links``; with ``--no-index`` unless ``index_url`` is set) and/or ``[build] index_url``;
  with pip when the target interpreter has it (pip installs into the venv and leaves what lies
  outside it alone: "Not uninstalling ..., outside environment"), else uv (``$UV`` or on PATH),
  else a pip the venv gets from ``ensurepip``;
- the installed versions checked through the venv's interpreter — each pin, each companion at its
  package's version, and every exact (``==``) requirement the installed pinned packages declare in
  their own metadata (torch's CUDA packages): one the venv does not see is installed next (``--no-deps``,
  exactly that version) and checked again, and what is still wrong makes the pin set unbuildable (SGLang
  itself only refuses a kernel *older* than its minimum; a newer, wrong one would start) — then
  ``env.json`` written last: a directory without it is a half-built environment and is built again.

A pin set is completed before it is keyed (``EnvCache.complete``): with ``[build] wheel_dir``, the exact
requirements its wheels declare that the target interpreter does not already satisfy travel with it.

The key is the hash of the pins, the target interpreter (its real path, version, site directories),
where wheels come from, and the bytes of the wheels it would install from ``wheel_dir`` (their
sha256, each file read once while its size, mtime, ctime and inode stay the same): a
wheel rebuilt in place under the same version is a new environment, never the stale one. From an
index only the URL and the pinned versions are known, so a wheel re-uploaded under the same version
is not noticed there. The same key is the same environment, so a second run builds nothing.

This module keys, caches, holds and evicts the environments (``EnvCache``); ``env_install`` probes the
target interpreter and installs one environment (``EnvInstaller``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from packaging.markers import InvalidMarker, Marker, UndefinedEnvironmentName

from ..errors import ConfigError, EnvironmentBuildError
from ..model import content_hash
from .env_install import BaseInterpreter, EnvInstaller, probe_interpreter
from .usestamp import UseClock, last_use
from ..git.pins import PinSet, wheel_files, wheel_problem, wheel_requirements

_KEY_VERSION = "pinned-env-v2"  # bump when the recipe changes, so old environments stop matching
_MARKER = "env.json"
_KEY_NAME = re.compile(r"[0-9a-f]{16}")  # an environment's directory: its key (model.content_hash)
_DIGEST_FILE = ".wheel-digests.json"  # wheel path -> its stat stamp and sha256 (EnvCache._sha256)


@dataclass(frozen=True)
class PinnedEnv:
    """A built environment: where it is, what it pins, and whether this call built it."""

    key: str
    path: Path
    pins: PinSet
    cached: bool
    installer: str = ""
    seconds: float = 0.0
    versions: dict | None = None

    @property
    def python(self) -> str:
        return str(self.path / "bin" / "python")


class EnvCache:
    """Pinned environments by key under ``dir``; a failed build is remembered for this process."""

    def __init__(self, dir: Path | str, python: str, wheel_dir: Path | None = None, index_url: str | None = None,
                 log_dir: Path | str | None = None):
        self.dir = Path(dir).expanduser()
        self.python = python
        self.wheel_dir = Path(wheel_dir) if wheel_dir else None
        self.index_url = index_url or None
        self.log_dir = Path(log_dir) if log_dir else self.dir / "logs"
        self._base: BaseInterpreter | None = None
        self._failed: dict[str, str] = {}
        self._completed: dict[str, PinSet] = {}  # a declared pin set's key -> the set with its wheels' requirements
        # Environments this process uses, each held by a shared lock on ``.<key>.use`` until close():
        # eviction (any process's) takes that lock exclusively, so it never removes one in use.
        self._held: dict[str, object] = {}
        self._clock = UseClock()  # the last use stamp given out (see _mark_used)
        # Called with the key of a newly built environment: the build cache's bound ([build]
        # cache_max_gb) then evicts least recently used entries of both (Workspace wires it).
        self.on_grow: Callable[[str], object] | None = None

    @property
    def base(self) -> BaseInterpreter:
        if self._base is None:
            self._base = probe_interpreter(self.python)
        return self._base

    def complete(self, pin_set: PinSet) -> PinSet:
        """``pin_set`` with what must be installed beside it: the exact requirements its wheels in
        ``wheel_dir`` declare (``pins.wheel_requirements``) that the target interpreter does not already
        have at that version; one that no wheel in ``wheel_dir`` provides either is a problem of the set."""
        if not pin_set or self.wheel_dir is None:
            return pin_set
        cached = self._completed.get(pin_set.key)
        if cached is not None:
            return cached
        needed, problems = [], []
        for pin in wheel_requirements(pin_set, self.wheel_dir):
            if self.base.has(pin.name) == pin.exact_version:
                continue  # the target interpreter has it: seen through the venv's .pth
            if not self._applies(pin.marker):
                continue  # for another platform or Python
            if wheel_files(PinSet((pin,)), self.wheel_dir):
                needed.append(pin)
            else:
                have = self.base.has(pin.name)
                problems.append(f"{pin.companion_of} needs {pin.requirement} ({pin.source}); target.python has "
                                f"{have or 'none'} and [build] wheel_dir {self.wheel_dir} has no wheel of it")
        done = replace(pin_set.with_pins(needed), problems=pin_set.problems + tuple(problems))
        self._completed[pin_set.key] = done
        return done

    def _applies(self, marker: str) -> bool:
        """Whether a requirement's environment marker holds for the target interpreter (its Python version;
        the platform is this machine's)."""
        text = marker.lstrip(";").strip()
        if not text:
            return True
        try:
            version = self.base.version
            return Marker(text).evaluate({"python_version": ".".join(version.split(".")[:2]),
                                          "python_full_version": version, "extra": ""})
        except (InvalidMarker, UndefinedEnvironmentName):
            return True  # unreadable: keep it, the installer decides

    def key(self, pin_set: PinSet) -> str:
        pin_set = self.complete(pin_set)
        base = self.base
        return content_hash(_KEY_VERSION, pin_set.key, base.executable, base.version, list(base.site_dirs),
                            str(self.wheel_dir or ""), self.index_url or "", self.wheel_digests(pin_set))

    def wheel_digests(self, pin_set: PinSet) -> list[list[str]]:
        """[file name, sha256] of each ``wheel_dir`` file the installer could pick for ``pin_set``."""
        return [[f.name, self._sha256(f)] for f in wheel_files(pin_set, self.wheel_dir)]

    def _sha256(self, path: Path) -> str:
        """sha256 of a wheel's bytes, read once while its size, mtime, ctime and inode stay the same (a
        file replaced or rewritten in place changes its ctime, which no copy tool can set back): kept
        in this process and in ``<dir>/.wheel-digests.json``, so the next command (``plan``, a Slurm
        job) does not read a gigabyte of torch again."""
        st = path.stat()
        name, stamp = str(path.resolve()), f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}"
        if (name, stamp) in _DIGESTS:
            return _DIGESTS[name, stamp]
        store = self.dir / _DIGEST_FILE
        try:
            known = json.loads(store.read_text())
        except (OSError, ValueError):
            known = {}
        entry = known.get(name) if isinstance(known, dict) else None
        if isinstance(entry, dict) and entry.get("stamp") == stamp and isinstance(entry.get("sha256"), str):
            digest = entry["sha256"]
        else:
            digest = _hash_file(path)
            known = known if isinstance(known, dict) else {}
            known[name] = {"stamp": stamp, "sha256": digest}
            try:  # written whole and renamed into place: a reader never sees half a file
                self.dir.mkdir(parents=True, exist_ok=True)
                tmp = self.dir / f"{_DIGEST_FILE}.{os.getpid()}"
                tmp.write_text(json.dumps(known))
                os.replace(tmp, store)
            except OSError:
                pass  # a hint for the next command; this one has the digest
        _DIGESTS[name, stamp] = digest
        return digest

    def path(self, pin_set: PinSet) -> Path:
        return self.dir / self.key(pin_set)

    def lookup(self, pin_set: PinSet) -> PinnedEnv | None:
        """The built environment of ``pin_set``, or None."""
        key = self.key(pin_set)
        marker = self.dir / key / _MARKER
        try:
            data = json.loads(marker.read_text())
        except (OSError, ValueError):
            return None
        return PinnedEnv(key, self.dir / key, pin_set, True, data.get("installer", ""), 0.0, data.get("versions"))

    def problem(self, pin_set: PinSet) -> str | None:
        """Why ``pin_set`` cannot work as declared (a companion at another version, a wheel's exact
        requirement nowhere to be had), told before anything is installed; None when nothing is known."""
        problems = self.complete(pin_set).problems
        if not problems:
            return None
        return (f"the pin set {pin_set.describe()} cannot work: {'; '.join(problems)}. Its commits are skipped, never "
                f"blamed. Fix: pin them together (a patch in the stack), or put the missing wheels in [build] wheel_dir.")

    def failed(self, pin_set: PinSet) -> str | None:
        """Why building ``pin_set`` failed earlier in this process, or None."""
        return self._failed.get(self.key(pin_set))

    def ensure(self, pin_set: PinSet) -> PinnedEnv:
        """The environment of ``pin_set``, built unless cached; EnvironmentBuildError when it cannot be.

        The environment is held in use (never evicted) until ``close()``, and marked as just used."""
        key = self.key(pin_set)
        if key in self._failed:
            raise EnvironmentBuildError(self._failed[key])
        problem = self.problem(pin_set)
        if problem:
            self._failed[key] = problem
            raise EnvironmentBuildError(problem)
        pin_set = self.complete(pin_set)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._hold(key)
        found = self.lookup(pin_set)
        if found is None:
            # Cluster jobs may share the cache directory: one builds a set while the others wait for it.
            with open(self.dir / f".{key}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                found = self.lookup(pin_set)
                if found is None:
                    found = self._build_locked(pin_set, key)
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

    def _build_locked(self, pin_set: PinSet, key: str) -> PinnedEnv:
        start = time.perf_counter()
        path = self.dir / key
        log_path = self.log_dir / f"{key}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(path, ignore_errors=True)  # a half-built one (no env.json) is built again
        try:
            installer, versions = self._installer().build(pin_set, path, log_path)
        except EnvironmentBuildError as exc:
            shutil.rmtree(path, ignore_errors=True)
            self._failed[key] = str(exc)
            raise
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        seconds = time.perf_counter() - start
        (path / _MARKER).write_text(json.dumps({
            "bytes": _tree_bytes(path),
            "key": key, "pins": pin_set.as_dict(), "requirements": pin_set.requirements, "python": self.python,
            "base": self.base.executable, "installer": installer, "versions": versions, "seconds": seconds,
            "wheels": self.wheel_digests(pin_set),
            "built_at": time.time(),
        }, indent=1))
        return PinnedEnv(key, path, pin_set, False, installer, seconds, versions)

    def installer(self) -> str:
        """Which installer a new environment would use, in words (doctor)."""
        return self._installer().describe()

    def _installer(self) -> EnvInstaller:
        return EnvInstaller(self.base, self.wheel_dir, self.index_url, self.dir)

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


_DIGESTS: dict[tuple[str, str], str] = {}  # (path, "size:mtime:ctime:inode") -> sha256, for this process


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def pin_groups(commits, pins, envs: EnvCache, wheel_dir: Path | None, index_url: str | None) -> list:
    """The commits grouped by pin set, each with where its environment is kept, whether it is built,
    its kernel and companions, and why it cannot be built (a companion at another version, a wheel's
    requirement nowhere to be had, ``pins.wheel_problem``, or a target interpreter that cannot run)."""
    from ..git.pins import PinGroup, group_by_pins

    out = []
    for pin_set, members in group_by_pins(commits, pins):
        env, built, problem = None, False, None
        if pin_set:
            try:
                env = str(envs.path(pin_set))
                built = envs.lookup(pin_set) is not None
                pin_set = envs.complete(pin_set)
            except ConfigError as exc:
                problem = str(exc)
            if not built and problem is None:
                problem = envs.problem(pin_set) or envs.failed(pin_set) or wheel_problem(pin_set, wheel_dir, index_url)
        kernel = pin_set.kernel
        out.append(PinGroup(pin_set.key, pin_set.as_dict(), tuple(pin_set.requirements),
                            tuple(c.sha for c in members), env, built, problem,
                            kernel=kernel.requirement if kernel else None,
                            companions=tuple(p.requirement for p in pin_set.companions)))
    return out
