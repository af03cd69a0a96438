"""Checks that a server launch measures what it names.

A trial must measure the commit and the mode it names, so two things make it untestable (skipped,
the commit never blamed) rather than measured: on an SGLang target, an ``sglang`` that the server's
env would import from outside the worktree although that env puts the worktree on PYTHONPATH
(``served_elsewhere``: a checkout is not the release, and since SGLang 0.5.9 the reported version is
the installed package's, so only the import location tells); and a variable of the mode's own env
that the server's workers do not run with (``server.mode_not_applied``). ``launch_check`` is
``perfbisect doctor --launch``'s one server start: readiness, the env checks, which implementation served.
``preflight`` is what every measuring command checks before its first trial, to fail at once rather than at
every trial.
"""

from __future__ import annotations

import os
import shutil

from ..errors import ConfigError
from ..model import EnvCheck
from ..placeholders import expand
from ..settings import Config, ModeConfig
from ..workload_kinds import kind_of
from .served import Served, served_from_log
from .server import ServerSession, port_holders, port_in_use
from .trial_context import TrialContext
from .trial_session import Prepared
from .versions import check_target_python


def preflight(cfg: Config) -> None:
    """Fail fast on what would break every trial: a server command that does not exist, a busy fixed port, a target
    interpreter too old to be read."""
    check_target_python(cfg.target.python)
    if not kind_of(cfg.workload).serves:
        argv = expand(cfg.workload.command, python=cfg.target.python, worktree=str(cfg.target.repo))
        what = "workload.command"
    else:
        argv = expand(cfg.server.command, python=cfg.target.python, port="0", worktree=str(cfg.target.repo), host=cfg.server.host)
        what = "server.command"
    exe = argv[0]
    if not (shutil.which(exe) or (os.sep in exe and os.access(exe, os.X_OK))):
        raise ConfigError(
            f"{cfg.path}: {what} starts with '{exe}', which is not an executable on PATH or a path to one. "
            f"Fix {what} (for SGLang: [\"{{python}}\", \"-m\", \"sglang.launch_server\", ...]) or target.python."
        )
    if kind_of(cfg.workload).serves and cfg.server.port and port_in_use(cfg.server.host, cfg.server.port):
        holders = port_holders(cfg.server.port)
        who = f" (held by pid {', '.join(map(str, holders))})" if holders else ""
        raise ConfigError(
            f"Port {cfg.server.port} on {cfg.server.host} is already in use{who}, so no trial could start its server. "
            f"Stop the process holding it, or set server.port = 0 in {cfg.path} to pick a free port per trial."
        )


def launch_check(ws: TrialContext, mode: ModeConfig) -> tuple[float, tuple[EnvCheck, ...], Served]:
    """Start the server of ``mode`` once in the target checkout as it is, wait until it is ready and
    check the configured env reached every process of its group (``perfbisect doctor --launch``).

    Seconds to readiness, the env checks, and which implementation served (its log, ``served``); the
    server is torn down before this returns. The caller holds the locks a trial holds
    (``Workspace.exclusive``).
    """
    cfg = ws.config
    log = cfg.cache_dir / "logs" / "doctor-server.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    python = cfg.target.python
    if ws.environments is not None:  # the checkout's own environment, as a trial of HEAD would have it
        python = ws.environments.ensure(ws.repo.resolve("HEAD"), upstream=True).python  # the checkout as it is: no patch stack
    with ServerSession(cfg.server, mode, cfg.target.repo, python, log) as session:
        seconds = session.wait_ready()
        return seconds, session.check_env(), served_from_log(log)


def _inside(path: str, root: str) -> bool:
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def served_elsewhere(versions: dict, env: dict[str, str], prepared: Prepared) -> str | None:
    """Why a trial of ``prepared`` would not measure its checkout, or None: the server's ``env`` puts
    a folder of the worktree on PYTHONPATH, yet the target's interpreter, run with that env in the
    worktree, finds ``sglang`` outside it (``versions["sglang_file"]``). Nothing is said when the env
    puts no worktree folder on PYTHONPATH (an install-based config) or when no sglang is found at all
    (the server then fails with its own message)."""
    worktree = str(prepared.worktree)
    entries = [e for e in env.get("PYTHONPATH", "").split(os.pathsep) if e]
    ours = [e for e in entries if _inside(os.path.join(worktree, e), worktree)]  # relative ones: from the worktree
    where = versions.get("sglang_file")
    if not ours or not where or _inside(where, worktree):
        return None
    version = versions.get("sglang")
    reported = (f"and report that copy's version (sglang {version}: since SGLang 0.5.9 sglang.__version__ is the "
                f"installed package's, not the checkout's)" if version else "and report that copy's version")
    return (
        f"the server would not run the checkout under test: with the server's env (PYTHONPATH={env['PYTHONPATH']!r}, "
        f"which names {', '.join(ours)} of the worktree) {prepared.python} imports sglang from {where}, outside the worktree "
        f"{worktree}. The server would run that copy's code, not {prepared.commit.short}'s, {reported}, so this trial is "
        f"skipped and the commit never blamed. Make the checkout importable: check that {ours[0]}/sglang exists at this "
        f"commit, and that nothing resets PYTHONPATH or puts the other copy first (target.python a wrapper script that "
        f"sets PYTHONPATH, a .pth file or sitecustomize, python -I or -E in server.command)."
    )
