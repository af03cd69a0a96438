"""Installing one pinned environment (the recipe is ``envs``' docstring): the target interpreter probed
(``probe_interpreter``: its real path, version, site directories, pip, installed distributions), a
venv layered on it through a ``.pth``, the pins installed with pip, uv or a pip from ``ensurepip`` in an
environment cleared of the caller's pip and uv settings (``installer_environ``), and what the venv's
interpreter then sees checked (``EnvInstaller``). A fault of the machine (a full disk) stops the run;
anything else makes the pin set unbuildable: its commits are skipped, never blamed.

``envs.EnvCache`` keys, caches, holds and evicts the environments this module installs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..runtime.children import own_group, signal_group
from ..errors import ConfigError, EnvironmentBuildError, InfrastructureError
from ..runtime.logtail import log_tail
from ..git.pins import PinSet

_BASE_PTH = "_perfbisect_base.pth"
INSTALL_TIMEOUT_S = 3600.0
_MACHINE_FAULTS = ("No space left on device", "Disk quota exceeded", "Read-only file system")
# uv settings in the caller's environment worth keeping (where its cache is); every other UV_* and every
# PIP_* is left out of an installer's environment, and no pip or uv config file is read: a `target` or
# `prefix` in ~/.config/pip/pip.conf, /etc/pip.conf or $PIP_CONFIG_FILE would send the install into the
# user's own environment, and an index there would change what a pin set is.
_KEPT_UV = ("UV_CACHE_DIR",)


def installer_environ(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment an installer runs with: the caller's, less every PIP_* and UV_* setting (uv's cache
    directory kept), with PIP_CONFIG_FILE set to the null device, which makes pip read no config file."""
    environ = dict(os.environ if environ is None else environ)
    out = {k: v for k, v in environ.items()
           if not k.startswith("PIP_") and not (k.startswith("UV_") and k not in _KEPT_UV)}
    out["PIP_CONFIG_FILE"] = os.devnull
    return out


_PROBE = r"""
import json, os, re, site, sys
dirs = [p for p in sys.path if p and os.path.isdir(p) and os.path.basename(p) in ("site-packages", "dist-packages")]
try:
    import pip  # noqa: F401
    has_pip = True
except Exception:
    has_pip = False
from importlib import metadata
dists = {}
for d in metadata.distributions():
    name = (d.metadata["Name"] or "").strip()
    if name:
        dists.setdefault(re.sub(r"[-_.]+", "-", name).lower(), d.version)
print(json.dumps({"executable": os.path.realpath(sys.executable), "version": sys.version.split()[0],
                  "site_dirs": list(dict.fromkeys(dirs)), "has_pip": has_pip, "dists": dists}))
"""

# Run by an environment's interpreter: each named package's version as it sees it, and every exact
# requirement of those packages' own metadata it does not satisfy ([package, requirement, installed]).
_VERSIONS = r"""
import json, re, sys
from importlib import metadata
try:
    from packaging.requirements import Requirement
except Exception:
    try:
        from pip._vendor.packaging.requirements import Requirement
    except Exception:
        Requirement = None
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
out, needs, specs = {}, [], {}
for arg in sys.argv[1:]:
    name, _, spec = arg.partition(" ")
    out[name] = version(name)
    if Requirement is None or out[name] is None:
        continue
    if spec:
        try:
            specs[name] = Requirement(name + spec).specifier.contains(out[name], prereleases=True)
        except Exception:
            pass
    for raw in metadata.requires(name) or ():
        try:
            req = Requirement(raw)
        except Exception:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if not any(s.operator in ("==", "===") for s in req.specifier):
            continue
        have = version(req.name)
        if have is None or not req.specifier.contains(have, prereleases=True):
            needs.append([name, re.sub(r"[-_.]+", "-", req.name).lower() + str(req.specifier), have])
print(json.dumps({"versions": out, "needs": needs, "specs": specs}))
"""


@dataclass(frozen=True)
class BaseInterpreter:
    """The target interpreter a pinned environment layers on."""

    python: str
    executable: str
    version: str
    site_dirs: tuple[str, ...]
    has_pip: bool
    dists: tuple[tuple[str, str], ...] = ()  # (normalized name, version) of what it has installed

    def has(self, name: str) -> str | None:
        """The version of ``name`` (normalized) the interpreter has, or None."""
        return dict(self.dists).get(name)


