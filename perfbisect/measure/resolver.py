"""A commit's requirements resolved by uv into a lock; the lock's hash is its environment's key.

``Resolver.resolve`` runs ``uv pip compile`` on a commit's requirement file (``perfbisect.git.requirements``)
for the target interpreter (``--python``; ``[environment] python_platform`` may name another platform),
with unpinned requirements resolved as of one date (``--exclude-newer``, see ``resolution_date``) and the
indexes, wheelhouses and overrides of ``[environment]``. The lock keeps every resolved package at one
version; two commits whose locks list the same packages share one environment (``Lock.key``), however
their files differ.

Results are kept under ``<cache_dir>/locks``: a lock by the hash of what resolution read (the
requirement input, the date, the interpreter, the settings, the files of a local wheelhouse), so ``plan``
resolves each requirement set once and ``run`` reads the same locks. A failure that is the commit's
(no solution, a ``requires-python`` that excludes the interpreter) is kept too and makes its commits
untestable with that reason; one that is the machine's (no network, a full disk) is raised as
``InfrastructureError`` and never kept: it is not a property of any commit.

uv is the resolver and the installer; nothing here reads a wheel or decides a version.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from ..errors import ConfigError, EnvironmentBuildError, InfrastructureError
from ..git.requirements import RequirementSet
from ..model import content_hash
from ..settings import EnvironmentConfig

_LOCK_VERSION = "uv-lock-v1"  # bump when the recipe changes, so old locks stop matching
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*(?:==\s*([^\s;]+)|@\s*(\S+))")

# Words for a failure of the machine rather than of the requirements (uv's own, and those of a build backend it ran:
# a wheel stub that downloads the real wheel at build time fails with Python's): never kept, never blamed.
_INFRA_MARKERS = (
    "error sending request", "dns error", "failed to lookup address", "tcp connect error", "connection refused",
    "connection reset", "operation timed out", "timed out", "network is unreachable", "no space left on device",
    "disk quota exceeded", "read-only file system", "name or service not known", "temporary failure in name resolution",
    "urlopen error", "gaierror", "failed to fetch", "could not connect", "network connectivity is disabled",
)
# uv's progress lines: what it did, not what went wrong.
_PROGRESS = ("Resolved", "Using", "warning:", "hint:", "Downloading", "Downloaded", "Building", "Built", "Prepared",
             "Installed", "Uninstalled", "Audited", "Checked", "Creating", "Activate")


def normalize(name: str) -> str:
    """A package name as PEP 503 compares them: ``Flashinfer_Python`` → ``flashinfer-python``."""
    return re.sub(r"[-_.]+", "-", name).lower()


_FOUND_UV: list[str] = []  # the one installed with perfbisect, found once (sysconfig is not thread-safe on first use)
_FIND_LOCK = threading.Lock()


def uv_executable(configured: str = "") -> str:
    """The uv to run: ``[environment] uv``, else the one installed with perfbisect, else PATH's."""
    if configured:
        return configured
    with _FIND_LOCK:
        if not _FOUND_UV:
            _FOUND_UV.append(_find_uv())
        return _FOUND_UV[0]


def _find_uv() -> str:
    try:
        from uv import find_uv_bin  # the `uv` package: perfbisect's dependency, its binary inside

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found:
            return found
    raise ConfigError(
        "uv is not installed, and perfbisect resolves and installs every commit's environment with it. Install "
        "perfbisect with its dependencies (pip install perfbisect, or uv tool install), or set environment.uv to "
        "the path of a uv executable."
    )


@dataclass(frozen=True)
class Lock:
    """One resolution: every package at one version. ``key`` is the environment's identity."""

    text: str  # the lock file uv wrote (index lines and pins; no header, no annotations)
    packages: dict[str, str]  # normalized name -> version (or "@ URL" for a direct reference)
    resolved_as_of: str  # the --exclude-newer cut-off ("" for none)
    seconds: float = 0.0  # how long uv took (0.0 when read from the cache)
    cached: bool = False

    @property
    def key(self) -> str:
        return content_hash(_LOCK_VERSION, sorted(self.packages.items()), _index_lines(self.text))

    def requirement(self, name: str) -> str:
        version = self.packages[name]
        return f"{name} {version}" if version.startswith("@") else f"{name}=={version}"


