"""Hostile input (issue #23): a password holding '@', and the smaller findings of item 7 — each a
clear error with exit 2 (or the right behaviour), never a traceback or a garbled message."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from perfbisect.errors import mask_secrets

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "perfbisect.cli", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=timeout, env={**os.environ, "COLUMNS": "300", **(env or {})})


def one_line(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    return " ".join((proc.stdout + proc.stderr).split())


# ---------------------------------------------------------------------------------------------
# Passwords

# Runs the CLI with the resolver and socket connections spied on: any lookup or connection is logged.
SPY = textwrap.dedent("""
    import runpy, socket, sys
    log = open(sys.argv[1], "a")
    real_getaddrinfo, real_connect = socket.getaddrinfo, socket.socket.connect
    def getaddrinfo(*a, **k):
        log.write(f"getaddrinfo {a!r}\\n"); log.flush()
        return real_getaddrinfo(*a, **k)
    def connect(self, address):
        log.write(f"connect {address!r}\\n"); log.flush()
        return real_connect(self, address)
    socket.getaddrinfo, socket.socket.connect = getaddrinfo, connect
    sys.argv = ["perfbisect"] + sys.argv[2:]
    runpy.run_module("perfbisect.cli", run_name="__main__")
""")


@pytest.mark.parametrize("command", [["log"], ["report", "1"]])
def test_a_password_with_an_at_sign_is_refused_unprinted_and_unresolved(tmp_path, command):
    url = "postgresql+psycopg://user:se@cret3@127.0.0.1:1/db"
    spy_log = tmp_path / "network.log"
    proc = subprocess.run([sys.executable, "-c", SPY, str(spy_log), *command, "--db", url], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120, env={**os.environ, "COLUMNS": "300"})
    text = one_line(proc)
    assert proc.returncode == 2, text
    assert "more than one '@'" in text and "%40" in text
    for fragment in ("se@", "cret3", ":se"):
        assert fragment not in text, text
    assert "user:***@127.0.0.1:1/db" in text
    assert not spy_log.exists() or spy_log.read_text() == ""  # no lookup, no connection


def test_masking_parses_the_url_and_leaves_other_words_alone():
    text = "failed to resolve host: Name or service not known (postgresql+psycopg://user:se@cret3@127.0.0.1:1/db)"
    masked = mask_secrets(text, "se")
    assert "Name or service not known" in masked and "se@cret3" not in masked and "cret3" not in masked
    assert "postgresql+psycopg://user:***@127.0.0.1:1/db" in masked
    assert mask_secrets("postgresql://bob:p/w@host/db?password=x&sslmode=y") == "postgresql://bob:***@host/db?password=***&sslmode=y"
    assert mask_secrets("sqlite:///home/user/results.sqlite and postgresql://bob@h/db") == \
        "sqlite:///home/user/results.sqlite and postgresql://bob@h/db"
    assert mask_secrets("the password is hunter2, user hunter22", "hunter2") == "the password is ***, user hunter22"
