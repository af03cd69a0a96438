"""Signals and concurrency through the real CLI: SIGTERM/SIGINT tear the server down and say how to
resume; SIGKILL takes the children along; a second command on one repository refuses or waits and
leaves the first one's server and worktree alone.

Every wait here is for an event (a log line, a file, a process exit), never for a duration.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from perfbisect.config import load_config
from perfbisect.demo.target import make_demo_target
from tests.cli_runner import run_command

pytestmark = pytest.mark.slow

EVENT_TIMEOUT_S = 240  # generous: the machine may be shared and slow; nothing here measures speed


class Cli:
    """A perfbisect command running in the background, its stderr collected line by line."""

    def __init__(self, *args: str, cwd: Path | None = None):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "perfbisect.cli", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
            env={**os.environ, "COLUMNS": "300"},
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str) -> None:
        deadline = time.monotonic() + EVENT_TIMEOUT_S
        while text not in self.stderr:
            assert self.proc.poll() is None or text in self.stderr, f"exited {self.proc.returncode} before {text!r}:\n{self.stderr}"
            assert time.monotonic() < deadline, f"no {text!r} yet:\n{self.stderr}"
            time.sleep(0.05)

    def finish(self) -> int:
        try:
            rc = self.proc.wait(timeout=EVENT_TIMEOUT_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self._reader.join(timeout=10)
        return rc


def rows(db: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def group_members(pgid: int) -> list[int]:
    """Live processes whose process group or session is ``pgid``."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if fields[0] not in ("Z", "X") and pgid in (int(fields[2]), int(fields[3])):
            out.append(int(name))
    return out


def server_groups(cache_dir: Path) -> list[int]:
    return [int(p.stem) for p in (cache_dir / "servers").glob("*.pid")]


def wait_gone(pids_of, what: str) -> None:
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    while pids_of():
        assert time.monotonic() < deadline, f"{what} still alive: {pids_of()}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return make_demo_target(tmp_path_factory.mktemp("signals") / "demo", commits=12)


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_tears_the_server_down_and_says_how_to_resume(demo, tmp_path, sig, code):
    db = tmp_path / "r.sqlite"
    cache_dir = load_config(demo.config).cache_dir
    run = Cli("run", f"good={demo.good}", f"bad={demo.bad}", "-c", str(demo.config), "--db", str(db))
    run.wait_for("server ready in")
    groups = server_groups(cache_dir)
    assert groups and all(group_members(g) for g in groups)  # the trial's server (and its workers) run
    run.proc.send_signal(sig)
    assert run.finish() == code, run.stderr
    bisection = rows(db, "select id, status from bisections")
    assert len(bisection) == 1 and bisection[0][1] == "interrupted"
    bid = bisection[0][0]
    last = [line for line in run.lines if line.strip()][-1]
    assert f"perfbisect resume {bid}" in last and signal.Signals(sig).name in last, run.stderr
    assert "Traceback" not in run.stderr and "Aborted" not in run.stderr
    for group in groups:
        assert group_members(group) == [], f"server group {group} outlived perfbisect"
    assert rows(db, "select count(*) from trials where status = 'running' or finished_at is null") == [(0,)]
    status, error = rows(db, "select status, error from trials order by id desc limit 1")[0]
    assert status == "failed" and error.startswith("interrupted"), (status, error)


def test_an_interrupted_run_with_json_says_so_in_json(demo, tmp_path):
    # a script reading --json (CI, the GPU validation) got an empty stdout when the run was cut short
    import json

    db = tmp_path / "r.sqlite"
    run = Cli("run", f"good={demo.good}", f"bad={demo.bad}", "-c", str(demo.config), "--db", str(db), "--json")
    run.wait_for("server ready in")
    run.proc.send_signal(signal.SIGINT)
    assert run.finish() == 130, run.stderr
    assert run.proc.stdout is not None
    doc = json.loads(run.proc.stdout.read())
    bid = rows(db, "select id from bisections")[0][0]
    assert doc["kind"] == "Interrupted" and doc["exit_code"] == 130 and doc["bisection"] == bid
    assert doc["resume"].startswith(f"perfbisect resume {bid} ") and "--db" in doc["resume"]
    assert "SIGINT" in doc["error"] and "Traceback" not in run.stderr


def _command_config(demo, tmp_path: Path, script: str) -> Path:
    bench = tmp_path / "bench.py"
    bench.write_text(script)
    text = demo.config.read_text().replace(
        '[workload]\nkind = "sglang"',
        f'[workload]\nkind = "command"\ncommand = ["{{python}}", "{bench}"]\nmetric = "tok_s"',
    )
    text = text.replace('metric = "eagle3"', 'metric = "baseline"')
    config = tmp_path / "perfbisect.toml"
    config.write_text(text)
    return config


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_sigkill_of_perfbisect_takes_a_command_workload_with_it(demo, tmp_path):
    pidfile = tmp_path / "bench.pid"
    config = _command_config(demo, tmp_path, (
        "import os, pathlib, time\n"
        f"pathlib.Path({str(pidfile)!r}).write_text(str(os.getpid()))\n"
        "time.sleep(3600)\n"
    ))
    run = Cli("measure", "HEAD", "-m", "baseline", "-c", str(config), "--db", str(tmp_path / "r.sqlite"))
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    while not (pidfile.exists() and pidfile.read_text()):
        assert run.proc.poll() is None, run.stderr
        assert time.monotonic() < deadline, run.stderr
        time.sleep(0.05)
    bench = int(pidfile.read_text())
    assert _alive(bench)
    run.proc.kill()
    run.finish()
    wait_gone(lambda: [bench] if _alive(bench) else [], "the command workload")


