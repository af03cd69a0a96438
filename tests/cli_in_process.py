"""`perfbisect ARGS` run in the test process, through ``cli.main`` (the CLI's one error boundary).

For tests of what the CLI says and which exit status it gives, where starting an interpreter per call
is not the point (and was most of their time): the servers, builds and workloads a command starts are
still real subprocesses. The environment, working directory, argv and signal handlers are restored
afterwards. Tests of the installed command itself (entry point, signals) run it as a subprocess.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from pathlib import Path


def run_cli(*args: str, cwd: Path | str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """What ``perfbisect ARGS`` printed and returned, as a CompletedProcess (drop-in for subprocess.run)."""
    from perfbisect.cli import main as cli

    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        os.environ.update({"COLUMNS": "200", **(env or {})})
        if cwd is not None:
            os.chdir(cwd)
        sys.argv = ["perfbisect", *args]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return subprocess.CompletedProcess(["perfbisect", *args], code, out.getvalue(), err.getvalue())