def _index_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("--")]


def parse_lock(text: str) -> dict[str, str]:
    """The pins of a lock file: normalized name -> version ("@ URL" for a direct reference)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        m = _PIN.match(line)
        if m:
            out[normalize(m.group(1))] = m.group(2) if m.group(2) else f"@ {m.group(3)}"
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class Interpreter:
    """The target interpreter as uv will see it."""

    executable: str  # real path
    version: str  # "3.12.3"
    platform: str  # sys.platform

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])


def probe(python: str) -> Interpreter:
    """Ask ``python`` what it is (the target's interpreter, not perfbisect's)."""
    code = "import json, os, platform, sys; print(json.dumps([os.path.realpath(sys.executable), platform.python_version(), sys.platform]))"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, check=True)
        exe, version, plat = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        raise ConfigError(
            f"target.python {python} cannot be run ({exc}). Each commit's environment is made from that interpreter: "
            f"set target.python to a working Python (the version SGLang's commits require, 3.10-3.12 for 2026's)."
        ) from None
    return Interpreter(exe, version, plat)


def resolution_date(policy: str, *, commit_date: str, bad_date: str | None) -> str:
    """The ``--exclude-newer`` cut-off of ``[environment] resolve_date`` for one commit: "bad" the bad
    endpoint's date (``commit_date`` when no range is known), "commit" its own, "now" none, else the date
    given. Returned as UTC ISO 8601 ("" for none)."""
    if policy == "now":
        return ""
    if policy == "commit":
        chosen = commit_date
    elif policy == "bad":
        chosen = bad_date or commit_date
    else:
        chosen = policy
    when = datetime.fromisoformat(chosen.replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Resolver:
    """``uv pip compile`` of a commit's requirements, kept by what it read (``<dir>/<key>.txt``)."""

    config: EnvironmentConfig
    python: str  # target.python
    dir: Path  # <cache_dir>/locks
    _interp: Interpreter | None = field(default=None, repr=False)
    _memo: dict[str, Lock | str] = field(default_factory=dict, repr=False)
    _wheelhouse: list | None = field(default=None, repr=False)  # read once per command (a range asks 7,000 times)
    _keys: dict[tuple[str, str], str] = field(default_factory=dict, repr=False)

    @property
    def interpreter(self) -> Interpreter:
        if self._interp is None:
            self._interp = probe(self.python)
        return self._interp

    @property
    def uv(self) -> str:
        return uv_executable(self.config.uv)

    def source_args(self) -> list[str]:
        """Where packages come from: the same for resolving and installing."""
        cfg = self.config
        args: list[str] = []
        if cfg.index_url:
            args += ["--index-url", cfg.index_url]
        for url in cfg.extra_index_urls:
            args += ["--extra-index-url", url]
        for link in cfg.find_links:
            args += ["--find-links", link]
        if cfg.no_index:
            args.append("--no-index")
        if cfg.offline:
            args.append("--offline")
        return args

    def resolve_args(self) -> list[str]:
        """What only resolution takes (uv pip sync installs a lock, it reads no sources)."""
        return ["--no-sources"] if self.config.no_sources else []

    def wheelhouse_state(self) -> list:
        """What local find_links directories hold (names and sizes): a wheel added there may change a lock."""
        if self._wheelhouse is not None:
            return self._wheelhouse
        out = []
        for link in self.config.find_links:
            path = Path(link)
            if "://" not in link and path.is_dir():
                out.append([link, sorted([p.name, p.stat().st_size] for p in path.iterdir() if p.is_file())])
            else:
                out.append([link])
        self._wheelhouse = out
        return out

    def key(self, reqs: RequirementSet, date: str) -> str:
        memo = (reqs.key, date)
        if memo not in self._keys:
            self._keys[memo] = self._key(reqs, date)
        return self._keys[memo]

    def _key(self, reqs: RequirementSet, date: str) -> str:
        cfg = self.config
        interp = self.interpreter
        return content_hash(_LOCK_VERSION, reqs.key, date, interp.executable, interp.version, cfg.python_platform,
                            self.source_args(), self.resolve_args(), list(cfg.overrides), self.wheelhouse_state())

    def cached(self, reqs: RequirementSet, date: str) -> Lock | str | None:
        """The lock (or the reason none exists) kept for ``reqs`` as of ``date``; None when not resolved yet."""
        key = self.key(reqs, date)
        if key in self._memo:
            return self._memo[key]
        try:
            meta = json.loads((self.dir / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None
        if meta.get("problem"):
            found: Lock | str = str(meta["problem"])
        else:
            try:
                text = (self.dir / f"{key}.txt").read_text()
            except OSError:
                return None
            found = Lock(text, parse_lock(text), date, float(meta.get("seconds", 0.0)), cached=True)
        self._memo[key] = found
        return found

    def resolve(self, reqs: RequirementSet, date: str) -> Lock:
        """The lock of ``reqs`` as of ``date``, resolved unless kept; EnvironmentBuildError when the commit's
        requirements cannot be resolved (kept: its commits are untestable), InfrastructureError when the
        machine failed (not kept)."""
        found = self.cached(reqs, date)
        if isinstance(found, Lock):
            return found
        if isinstance(found, str):
            raise EnvironmentBuildError(found)
        key = self.key(reqs, date)
        problem = self._static_problem(reqs)
        if problem:
            self._keep(key, problem=problem)
            raise EnvironmentBuildError(problem)
        start = time.perf_counter()
        self.dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="perfbisect-resolve-") as tmp:
            name = PurePosixPath(reqs.file).name
            src = Path(tmp) / name
            src.write_text(reqs.text or "")
            out = Path(tmp) / "lock.txt"
            argv = [self.uv, "pip", "compile", str(src), "-o", str(out), "--no-header", "--no-annotate",
                    "--emit-index-url", "--emit-find-links", "--python", self.python, "--no-config", "--quiet"]
            for extra in reqs.extras:
                argv += ["--extra", extra]
            if self.config.python_platform:
                argv += ["--python-platform", self.config.python_platform]
            if date:
                argv += ["--exclude-newer", date]
            if self.config.overrides:
                overrides = Path(tmp) / "overrides.txt"
                overrides.write_text("\n".join(self.config.overrides) + "\n")
                argv += ["--override", str(overrides)]
            argv += self.source_args() + self.resolve_args()
            proc = run_uv(argv, cwd=tmp)
            seconds = time.perf_counter() - start
            if proc.returncode != 0:
                reason = uv_error(proc.stderr)
                if is_infrastructure(proc.stderr, self.config.offline):
                    raise InfrastructureError(
                        f"uv could not resolve {reqs.file} because of this machine, not the commit: {reason}. Check the "
                        f"network (or set environment.offline = true with a wheelhouse in environment.find_links) and "
                        f"run again; nothing was recorded against any commit."
                    )
                problem = f"its {reqs.file} cannot be resolved{_as_of(date)}: {reason}"
                self._keep(key, problem=problem, seconds=seconds)
                raise EnvironmentBuildError(problem)
            text = out.read_text()
        lock = Lock(text, parse_lock(text), date, seconds, cached=False)
        self._keep(key, lock=lock)
        return lock

    def _static_problem(self, reqs: RequirementSet) -> str | None:
        """Why ``reqs`` cannot resolve for the target interpreter before asking uv (which does not check a
        source tree's own ``requires-python`` against ``--python``)."""
        if reqs.problem:
            return reqs.problem
        if reqs.requires_python:
            try:
                ok = SpecifierSet(reqs.requires_python).contains(self.interpreter.version, prereleases=True)
            except InvalidSpecifier:
                return f"its {reqs.file} has an unreadable requires-python {reqs.requires_python!r}"
            if not ok:
                return (f"its {reqs.file} requires Python {reqs.requires_python}, and target.python is "
                        f"{self.interpreter.version} ({self.interpreter.executable}): point target.python at an "
                        f"interpreter it accepts")
        return None

    def _keep(self, key: str, *, lock: Lock | None = None, problem: str | None = None, seconds: float = 0.0) -> None:
        """Write a result whole and rename it into place: a reader never sees half of one."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if lock is not None:
            _write_atomic(self.dir / f"{key}.txt", lock.text)
        meta = {"problem": problem, "seconds": lock.seconds if lock else seconds,
                "resolved_as_of": lock.resolved_as_of if lock else "", "at": time.time()}
        _write_atomic(self.dir / f"{key}.json", json.dumps(meta))
        self._memo[key] = lock if lock is not None else str(problem)


def _as_of(date: str) -> str:
    return f" as of {date}" if date else ""


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def run_uv(argv: list[str], cwd: str | Path | None = None, timeout: float = 3600) -> subprocess.CompletedProcess:
    # uv's settings come from [environment] alone (a UV_INDEX_URL in the shell must not change what a commit resolves
    # to); where its cache lives is the user's to say.
    keep = ("UV_CACHE_DIR",)
    env = {k: v for k, v in os.environ.items()
           if k in keep or not k.startswith(("UV_", "VIRTUAL_ENV", "CONDA_PREFIX"))}
    env["UV_NO_PROGRESS"] = "1"
    env["UV_PYTHON_DOWNLOADS"] = "never"  # the target interpreter is given; never fetch another
    try:
        return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=timeout, env=env,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise ConfigError(f"uv was not found at {argv[0]}: set environment.uv to a uv executable, or reinstall perfbisect.") from None
    except subprocess.TimeoutExpired:
        raise InfrastructureError(f"uv ran past {timeout:.0f} s ({' '.join(argv[:3])}); nothing was recorded against any commit.") from None


def uv_error(stderr: str) -> str:
    """uv's error in one line: its "error:" lines, the causes under them and the last words of a build that failed
    (where a wheel stub says what it could not reach), without colour or progress lines."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", stderr or "")
    lines = [line.strip(" │╰─▶×├").strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith(_PROGRESS) and not line.startswith("[stderr]")]
    if not lines:
        return "uv failed without saying why"
    head = [line for line in lines if line.lower().startswith(("error", "caused by", "failed", "because", "cause"))][:4]
    # A build backend's own last words: its last exception with a message, and where it tried to reach.
    raised = [line for line in lines if re.match(r"^[\w.]+(Error|Exception)\b[^:]*: \S", line)][-1:]
    reached = [line for line in lines if "://" in line and not line.startswith(("$", "File "))][:2]
    tail = [line for line in raised + reached if line not in head] or [line for line in lines[-2:] if line not in head]
    joined = "; ".join(head + tail)
    return (joined[:1200] + " …") if len(joined) > 1200 else joined


_DISK_MARKERS = ("no space left on device", "disk quota exceeded", "read-only file system")


def is_infrastructure(text: str, offline: bool = False) -> bool:
    """Whether uv's output (all of it, not the one-line reason) says the machine failed, not the requirements.
    ``offline``: the user said the node has no network, so a distribution uv could not fetch is one the wheelhouse
    lacks (the commits that need it are untestable, named); a full disk is still the machine's."""
    low = text.lower()
    if any(marker in low for marker in _DISK_MARKERS):
        return True
    if "no solution found" in low or offline:
        return False  # requirements that cannot be met: the commit's (a network failure never reads so)
    return any(marker in low for marker in _INFRA_MARKERS)


def uv_version(uv: str) -> str:
    try:
        return subprocess.run([uv, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


__all__ = ["Interpreter", "Lock", "Resolver", "is_infrastructure", "normalize", "parse_lock", "probe",
           "resolution_date", "uv_error", "uv_executable", "uv_version"]