def test_sigterm_stops_a_command_workload_and_marks_the_trial(demo, tmp_path):
    pidfile = tmp_path / "bench.pid"
    config = _command_config(demo, tmp_path, (
        "import os, pathlib, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"  # a stubborn benchmark: only SIGKILL stops it
        f"pathlib.Path({str(pidfile)!r}).write_text(str(os.getpid()))\n"
        "time.sleep(3600)\n"
    ))
    db = tmp_path / "r.sqlite"
    run = Cli("measure", "HEAD", "-m", "baseline", "-c", str(config), "--db", str(db))
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    while not (pidfile.exists() and pidfile.read_text()):
        assert run.proc.poll() is None, run.stderr
        assert time.monotonic() < deadline, run.stderr
        time.sleep(0.05)
    bench = int(pidfile.read_text())
    run.proc.terminate()
    assert run.finish() == 143, run.stderr
    assert "Interrupted by SIGTERM" in run.stderr and "Traceback" not in run.stderr
    assert not _alive(bench)
    assert rows(db, "select status from trials") == [("failed",)]


def _endless_trials(demo, tmp_path: Path) -> Path:
    """The demo config with a trial that runs until stopped (a first command that stays busy)."""
    text = demo.config.read_text()
    text = text.replace("runs = ", "runs = 1000000  # ", 1)
    config = tmp_path / "endless.toml"
    config.write_text(text)
    return config


def test_second_command_on_the_same_repository_refuses_and_leaves_the_first_alone(demo, tmp_path):
    db = tmp_path / "r.sqlite"
    config = _endless_trials(demo, tmp_path)
    cache_dir = load_config(config).cache_dir
    first = Cli("measure", "HEAD", "-m", "baseline", "-c", str(config), "--db", str(db))
    try:
        first.wait_for("run 1:")
        groups = server_groups(cache_dir)
        assert groups and all(group_members(g) for g in groups)
        worktrees = sorted(p.name for p in (cache_dir / "worktrees").iterdir())
        head = subprocess.run(["git", "-C", str(cache_dir / "worktrees" / worktrees[0]), "rev-parse", "HEAD"],
                              capture_output=True, text=True, check=True).stdout
        for command in (["measure", demo.good, "-m", "baseline"], ["run", f"good={demo.good}", f"bad={demo.bad}"], ["gc"]):
            second = run_command(*command, "-c", str(config), "--db", str(tmp_path / "other.sqlite"), timeout=EVENT_TIMEOUT_S)
            assert second.returncode == 4, (command, second.stderr)
            msg = " ".join(second.stderr.split())
            assert f"pid {first.proc.pid}" in msg and "perfbisect measure HEAD" in msg and "--wait" in msg, msg
            assert "killed a server" not in second.stderr
        assert all(group_members(g) for g in groups), "the first command's server was touched"
        assert sorted(p.name for p in (cache_dir / "worktrees").iterdir()) == worktrees
        assert subprocess.run(["git", "-C", str(cache_dir / "worktrees" / worktrees[0]), "rev-parse", "HEAD"],
                              capture_output=True, text=True, check=True).stdout == head
        # The first command's runs kept landing while the others were refused.
        runs_before = rows(db, "select count(*) from runs")[0][0]
        deadline = time.monotonic() + EVENT_TIMEOUT_S
        while rows(db, "select count(*) from runs")[0][0] == runs_before:
            assert time.monotonic() < deadline and first.proc.poll() is None, first.stderr
            time.sleep(0.05)
    finally:
        first.proc.terminate()
        rc = first.finish()
    assert rc == 143, first.stderr
    assert "failed" not in first.stderr.split("Interrupted")[0], first.stderr
    for group in groups:
        assert group_members(group) == []


def test_second_command_with_wait_runs_after_the_first(demo, tmp_path):
    db = tmp_path / "r.sqlite"
    first = Cli("measure", "HEAD", "-m", "baseline", "-c", str(_endless_trials(demo, tmp_path)), "--db", str(db))
    first.wait_for("run 1:")
    second = Cli("measure", "HEAD", "-m", "baseline", "-c", str(demo.config), "--db", str(db), "--wait")
    second.wait_for(f"waiting for pid {first.proc.pid}")
    assert rows(db, "select count(*) from trials") == [(1,)]  # the second has not started a trial
    first.proc.terminate()
    assert first.finish() == 143, first.stderr
    assert second.finish() == 0, second.stderr
    # One after the other: the second's trial began after the first's ended.
    (a_end,), (b_start,) = rows(db, "select finished_at from trials order by id limit 1"), rows(
        db, "select started_at from trials order by id desc limit 1")
    assert b_start >= a_end


def test_resume_refuses_a_bisection_whose_process_is_alive(demo, tmp_path):
    db = tmp_path / "r.sqlite"
    run = Cli("run", f"good={demo.good}", f"bad={demo.bad}", "-c", str(demo.config), "--db", str(db))
    try:
        run.wait_for("(endpoints): ")
        bid = rows(db, "select id from bisections")[0][0]
        # Another cache dir, so the repository lock does not stop it first: the store must.
        other = tmp_path / "other.toml"
        other.write_text(demo.config.read_text().replace("\ncache_dir = ", f"\ncache_dir = {str(tmp_path / 'c')!r}\n# the demo's was: "))
        resumed = run_command("resume", str(bid), "-c", str(other), "--db", str(db), timeout=EVENT_TIMEOUT_S,
                              env={"PERFBISECT_LOCK_DIR": str(tmp_path / "locks")})
        assert resumed.returncode == 2, resumed.stderr
        assert "still running" in resumed.stderr and re.search(rf"\b{run.proc.pid}\b", resumed.stderr)
    finally:
        run.proc.terminate()
        run.finish()
