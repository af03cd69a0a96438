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
from tests.cli_runner import run_command

ROOT = Path(__file__).resolve().parent.parent


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


# ---------------------------------------------------------------------------------------------
# Item 7: the smaller findings


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from perfbisect.demo.target import make_demo_target

    return make_demo_target(tmp_path_factory.mktemp("hostile-input") / "demo", commits=10)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    from perfbisect.demo.results import make_results

    return make_results(tmp_path_factory.mktemp("hostile-results") / "r", commits=10, trials=30)


def _edited(demo, tmp_path: Path, old: str, new: str) -> Path:
    text = demo.config.read_text()
    assert old in text, old
    config = tmp_path / "perfbisect.toml"
    config.write_text(text.replace(old, new, 1))
    return config


def test_a_full_disk_is_not_reported_as_a_damaged_database(tmp_path):
    from sqlalchemy import text

    from perfbisect.errors import StoreWriteError
    from perfbisect.store import open_store

    store = open_store(tmp_path / "r.sqlite")
    try:
        with pytest.raises(StoreWriteError) as err:
            with store.session(write=True) as s:
                # A real "database or disk is full" from SQLite: the file may not grow past its pages.
                pages = s.execute(text("PRAGMA page_count")).scalar()
                s.execute(text(f"PRAGMA max_page_count = {pages + 2}"))
                s.execute(text("CREATE TABLE filler (x BLOB)"))
                for _ in range(50):
                    s.execute(text("INSERT INTO filler VALUES (randomblob(65536))"))
    finally:
        store.close()
    message = " ".join(str(err.value).split())
    assert "database or disk is full" in message and "is full or failing" in message
    assert "not damaged" in message and "do not move it aside" in message
    assert err.value.exit_code == 4


@pytest.mark.parametrize("encoding", ["utf-16", "binary"])
def test_a_utf16_or_binary_config_is_exit_2(demo, tmp_path, encoding):
    config = tmp_path / "perfbisect.toml"
    if encoding == "binary":
        config.write_bytes(b"[target]\nrepo = \"\xff\xfe\x00\x81\"\n")
    else:
        config.write_bytes(demo.config.read_text().encode("utf-16"))
    proc = run_command("plan", f"good={demo.good}", f"bad={demo.bad}", "-c", str(config))
    text = one_line(proc)
    assert proc.returncode == 2, text
    assert ("UTF-16" if encoding == "utf-16" else "not UTF-8") in text and "must be UTF-8" in text


@pytest.mark.parametrize("old, new, needle", [
    ("min_effect_pct = 3.0", "min_effect_pct = nan", "'stats.min_effect_pct' is nan, not a finite number"),
    ("min_effect_pct = 3.0", "min_effect_pct = 3.0\nprior_sigma_pct = inf", "'stats.prior_sigma_pct' is inf"),
    ("min_effect_pct = 3.0", "min_effect_pct = 3.0\nprior_sigma_pct = 1e30", "'stats.prior_sigma_pct' is 1e+30, beyond"),
    ("min_effect_pct = 3.0", "min_effect_pct = 3.0\nmax_trials_total = 1000000000000000000", "'stats.max_trials_total' is 1000000000000000000, beyond"),
    ("[workload]", "[workload]\nrequest_timeout_s = 1e30", "'workload.request_timeout_s' is 1e+30, beyond"),
    ("[workload]", "[workload]\nrequest_timeout_s = -inf", "'workload.request_timeout_s' is -inf"),
])
def test_non_finite_and_absurd_config_numbers_are_exit_2(demo, tmp_path, old, new, needle):
    config = _edited(demo, tmp_path, old, new)
    proc = run_command("plan", f"good={demo.good}", f"bad={demo.bad}", "-c", str(config))
    text = one_line(proc)
    assert proc.returncode == 2, text
    assert needle in text


