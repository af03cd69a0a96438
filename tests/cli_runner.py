"""How tests run `perfbisect ARGS`: the one helper of each kind, shared by every test file.

``run_cli``: in the test process, through ``perfbisect.cli.main.main`` (the CLI's one error boundary).
For tests of what the CLI says and which exit status it gives, where starting an interpreter per call
is not the point (and was most of their time): the servers, builds and workloads a command starts are
still real subprocesses. The environment, working directory, argv and signal handlers are restored
afterwards.

``run_command``: the command as a process of its own (`python -m perfbisect.cli`), for what only a
process shows: its entry point, the modules its interpreter loads, what a pipe or a full disk on its
stdout does, its own signal handlers and locks, a wall-clock limit. Both return a CompletedProcess.
(Tests that signal or stream a running command start it with ``subprocess.Popen`` themselves.)
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO


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


def run_command(*args: str, cwd: Path | str | None = None, env: dict[str, str] | None = None, timeout: float | None = 300,
                stdin: int | IO | None = subprocess.DEVNULL, stdout: int | IO | None = subprocess.PIPE,
                columns: int = 300) -> subprocess.CompletedProcess:
    """What ``python -m perfbisect.cli ARGS`` printed and returned. ``env`` is added to this process's
    environment; ``columns`` is the terminal width its text is wrapped at; stdin is empty (never a terminal,
    so no command waits on a question), ``stdout`` a pipe unless given (a file, a closed pipe)."""
    return subprocess.run([sys.executable, "-m", "perfbisect.cli", *args], stdin=stdin, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, cwd=cwd, timeout=timeout,
                          env={**os.environ, "COLUMNS": str(columns), **(env or {})})
