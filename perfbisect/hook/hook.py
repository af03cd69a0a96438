"""`perfbisect hook install | uninstall | status`: the post-`git pull` hooks of a target repository.

Two hooks cover a pull: ``post-merge`` (a plain `git pull`, fast-forward included, and a
`git pull --rebase` that only fast-forwards) and ``post-rewrite`` (a `git pull --rebase` that
rebases local commits). Both are the shipped ``hooks/perfbisect-hook.sh`` with the interpreter
perfbisect runs under, the config and the hook directory written in at install time.

A hook already there is renamed to ``<name>.perfbisect-orig`` (a rename keeps its bytes, its mode
and, for a symlink, the link itself) and is run by ours with the same arguments and stdin;
uninstall renames it back. ``core.hooksPath`` is honoured (relative to the worktree root when
relative). git is called with argument lists only.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .checkqueue import hook_dir
from ..git.gitrepo import run_git
from ..config import load_config
from ..errors import ConfigError, PerfbisectError, UsageError
from ..resources import data_dir

HOOK_NAMES = ("post-merge", "post-rewrite")
MARKER = "# perfbisect-hook:"
ORIG_SUFFIX = ".perfbisect-orig"
TEMPLATE = "perfbisect-hook.sh"
SETTINGS = "@PERFBISECT_SETTINGS@"


def _git(repo: Path, *args: str) -> tuple[int, str]:
    status, out, _ = run_git(repo, args)
    return status, out.strip()


def hooks_dir(repo: Path) -> Path:
    """Where git looks for this repository's hooks: core.hooksPath, else <common git dir>/hooks."""
    repo = Path(repo)
    rc, top = _git(repo, "rev-parse", "--show-toplevel")
    if rc != 0:
        raise UsageError(f"{repo} is not a git working tree: pass --repo with the checkout whose pulls should be checked.")
    # The repository's own setting, not the one every perfbisect git call passes (-c core.hooksPath=/dev/null, so
    # that no hook of the target's runs inside our calls): values of the "command" scope are ours.
    rc, out = _git(repo, "config", "--show-scope", "--get-all", "core.hooksPath")
    values = [line.split("\t", 1)[1] for line in out.splitlines() if "\t" in line and not line.startswith("command\t")]
    configured = values[-1] if rc == 0 and values else ""
    if configured:
        path = Path(configured).expanduser()
        return path if path.is_absolute() else Path(top) / path
    _, common = _git(repo, "rev-parse", "--git-common-dir")
    common_path = Path(common)
    return (common_path if common_path.is_absolute() else Path(top) / common_path) / "hooks"


def is_ours(path: Path) -> bool:
    """True when ``path`` is a hook perfbisect wrote."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(400)
    except OSError:
        return False
    return MARKER.encode() in head


def render(name: str, python: str, config: Path, state_dir: Path) -> str:
    """The hook script for ``name`` with its settings written in, every value shell-quoted."""
    template = (data_dir("hooks") / TEMPLATE).read_text()
    settings = "\n".join((
        f"PB_PYTHON={shlex.quote(python)}",
        f"PB_CONFIG={shlex.quote(str(config))}",
        f"PB_DIR={shlex.quote(str(state_dir))}",
        f"PB_HOOK={shlex.quote(name)}",
    ))
    return template.replace(SETTINGS, settings, 1)


@dataclass(frozen=True)
class HookState:
    name: str
    path: Path
    installed: bool  # ours is in place
    chained: Path | None  # the original hook ours runs (None when there was none)
    foreign: bool  # something else is in place (ours was replaced, or never installed)
    current: bool  # ours matches what this perfbisect would write


def _old_worker_path(path: Path) -> str:
    """", which starts the worker by its older path, removed in perfbisect 0.3" for a hook that does (it reaches the
    worker through the ``perfbisect.hookworker`` shim until then), else ""."""
    try:
        text = path.read_text()
    except OSError:
        return ""
    if "-m perfbisect.hookworker" not in text:
        return ""
    return ", which starts the worker by its older path (python -m perfbisect.hookworker, removed in perfbisect 0.3)"


def _settings(path: Path) -> dict[str, str]:
    """PB_* values of an installed hook of ours."""
    out: dict[str, str] = {}
    try:
        text = path.read_text()
    except OSError:
        return out
    # The block ``render`` wrote, read as the shell reads it: a quoted value may hold a newline (a config path can).
    start = text.find("\nPB_PYTHON=")
    end = text.find("\nPB_HOOK=", start)
    end = text.find("\n", end + 1) if end >= 0 else -1
    if start < 0 or end < 0:
        return out
    try:
        tokens = shlex.split(text[start:end])
    except ValueError:
        return out
    for token in tokens:
        key, sep, value = token.partition("=")
        if sep and key.startswith("PB_"):
            out[key] = value
    return out


def install(repo: Path, config_path: Path, python: str | None = None) -> list[str]:
    """Install both hooks (chaining what is there); returns what was done, one line each."""
    config_path = Path(config_path).expanduser().absolute()
    config = load_config(config_path)  # a hook whose config does not load would check nothing
    python = python or sys.executable
    directory = hooks_dir(repo)
    state_dir = hook_dir(config.cache_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"Cannot create {exc.filename}: {exc.strerror}. Fix its permissions and install again.") from None
    # Every precondition first: a refusal must leave every hook as it was, never one replaced.
    for name in HOOK_NAMES:
        path = directory / name
        orig = directory / f"{name}{ORIG_SUFFIX}"
        if os.path.lexists(path) and not is_ours(path) and os.path.lexists(orig):
            raise UsageError(
                f"{path} is not perfbisect's hook, and {orig} (a hook perfbisect saved earlier) is still there. "
                f"Move one of them away by hand, then install again; no hook was changed."
            )
    rendered = {name: render(name, python, config_path, state_dir) for name in HOOK_NAMES}
    done = []
    for name in HOOK_NAMES:
        path = directory / name
        orig = directory / f"{name}{ORIG_SUFFIX}"
        if os.path.lexists(path) and not is_ours(path):
            os.rename(path, orig)
            done.append(f"{name}: kept the existing hook as {orig.name}; perfbisect's runs it after every pull")
        tmp = directory / f".{name}.perfbisect-tmp"
        tmp.write_text(rendered[name])
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
        done.append(f"{name}: installed {path}")
    return done


def uninstall(repo: Path) -> list[str]:
    """Remove perfbisect's hooks and put back, byte for byte, what they replaced."""
    directory = hooks_dir(repo)
    done = []
    for name in HOOK_NAMES:
        path = directory / name
        orig = directory / f"{name}{ORIG_SUFFIX}"
        if is_ours(path):
            path.unlink()
            if os.path.lexists(orig):
                os.rename(orig, path)
                done.append(f"{name}: removed perfbisect's hook, restored the original")
            else:
                done.append(f"{name}: removed perfbisect's hook")
        elif os.path.lexists(path):
            done.append(f"{name}: {path} is not perfbisect's; left as it is" + (f" ({orig.name} kept too)" if os.path.lexists(orig) else ""))
        elif os.path.lexists(orig):
            os.rename(orig, path)
            done.append(f"{name}: restored the original from {orig.name}")
        else:
            done.append(f"{name}: nothing installed")
    return done


