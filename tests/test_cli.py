"""Bad input gets one clear paragraph on stderr (problem + fix), exit status 2, and loses nothing.

These run the real `perfbisect` CLI against a real demo repository, in this process through its error
boundary (tests/cli_runner.py); the first test also runs the installed command.
"""

from __future__ import annotations

import socket
import sqlite3
import subprocess
from pathlib import Path

import pytest

from perfbisect.demo.target import make_demo_target
from tests.cli_runner import run_cli, run_command


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return make_demo_target(tmp_path_factory.mktemp("cli") / "demo", commits=12)


def error_of(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr.startswith("Error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return " ".join(proc.stderr.split())


def test_help_has_examples_on_every_command():
    top = run_command("--help")
    assert top.returncode == 0 and "perfbisect run good=bba2fc4 bad=HEAD" in top.stdout
    for command in ("run", "resume", "demo", "plan", "measure", "compare", "calibrate", "doctor", "init", "log", "gc", "report"):
        proc = run_cli(command, "--help")
        assert proc.returncode == 0, command
        assert "Example:" in proc.stdout, command
    assert "Example:" in run_cli("patches", "check", "--help").stdout


def test_unknown_revision(demo):
    msg = error_of(run_cli("run", "good=nosuchrev", "bad=HEAD", "-c", str(demo.config)))
    assert "nosuchrev" in msg and str(demo.repo) in msg


def test_good_equals_bad(demo):
    msg = error_of(run_cli("run", "good=HEAD", "bad=HEAD", "-c", str(demo.config)))
    assert "same commit" in msg


def test_good_not_ancestor_of_bad(demo):
    msg = error_of(run_cli("run", f"good={demo.bad}", f"bad={demo.good}", "-c", str(demo.config)))
    assert "ancestor" in msg and ("swap" in msg.lower() or "merge-base" in msg)


def test_range_syntax(demo):
    msg = error_of(run_cli("run", "good:HEAD~2", "-c", str(demo.config)))
    assert "good=REV bad=REV" in msg
    msg = error_of(run_cli("run", "good=HEAD~2", "-c", str(demo.config)))
    assert "bad revision is missing" in msg


def test_missing_and_malformed_config(tmp_path):
    msg = error_of(run_cli("run", "good=a", "bad=b", "-c", str(tmp_path / "nope.toml")))
    assert "No config file" in msg and "perfbisect init" in msg
    bad = tmp_path / "perfbisect.toml"
    bad.write_text("[server\ncommand = 1\n")
    msg = error_of(run_cli("run", "good=a", "bad=b", "-c", str(bad)))
    assert "not valid TOML" in msg and str(bad) in msg
    bad.write_text('[server]\ncommand = ["x", "{port}"]\n[workload]\nrunz = 3\n')
    msg = error_of(run_cli("run", "good=a", "bad=b", "-c", str(bad)))
    assert "unknown key 'runz' in [workload]" in msg


def test_config_from_environment_variable(demo, tmp_path):
    proc = run_cli("plan", f"good={demo.good}", "bad=HEAD", cwd=tmp_path, env={"PERFBISECT_CONFIG": str(demo.config)})
    assert proc.returncode == 0, proc.stderr
    assert "to measure" in proc.stdout


def _variant(demo, tmp_path: Path, old: str, new: str) -> Path:
    path = tmp_path / "perfbisect.toml"
    text = demo.config.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return path


def test_server_command_not_found(demo, tmp_path):
    config = _variant(demo, tmp_path, 'command = ["{python}", "-m", "perfbisect.demo.emulator"',
                      'command = ["/opt/no-such/sglang-server", "-m", "perfbisect.demo.emulator"')
    db = tmp_path / "r.sqlite"
    msg = error_of(run_cli("run", f"good={demo.good}", "bad=HEAD", "-c", str(config), "--db", str(db)))
    assert "/opt/no-such/sglang-server" in msg and "server.command" in msg


def test_port_already_in_use(demo, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        config = _variant(demo, tmp_path, "ready_timeout_s = 60", f"ready_timeout_s = 60\nport = {port}")
        msg = error_of(run_cli("measure", "HEAD", "-c", str(config), "--db", str(tmp_path / "r.sqlite")))
    assert f"Port {port}" in msg and "server.port = 0" in msg


def test_errors_keep_stored_results(demo, tmp_path):
    """A stored result survives a later command that fails on bad input."""
    db = tmp_path / "r.sqlite"
    ok = run_cli("measure", "HEAD", "--mode", "baseline", "-c", str(demo.config), "--db", str(db), "-q")
    assert ok.returncode == 0, ok.stderr
    before = sqlite3.connect(db).execute("select count(*) from runs").fetchone()[0]
    error_of(run_cli("run", "good=nosuchrev", "bad=HEAD", "-c", str(demo.config), "--db", str(db)))
    after = sqlite3.connect(db).execute("select count(*) from runs").fetchone()[0]
    assert before == after > 0
    log = run_cli("log", "-c", str(demo.config), "--db", str(db))
    assert log.returncode == 0


def test_not_a_database(demo, tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_text("this is not sqlite")
    msg = error_of(run_cli("log", "--db", str(junk), "-c", str(demo.config)))
    assert str(junk) in msg
    assert junk.read_text() == "this is not sqlite"


def test_init_writes_a_valid_sglang_config(tmp_path):
    # The NCCL tuning written is what this environment sets (here: one variable), not one node's.
    proc = run_cli("init", "--path", str(tmp_path / "perfbisect.toml"), "--model", "/m/kimi", "--draft", "/m/eagle",
               env={"NCCL_ALGO": "Tree"})
    assert proc.returncode == 0, proc.stderr
    from perfbisect.config import load_config

    cfg = load_config(tmp_path / "perfbisect.toml")
    assert "--tp-size" in cfg.server.command and "8" in cfg.server.command
    assert cfg.server.env["NCCL_ALGO"] == "Tree" and "NCCL_NTHREADS" not in cfg.server.env
    assert cfg.modes["eagle3"].args[:2] == ("--speculative-algorithm", "EAGLE3")
    assert "/m/eagle" in cfg.modes["eagle3"].args
    assert (cfg.workload.warmup, cfg.workload.runs, cfg.workload.max_tokens) == (2, 5, 2048)
    from perfbisect.git.targets import active_filters

    assert "docs/**" in active_filters(cfg).patterns
    again = run_cli("init", "--path", str(tmp_path / "perfbisect.toml"))
    assert again.returncode == 2 and "--force" in again.stderr