def probe_interpreter(python: str) -> BaseInterpreter:
    """What ``python`` is and where its packages are; ConfigError when it cannot run."""
    try:
        done = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(
            f"target.python {python!r} cannot be run ({exc}); pinned environments are built from it. "
            f"Set target.python to the interpreter your server runs under."
        ) from None
    if done.returncode != 0:
        raise ConfigError(f"target.python {python!r} failed to start: {done.stderr.strip()[-300:]}. Fix target.python.")
    data = json.loads(done.stdout.strip().splitlines()[-1])
    return BaseInterpreter(python, data["executable"], data["version"], tuple(data["site_dirs"]), bool(data["has_pip"]),
                           tuple(sorted((data.get("dists") or {}).items())))


def _uv() -> str | None:
    """uv's executable: the one running us (``$UV``, set by ``uv run``), else the first on PATH."""
    uv = os.environ.get("UV")
    return uv if uv and Path(uv).is_file() else shutil.which("uv")


class EnvInstaller:
    """Installs pinned environments on the target interpreter ``base``, from ``wheel_dir`` and/or
    ``index_url``; ``cache_dir`` (where the environments are kept) is named when the machine runs out of room."""

    def __init__(self, base: BaseInterpreter, wheel_dir: Path | None, index_url: str | None, cache_dir: Path):
        self.base = base
        self.python = base.python
        self.wheel_dir = wheel_dir
        self.index_url = index_url
        self.dir = cache_dir

    def build(self, pin_set: PinSet, path: Path, log_path: Path) -> tuple[str, dict]:
        """Install ``pin_set`` into a new venv at ``path`` (the installers' output in ``log_path``) and check
        what its interpreter sees: (which installer, each pin's version); EnvironmentBuildError when it cannot be."""
        base = self.base
        what = f"the environment for {pin_set.describe()}"
        with log_path.open("w") as log:
            self._run([base.python, "-m", "venv", "--without-pip", str(path)], log, what, log_path)
            env_python = str(path / "bin" / "python")
            purelib = self._output([env_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   log, what, log_path).strip()
            line = "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in base.site_dirs)
            Path(purelib, _BASE_PTH).write_text(line + "\n")
            installer, argv = self._installer(pin_set, env_python, log, what, log_path)
            self._run([*argv, *self._sources(), *pin_set.requirements], log, what, log_path, timeout_s=INSTALL_TIMEOUT_S)
            seen = self._verify(pin_set, env_python, log, what, log_path)
            if seen["needs"]:
                # An installed pin declares an exact requirement the venv does not see (torch's CUDA
                # packages, a kernel built against one torch): install exactly that, and look again.
                extra = sorted({need for _, need, _ in seen["needs"]})
                log.write(f"# perfbisect: the pinned packages' own exact requirements: {', '.join(extra)}\n")
                self._run([*argv, *self._sources(), *extra], log, what, log_path, timeout_s=INSTALL_TIMEOUT_S)
                seen = self._verify(pin_set, env_python, log, what, log_path)
        versions = seen["versions"]
        wrong = [f"{p.name} {versions.get(p.name)!s} (pinned {p.spec})" for p in pin_set.pins
                 if not p.marker and ((p.exact_version is not None and versions.get(p.name) != p.exact_version)
                                      or versions.get(p.name) is None or seen["specs"].get(p.name) is False)]
        by_name = {p.name: p for p in pin_set.pins}
        wrong += [f"{p.name} {versions.get(p.name)!s} beside {p.companion_of} {versions.get(p.companion_of)!s} (they must match)"
                  for p in pin_set.pins if p.companion_of in by_name and not p.source.endswith("METADATA")
                  and versions.get(p.name) != versions.get(p.companion_of)]
        wrong += [f"{package} needs {need} and sees {have or 'none'}" for package, need, have in seen["needs"]]
        if wrong:
            raise EnvironmentBuildError(
                f"{what} was installed, but its interpreter sees {', '.join(wrong)}: the commits of this pin set "
                f"are skipped, never blamed (SGLang's own check refuses only a kernel older than its minimum). "
                f"Read the log {log_path}."
            )
        return installer, versions

    def _verify(self, pin_set: PinSet, env_python: str, log, what: str, log_path: Path) -> dict:
        """What the environment's interpreter sees of ``pin_set``: versions, the specifiers they meet, and
        the exact requirements of their metadata it does not satisfy."""
        args = [f"{p.name} {p.spec}" for p in pin_set.pins]
        out = json.loads(self._output([env_python, "-c", _VERSIONS, *args], log, what, log_path).strip().splitlines()[-1])
        return {"versions": out.get("versions") or {}, "needs": out.get("needs") or [], "specs": out.get("specs") or {}}

    def describe(self) -> str:
        """Which installer a new environment would use, in words (doctor)."""
        if self.base.has_pip:
            return f"pip of target.python ({self.python})"
        uv = _uv()
        return f"uv ({uv})" if uv else "a pip each environment gets from ensurepip (target.python has no pip, no uv found)"

    def _installer(self, pin_set: PinSet, env_python: str, log, what: str, log_path: Path) -> tuple[str, list[str]]:
        """pip (the target's, seen through the .pth), else uv, else a pip from ensurepip — into the venv."""
        pip = [env_python, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "--no-input"]
        if self.base.has_pip:
            return "pip", pip
        uv = _uv()
        if uv:
            # uv's cache knows a wheel by its name: a wheel rebuilt in place under the same version
            # would be served from it, stale. Revalidate the pinned packages (the key has their bytes).
            refresh = [a for name in sorted({p.name for p in pin_set.pins}) for a in ("--refresh-package", name)]
            return "uv", [uv, "pip", "install", "--no-config", "--python", env_python, "--no-deps", *refresh]
        self._run([env_python, "-m", "ensurepip", "--default-pip"], log, what, log_path)
        return "pip (ensurepip)", pip

    def _sources(self) -> list[str]:
        out: list[str] = []
        if self.index_url:
            out += ["--index-url", self.index_url]
        elif self.wheel_dir is not None:
            out += ["--no-index"]
        if self.wheel_dir is not None:
            out += ["--find-links", str(self.wheel_dir)]
        return out

    def _run(self, argv: list[str], log, what: str, log_path: Path, timeout_s: float = 600.0) -> None:
        self._output(argv, log, what, log_path, timeout_s)

    def _output(self, argv: list[str], log, what: str, log_path: Path, timeout_s: float = 600.0) -> str:
        log.write(f"$ {argv!r}\n")
        log.flush()
        env = installer_environ()
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True,
                                    env=env, **own_group())
        except OSError as exc:
            raise EnvironmentBuildError(
                f"Cannot build {what}: {argv[0]!r} cannot be started ({exc.strerror or exc}). The commits of this "
                f"pin set are skipped, never blamed. Log: {log_path}"
            ) from None
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL, proc)
            proc.wait()
            raise EnvironmentBuildError(f"Building {what} ran past {timeout_s:g} s and was stopped. Log: {log_path}") from None
        except BaseException:
            signal_group(proc.pid, signal.SIGKILL, proc)
            proc.wait()
            raise
        log.write(out)
        log.flush()
        if proc.returncode != 0:
            tail = log_tail(log_path, 12)
            fault = next((f for f in _MACHINE_FAULTS if f in tail), None)
            if fault:  # the machine failed the install, not the commit's pins: stop, do not skip
                raise InfrastructureError(
                    f"Building {what} failed because of the machine, not the pins ({fault}). Free space under "
                    f"{self.dir} (`perfbisect gc --build-cache` removes the environments) and run again: "
                    f"`perfbisect resume` continues a bisection. Log: {log_path}"
                )
            raise EnvironmentBuildError(
                f"Cannot build {what}: {Path(argv[0]).name} {' '.join(argv[1:3])} exited with status {proc.returncode}. "
                f"The commits of this pin set are skipped, never blamed. Fix: put the pinned wheels in [build] "
                f"wheel_dir{f' ({self.wheel_dir})' if self.wheel_dir else ''} or set [build] index_url. Log: "
                f"{log_path}\n{tail}"
            )
        return out
