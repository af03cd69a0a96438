"""The shared results store on a real PostgreSQL server (a throwaway cluster from tests/pg_server.py).

Same models and migrations as SQLite, several OS processes writing at once, the GPU node lock and
owner liveness as advisory locks that hold across hosts, a demo bisection through `--db URL`, and
a clear error for each way a server cannot be used. Every URL carries a password: no message may
show it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select, text

from perfbisect.hook.checkqueue import format_status, status
from perfbisect.config import parse_config
from perfbisect.errors import StoreError
from perfbisect.runtime.locks import LockHeld, exclusive
from perfbisect.model import TrialStatus
from perfbisect.store import is_unfinished, locate, open_store
from perfbisect.store.migrations import current_revision, head_revision, schema_diffs
from perfbisect.store.schema import ObservationRow, RunRow, TrialRow
from tests.pg_server import PASSWORD
from tests.cli_runner import run_cli

ROOT = Path(__file__).resolve().parent.parent
BASE_CONFIG = {"target": {"repo": "."}, "server": {"command": ["python", "-m", "x", "--port", "{port}"]},
               "modes": {"baseline": {}}, "stats": {"metric": "baseline"}}


def _python(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, text=True, **kw)


def _no_password(*texts: str) -> None:
    for t in texts:
        assert PASSWORD not in t, t


def test_migrations_from_empty_reach_head_and_the_schema_equals_the_models(pg_url):
    engine = create_engine(pg_url)
    with engine.connect() as conn:
        assert current_revision(conn) is None
    engine.dispose()
    with open_store(pg_url) as store:
        assert store.shared
        with store.engine.connect() as conn:
            assert conn.dialect.name == "postgresql"
            assert current_revision(conn) == head_revision()
        assert schema_diffs(store.engine) == []
        _no_password(str(store.path))
        assert "***" in str(store.path)


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_several_processes_writing_at_once_lose_nothing(backend, request, tmp_path):
    """Three OS processes open one empty database at once (each migrates it, or waits for the one
    that does), then each stores a bisection of 10 trials × 4 runs + 10 observations, one transaction
    per write, all at the same time: every row is there, ids unique and pointing the right way."""
    db = request.getfixturevalue("pg_url") if backend == "postgresql" else str(tmp_path / "shared.sqlite")
    writers, trials, runs = 3, 10, 4
    go = tmp_path / "go"
    procs = [
        _python("-m", "tests.store_writer", db, f"w{i}", str(trials), str(runs), str(go),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for i in range(writers)
    ]
    time.sleep(1.0)  # let every writer open the store and wait at the gate
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    with open_store(db, recover=False) as store, store.session() as s:
        assert s.execute(text("select count(*) from alembic_version")).scalar() == 1
        assert schema_diffs(store.engine) == []
        stored_trials = {row.id: row for row in s.scalars(select(TrialRow))}
        n_runs = s.scalar(select(func.count()).select_from(RunRow))
        observations = list(s.scalars(select(ObservationRow)))
        print(f"{backend}: {len(stored_trials)} trials, {n_runs} runs, {len(observations)} observations")
        assert len(stored_trials) == writers * trials
        assert n_runs == writers * trials * runs
        assert len(observations) == writers * trials
        claimed = [tid for r in results for tid in r["trials"]]
        assert sorted(claimed) == sorted(stored_trials)  # unique ids, each writer got its own
        for r in results:
            for tid in r["trials"]:
                row = stored_trials[tid]
                assert row.bisection_id == r["bisection"] and row.status == TrialStatus.OK.value
                assert [run.idx for run in row.runs] == list(range(runs))
        for o in observations:
            (tid,) = o.trial_ids
            assert stored_trials[tid].bisection_id == o.bisection_id
            assert stored_trials[tid].commit_sha == o.commit_sha
        assert {(o.bisection_id, o.seq) for o in observations} == {
            (r["bisection"], seq) for r in results for seq in range(trials)
        }


def _holder(*args: str) -> tuple[subprocess.Popen, dict]:
    """A helper process (tests.store_writer hold/node) that holds something until its stdin closes."""
    proc = _python("-m", "tests.store_writer", *args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE)
    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    return proc, json.loads(line)


def test_the_node_lock_is_a_database_lock_that_names_its_holder_and_dies_with_it(pg_url, tmp_path):
    open_store(pg_url).close()
    node = socket.gethostname()  # the node lock's default key: this host's name
    proc, info = _holder("node", pg_url, node)
    try:
        with open_store(pg_url) as store:
            lock = store.node_lock()
            assert lock.node == node and lock.holder().pid == info["pid"]
            with pytest.raises(LockHeld) as refused:
                lock.acquire()
            msg = str(refused.value)
            assert f"pid {info['pid']} on {info['host']}" in msg and f"GPU node {node}" in msg and "--wait" in msg
            assert "store_writer node" in msg or "perfbisect" in msg  # the holder's command line
            _no_password(msg)
            # `perfbisect status` with [store] url says who holds this node.
            cfg = parse_config({**BASE_CONFIG, "target": {"repo": ".", "cache_dir": str(tmp_path / "cache")},
                                "store": {"url": pg_url}}, base_dir=tmp_path)
            (status_line,) = [l for l in format_status(status(cfg)) if l.startswith("GPU node")]
            assert f"held by pid {info['pid']} on {info['host']}" in status_line
            _no_password(status_line)
            # Another node's lock is free: the key is the node's name.
            other = store.node_lock("gpu-node-8")
            other.acquire()
            other.release()
            # Through the command's lock stack: refused the same way, and the repository lock is let go.
            with pytest.raises(LockHeld):
                with exclusive(tmp_path / "cache", repo="r", node_locks=(store.node_lock(),)):
                    pass
            with exclusive(tmp_path / "cache", repo="r", gpu=False):
                pass
            # --wait: told who holds it, then it gets the lock once the holder is killed (no cleanup).
            told, done = [], threading.Event()
            waiter = store.node_lock()

            def wait_for_it() -> None:
                waiter.acquire(wait=True, on_wait=told.append, poll_s=0.1)
                done.set()

            t = threading.Thread(target=wait_for_it, daemon=True)
            t.start()
            deadline = time.monotonic() + 60
            while not told and time.monotonic() < deadline:
                time.sleep(0.05)
            assert told and told[0].pid == info["pid"] and not done.is_set()
            os.kill(proc.pid, signal.SIGKILL)
            assert done.wait(60), "the lock of a killed holder was not released"
            assert waiter.holder().pid == os.getpid()
            waiter.release()
            assert lock.holder() is None
            (status_line,) = [l for l in format_status(status(cfg)) if l.startswith("GPU node")]
            assert status_line.startswith(f"GPU node {node}: free")
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_trial_owned_on_another_host_is_alive_while_its_process_holds_the_store(pg_url, tmp_path):
    open_store(pg_url).close()
    owner = "node-b.cluster:4242:987654"  # no such host or pid here: /proc could not vouch for it
    proc, info = _holder("hold", pg_url, owner)
    try:
        with open_store(pg_url) as store:
            assert store.recovered == ([], [])  # alive elsewhere: nothing marked failed
            assert store.owner_alive(owner)
            (trial,) = store.unfinished_trials()
            assert is_unfinished(trial) and len(trial.runs) == 2
            assert store.latest_unfinished_bisection() is None  # still running there, not resumable
            with pytest.raises(StoreError, match="still running in process 4242 on node-b.cluster"):
                store.resume_bisection(info["bisection"])
    finally:
        proc.stdin.close()  # the other host's perfbisect exits normally
        proc.wait(timeout=30)
    with open_store(pg_url) as store:
        assert not store.owner_alive(owner)
        assert store.recovered == ([info["trial"]], [info["bisection"]])
        assert store.trial(info["trial"]).status == TrialStatus.FAILED
        assert len(store.trial(info["trial"]).runs) == 2  # its runs are kept
        assert store.latest_unfinished_bisection().id == info["bisection"]
    # Two nodes resume that interrupted bisection at the same moment: exactly one gets it. The test
    # holds the bisection's row until both wait on it, so their transactions truly overlap.
    go = tmp_path / "go"
    racers = [_python("-m", "tests.store_writer", "resume", pg_url, str(info["bisection"]), str(go),
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    engine = create_engine(pg_url)
    with engine.connect() as conn:
        conn.execute(text("select id from bisections where id = :i for update"), {"i": info["bisection"]})
        go.touch()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and all(p.poll() is None for p in racers):
            waiting = conn.execute(text("select count(distinct pid) from pg_locks where not granted")).scalar()
            if waiting >= 2:
                break
            time.sleep(0.05)
        assert waiting >= 2, "the two resumers never met at the bisection's row"
        conn.rollback()
    engine.dispose()
    answers = []
    for p in racers:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        answers.append(json.loads(out))
    assert sorted(a["resumed"] for a in answers) == [False, True], answers
    (refusal,) = [a["error"] for a in answers if not a["resumed"]]
    assert "still running in process" in refusal


def test_a_demo_bisection_through_a_postgresql_url_names_the_planted_commit(pg_url, tmp_path):
    demo_dir = tmp_path / "demo"
    started = time.monotonic()
    proc = run_cli("demo", "--json", "--commits", "12", "--dir", str(demo_dir), "--db", pg_url)
    print(f"demo bisection on PostgreSQL: {time.monotonic() - started:.1f} s")
    assert proc.returncode == 0, proc.stderr
    _no_password(proc.stdout, proc.stderr)
    result = json.loads(proc.stdout)
    assert result["planted"] and result["culprit"] == result["planted"]
    assert "***" in result["db"] and result["db"].startswith("postgresql+psycopg://perfbisect:")
    # The report has no file to sit beside: it goes under the config's cache directory.
    report = Path(result["report"])
    assert report.is_file() and report.parent.name == "reports" and not str(report).startswith("postgresql")
    with open_store(pg_url, recover=False) as store:
        (bisection,) = store.bisections()
        assert bisection.outcome.culprit == result["planted"]
        assert len(store.trials(bisection_id=bisection.id, status=None, purpose="bisect")) == result["trials_used"]
        assert len(store.observations(bisection.id)) >= result["trials_used"] // 2
    # A reading command takes the same URL.
    log = run_cli("log", "1", "--db", pg_url, "-c", str(demo_dir / "perfbisect.toml"))
    assert log.returncode == 0, log.stderr
    assert result["planted"][:10] in log.stdout
    _no_password(log.stdout, log.stderr)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode != 0, proc.stdout
    assert proc.stderr.startswith("Error: ") and "Traceback" not in proc.stderr, proc.stderr
    _no_password(proc.stdout, proc.stderr)
    return " ".join(proc.stderr.split())


def test_an_unreachable_server_is_one_clear_error(tmp_path):
    port = _free_port()  # nothing listens there
    msg = _error(run_cli("log", "--db", f"postgresql+psycopg://perfbisect:{PASSWORD}@127.0.0.1:{port}/results", cwd=tmp_path))
    assert f"no PostgreSQL server answers at 127.0.0.1:{port}" in msg and "pg_isready" in msg
    assert "perfbisect:***@127.0.0.1" in msg


def _open_error(db: str) -> str:
    with pytest.raises(StoreError) as err:
        open_store(db).close()
    msg = str(err.value)
    _no_password(msg)
    return msg


def test_wrong_password_missing_database_and_bad_urls_say_what_to_fix(pg_cluster):
    msg = _open_error(pg_cluster.url("postgres", password="not-the-password"))
    assert "refused user 'perfbisect'" in msg and "PGPASSWORD" in msg and "not-the-password" not in msg
    msg = _open_error(pg_cluster.url("no_such_db"))
    assert "no database 'no_such_db'" in msg and "createdb" in msg
    msg = _open_error(f"mysql://perfbisect:{PASSWORD}@127.0.0.1/x")
    assert "'mysql' is not a database" in msg
    msg = _open_error(f"postgresql+psycopg2://perfbisect:{PASSWORD}@127.0.0.1/x")
    assert "psycopg 3" in msg
    msg = _open_error(f"postgresql+psycopg://perfbisect:{PASSWORD}@127.0.0.1:notaport/x")
    assert "Cannot read the results database URL" in msg
    msg = _open_error("sqlite://")
    assert "names no file" in msg


def test_a_missing_driver_says_how_to_install_it(pg_url, monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # `import psycopg` now fails, as where it is not installed
    msg = _open_error(pg_url)
    assert "psycopg 3" in msg and "perfbisect[postgres]" in msg


def test_store_url_in_the_config_and_locations():
    base = BASE_CONFIG
    cfg = parse_config({**base, "store": {"url": "postgresql+psycopg://u@db.example:5433/results"}}, base_dir=Path("/etc/pb"))
    assert cfg.results_db == "postgresql+psycopg://u@db.example:5433/results"
    loc = locate(cfg.results_db)
    assert loc.shared and loc.reports_dir(Path("/c")) == Path("/c/reports")
    cfg = parse_config({**base, "store": {"url": "results/r.sqlite"}}, base_dir=Path("/etc/pb"))
    assert locate(cfg.results_db).path == Path("/etc/pb/results/r.sqlite")
    assert parse_config(base, base_dir=Path("/etc/pb")).results_db == Path("/etc/pb/.git/perfbisect/results.sqlite")
    assert locate("sqlite:////tmp/x/r.sqlite").path == Path("/tmp/x/r.sqlite")
    assert str(locate(f"postgresql://u:{PASSWORD}@h/d")) == "postgresql+psycopg://u:***@h/d"
    assert PASSWORD not in str(locate(f"postgresql+psycopg://u@h/d?password={PASSWORD}"))