@pytest.mark.parametrize("args, needle", [
    (["run", "good={good}", "bad={bad}", "--wait-idle", "nan"], "'--wait-idle'"),  # typer's min=0 refuses it first
    (["run", "good={good}", "bad={bad}", "--wait-idle", "inf"], "--wait-idle is inf"),
    (["run", "good={good}", "bad={bad}", "--wait-idle", "1e30"], "--wait-idle is 1e+30, beyond"),
    (["measure", "-n", "1" + "0" * 30], "--trials/-n is an integer of 31 digits, beyond"),
    (["plan", "good={good}", "bad={bad}", "--effect", "nan"], "--effect is nan"),
    (["calibrate", "-n", "1" + "0" * 30], "beyond any sensible value"),
])
def test_non_finite_and_absurd_flags_are_exit_2(demo, tmp_path, args, needle):
    argv = [a.format(good=demo.good, bad=demo.bad) for a in args]
    proc = run_command(*argv, "-c", str(demo.config), "--db", str(tmp_path / "r.sqlite"))
    text = one_line(proc)
    assert proc.returncode == 2, text
    assert needle in text
    assert not (tmp_path / "r.sqlite").exists()  # refused before anything was opened


def test_report_into_an_existing_directory_writes_there_and_leaves_no_tmp(results, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    proc = run_command("report", "latest", "-o", str(out), "--db", str(results.db))
    assert proc.returncode == 0, one_line(proc)
    written = sorted(p.name for p in out.iterdir())
    assert len(written) == 1 and written[0].endswith(".html") and not written[0].startswith(".")


def test_report_to_an_unwritable_path_is_a_clear_error_without_tmp(results, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory\n")
    proc = run_command("report", "latest", "-o", str(blocker / "x.html"), "--db", str(results.db))
    text = one_line(proc)
    assert proc.returncode == 2, text
    assert "Cannot write the report" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_hook_install_checks_everything_before_replacing_anything(demo, tmp_path):
    from perfbisect.hook import hook
    from perfbisect.errors import UsageError

    repo = tmp_path / "clone"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    hooks = repo / ".git" / "hooks"
    hooks.mkdir(parents=True, exist_ok=True)
    (hooks / "post-merge").write_text("#!/bin/sh\necho mine\n")
    (hooks / "post-rewrite").write_text("#!/bin/sh\necho also mine\n")
    (hooks / "post-rewrite.perfbisect-orig").write_text("#!/bin/sh\necho stale\n")
    before = {p.name: p.read_bytes() for p in hooks.iterdir()}
    with pytest.raises(UsageError, match="no hook was changed"):
        hook.install(repo, demo.config, python=sys.executable)
    assert {p.name: p.read_bytes() for p in hooks.iterdir()} == before


def test_good_given_twice_is_refused(demo):
    proc = run_command("plan", f"good={demo.good}", f"bad={demo.bad}", "--good", demo.bad, "-c", str(demo.config))
    text = one_line(proc)
    assert proc.returncode == 2, text
    assert "given twice" in text and "--good" in text


def test_an_empty_db_is_refused(demo, tmp_path):
    proc = run_command("log", "--db", "", "-c", str(demo.config))
    text = one_line(proc)
    assert proc.returncode == 2, text
    assert "--db is empty" in text


def test_a_plain_string_notify_command_is_refused(demo, tmp_path):
    config = tmp_path / "perfbisect.toml"
    config.write_text(demo.config.read_text() + '\n[hook]\nnotify_command = "notify-send {line}"\n')
    proc = run_command("plan", f"good={demo.good}", f"bad={demo.bad}", "-c", str(config))
    text = one_line(proc)
    assert proc.returncode == 2, text
    assert "'hook.notify_command'" in text and "list of arguments" in text


def _make_read_only(*paths: Path) -> list[Path]:
    """Make ``paths`` unwritable for this user; the paths to give back (root ignores file modes, so
    as root they are made immutable, which binds root too)."""
    if os.geteuid() != 0:
        for p in paths:
            p.chmod(0o555 if p.is_dir() else 0o444)
        return []
    done = []
    for p in paths:
        if subprocess.run(["chattr", "+i", str(p)], capture_output=True).returncode != 0:
            pytest.skip("root here cannot make a file read-only (no chattr +i)")
        done.append(p)
    return done


def test_log_and_report_read_a_read_only_database(results, tmp_path):
    import shutil

    ro = tmp_path / "ro"
    ro.mkdir()
    db = ro / "results.sqlite"
    shutil.copy(results.db, db)
    before = db.read_bytes()
    locked = _make_read_only(db, ro)
    try:
        proc = run_command("log", "--db", str(db), cwd=tmp_path)
        assert proc.returncode == 0, one_line(proc)
        assert "#" in proc.stdout or "bisection" in proc.stdout.lower()
        proc = run_command("report", "latest", "--db", str(db), "-o", str(tmp_path / "r.html"), cwd=tmp_path)
        assert proc.returncode == 0, one_line(proc)
        assert (tmp_path / "r.html").is_file()
        assert db.read_bytes() == before and sorted(p.name for p in ro.iterdir()) == ["results.sqlite"]
    finally:
        for p in locked:
            subprocess.run(["chattr", "-i", str(p)], check=False)


# ---------------------------------------------------------------------------------------------
# GPUs taken by another process mid-run (through the busy check's seam: there is no GPU here)

BENCH = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    tmp = Path(sys.argv[1])
    if not (tmp / "took-gpus").exists():  # the first invocation: a neighbour's job takes the GPUs
        (tmp / "took-gpus").write_text("")
        (tmp / "gpu-busy").write_text("4242\\n")
    print(json.dumps({"tok_s": 100.0}))
""")


def _gpu_config(demo, tmp_path: Path) -> Path:
    (tmp_path / "bench.py").write_text(BENCH)
    text = demo.config.read_text()
    for old, new in (('[workload]\nkind = "sglang"', f'[workload]\nkind = "command"\ncommand = ["{{python}}", "{tmp_path}/bench.py", "{tmp_path}"]\nmetric = "tok_s"'),
                     ('metric = "eagle3"', 'metric = "baseline"')):
        assert old in text, old
        text = text.replace(old, new, 1)
    config = tmp_path / "perfbisect.toml"
    config.write_text(text)
    return config


def test_gpus_taken_mid_run_are_waited_for_then_the_run_finishes(demo, tmp_path):
    import json
    import time

    config = _gpu_config(demo, tmp_path)
    env = {**os.environ, "COLUMNS": "300", "PERFBISECT_FAKE_GPU_BUSY_FILE": str(tmp_path / "gpu-busy")}
    proc = subprocess.Popen([sys.executable, "-m", "perfbisect.cli", "measure", "-m", "baseline", "-n", "2",
                             "--wait-idle", "3600", "--json", "-c", str(config), "--db", str(tmp_path / "r.sqlite")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    try:
        waiting = None
        for _ in range(600):
            status = run_command("status", "--json", "-c", str(config), env={"PERFBISECT_FAKE_GPU_BUSY_FILE": str(tmp_path / "gpu-busy")})
            state = json.loads(status.stdout)
            if state.get("gpu_wait"):
                waiting = state["gpu_wait"]
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.5)
        assert waiting is not None and waiting["pid"] == proc.pid and "pid 4242" in waiting["who"]
        lines = run_command("status", "-c", str(config)).stdout
        assert f"waiting for the GPUs (pid {proc.pid}): pid 4242" in " ".join(lines.split())
        (tmp_path / "gpu-busy").unlink()  # the neighbour's job ended
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    flat = " ".join(err.split())
    assert "waiting for the GPUs: pid 4242" in flat and "GPUs free again after" in flat
    trials = json.loads(out)["trials"]["baseline"]
    assert len(trials) == 2  # both measured: the second after the wait
    assert json.loads(run_command("status", "--json", "-c", str(config)).stdout)["gpu_wait"] is None


def test_wait_idle_0_keeps_the_refusal(demo, tmp_path):
    config = _gpu_config(demo, tmp_path)
    (tmp_path / "took-gpus").write_text("")
    (tmp_path / "gpu-busy").write_text("4242\n")
    proc = run_command("measure", "-m", "baseline", "-n", "2", "--wait-idle", "0", "-c", str(config), "--db", str(tmp_path / "r.sqlite"),
               cwd=tmp_path, env={"PERFBISECT_FAKE_GPU_BUSY_FILE": str(tmp_path / "gpu-busy")})
    text = one_line(proc)
    assert proc.returncode == 4, text
    assert "Other processes hold the GPUs" in text and "pid 4242" in text and "perfbisect resume" in text