def status(repo: Path) -> dict:
    """What is installed where, and whether it works: its interpreter runs perfbisect, its config loads."""
    directory = hooks_dir(repo)
    hooks = []
    settings: dict[str, str] = {}
    for name in HOOK_NAMES:
        path = directory / name
        orig = directory / f"{name}{ORIG_SUFFIX}"
        ours = is_ours(path)
        current = False
        if ours:
            settings = settings or _settings(path)
            s = _settings(path)
            try:
                current = path.read_text() == render(name, s.get("PB_PYTHON", ""), Path(s.get("PB_CONFIG", "")), Path(s.get("PB_DIR", "")))
            except OSError:
                current = False
        hooks.append(HookState(name, path, ours, orig if os.path.lexists(orig) else None,
                               os.path.lexists(path) and not ours, current))
    problems = []
    if not any(h.installed for h in hooks):
        problems.append(f"not installed in {directory}: run `perfbisect hook install`")
    else:
        for h in hooks:
            if not h.installed:
                problems.append(f"{h.name} is missing or replaced ({h.path}): run `perfbisect hook install` again")
            elif not h.current:
                problems.append(f"{h.name} was written by another perfbisect version{_old_worker_path(h.path)}: "
                                f"run `perfbisect hook install` again")
            if h.chained is not None and not os.access(h.chained, os.X_OK):
                problems.append(f"{h.chained} is not executable, so it is not run (git would not run it either)")
        python = settings.get("PB_PYTHON", "")
        if not python or not os.access(python, os.X_OK):
            problems.append(f"the interpreter the hook calls ({python or 'none'}) is missing: reinstall perfbisect, then `perfbisect hook install`")
        else:
            try:
                probe = subprocess.run([python, "-c", "import perfbisect.hook.hookworker, perfbisect.hook.checkqueue, perfbisect.report.console"], capture_output=True, text=True, timeout=60,
                                       stdin=subprocess.DEVNULL)
                if probe.returncode != 0:
                    last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
                    problems.append(f"{python} cannot import perfbisect ({last}): reinstall perfbisect there, or `perfbisect hook install` from the right one")
            except (OSError, subprocess.TimeoutExpired) as exc:
                problems.append(f"{python} did not run: {exc}")
        config = settings.get("PB_CONFIG", "")
        try:
            load_config(Path(config))
        except PerfbisectError as exc:
            problems.append(f"the config the hook uses does not load: {exc}")
    return {
        "hooks_dir": str(directory),
        "hooks": [
            {"name": h.name, "path": str(h.path), "installed": h.installed, "chained": str(h.chained) if h.chained else None,
             "foreign": h.foreign, "current": h.current}
            for h in hooks
        ],
        "python": settings.get("PB_PYTHON"),
        "config": settings.get("PB_CONFIG"),
        "state_dir": settings.get("PB_DIR"),
        "works": not problems,
        "problems": problems,
    }


def format_status(data: dict) -> list[str]:
    lines = [f"hooks directory: {data['hooks_dir']}"]
    for h in data["hooks"]:
        if h["installed"]:
            what = "installed" + (f", runs the original {Path(h['chained']).name} after it" if h["chained"] else "")
        elif h["foreign"]:
            what = "another hook (not perfbisect's)"
        else:
            what = "not installed"
        lines.append(f"{h['name']}: {what}")
    if data["python"]:
        lines.append(f"calls: {data['python']} -m perfbisect.hook.hookworker {data['config']} {data['state_dir']}")
    lines.append("works: yes" if data["works"] else "works: no")
    lines.extend(f"  {p}" for p in data["problems"])
    return lines
