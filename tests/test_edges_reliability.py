"""Honest at the edges (issue #34): what perfbisect does where the machine, the user or the timing is
unkind — a directory it did not make where a worktree goes, a signal in the first moments of a command,
several processes creating one results database at once, a NUL in a configured variable, a full or
closed stdout, the post-pull hook of a target that uses no GPU.

Real components only: git repositories on temp paths, the CLI as a real subprocess where the process
itself is the point (signals, stdout), real SQLite files opened by several real processes.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfbisect.config import load_config
from perfbisect.errors import EXIT_RUNTIME, EXIT_USAGE, ConfigError
from tests.repo_factory import RepoFactory
from tests.cli_runner import run_cli, run_command

# A CPU benchmark: no server, no GPU. BENCH_SLEEP_S slows each run where a test needs the command to last.
BENCH = """\
import json, os, pathlib, time
time.sleep(float(os.environ.get("BENCH_SLEEP_S", "0")))
rate = float(pathlib.Path("rate.txt").read_text())
print(json.dumps({"ops_per_s": rate}))
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """Three commits of a command-workload project: 100, 100, 80 ops/s."""
    r = RepoFactory(tmp_path_factory.mktemp("edges") / "proj")
    shas = [r.commit("c0 base", {"bench.py": BENCH, "rate.txt": "100\n"})]
    shas.append(r.commit("c1 same", {"rate.txt": "100\n", "src/a.py": "a = 1\n"}))
    shas.append(r.commit("c2 slower", {"rate.txt": "80\n", "src/b.py": "b = 1\n"}))
    return r, shas


def command_config(directory: Path, repo: Path, extra: str = "", runs: int = 2) -> Path:
    """A command workload (no [server] table), the fixed layout (always slot 0), its own cache_dir."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "perfbisect.toml"
    config.write_text(
        "[target]\n"
        f"repo = {json.dumps(str(repo))}\n"
        f"python = {json.dumps(sys.executable)}\n"
        f"cache_dir = {json.dumps(str(directory / 'cache'))}\n"
        "[workload]\n"
        'kind = "command"\n'
        'command = ["{python}", "bench.py"]\n'
        'metric = "ops_per_s"\n'
        f"warmup = 0\nruns = {runs}\n"
        "[layout]\nrandomize = false\n"
        "[stats]\nmax_trials_total = 12\n" + extra
    )
    return config


# ------------------------------------------------------------------------------------------------
# 1. A directory perfbisect did not make, where a worktree slot goes, is refused and kept


def _foreign(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "notes.txt").write_text("the user's own notes\n")
    (path / "sub").mkdir()
    (path / "sub" / "data.bin").write_bytes(b"\x00" * 64)
    return path


def test_a_foreign_directory_in_a_worktree_slot_is_refused_and_nothing_is_deleted(project, tmp_path):
    r, shas = project
    config = command_config(tmp_path / "w", r.path)
    slot = _foreign(load_config(config).cache_dir / "worktrees" / "wt0")
    proc = run_cli("measure", shas[0], "-n", "1", "-c", str(config), "--db", str(tmp_path / "r.sqlite"))
    assert proc.returncode == EXIT_USAGE, proc.stdout + proc.stderr
    message = " ".join(proc.stderr.split())
    assert str(slot) in message and "perfbisect did not create" in message
    assert "move it away" in message.lower() and "cache_dir" in message and "Nothing was deleted" in message
    assert len([line for line in proc.stderr.strip().splitlines() if line.startswith("Error:")]) == 1
    # nothing deleted, nothing checked out over it
    assert (slot / "notes.txt").read_text() == "the user's own notes\n"
    assert (slot / "sub" / "data.bin").stat().st_size == 64 and not (slot / ".git").exists()


def test_a_worktree_of_another_repository_in_a_slot_is_refused_too(project, tmp_path):
    """A slot path holding a worktree of some other repository (a cache_dir shared by two targets):
    refused, and the other repository's worktree keeps working."""
    r, shas = project
    config = command_config(tmp_path / "w", r.path)
    slot = load_config(config).cache_dir / "worktrees" / "wt0"
    other = RepoFactory(tmp_path / "other")
    other.commit("other base", {"README": "other\n"})
    slot.parent.mkdir(parents=True)
    other.git("worktree", "add", "-q", "--detach", str(slot))
    proc = run_cli("measure", shas[0], "-n", "1", "-c", str(config), "--db", str(tmp_path / "r.sqlite"))
    assert proc.returncode == EXIT_USAGE, proc.stdout + proc.stderr
    assert str(slot) in " ".join(proc.stderr.split())
    assert (slot / "README").read_text() == "other\n"
    assert str(slot) in other.git("worktree", "list")


def test_what_perfbisect_left_in_a_slot_is_still_reused(project, tmp_path):
    """Its own leftovers are not foreign: an empty slot directory, and one of its worktrees whose
    metadata git has lost, are checked out afresh (and `gc` removes only what is perfbisect's)."""
    from perfbisect.git.gitrepo import TargetRepo
    from perfbisect.git.worktrees import WorktreePool

    r, shas = project
    cache = tmp_path / "cache"
    pool = WorktreePool(TargetRepo(r.path), cache, size=2)
    first = pool.checkout(shas[0], slot=0)
    assert (first / "rate.txt").read_text() == "100\n"
    # git forgets the worktree (its admin directory removed), the directory stays: perfbisect's own
    admin = Path(r.git("rev-parse", "--git-common-dir").strip())
    admin = (admin if admin.is_absolute() else r.path / admin) / "worktrees"
    shutil.rmtree(admin)
    pool.path(1).mkdir(parents=True)  # an empty slot directory: what a killed `worktree add` can leave
    again = WorktreePool(TargetRepo(r.path), cache, size=2)
    assert (again.checkout(shas[2], slot=0) / "rate.txt").read_text() == "80\n"
    assert (again.checkout(shas[1], slot=1) / "rate.txt").read_text() == "100\n"
    foreign = _foreign(cache / "worktrees" / "mine")
    again.gc()
    assert not again.path(0).exists() and not again.path(1).exists()
    assert (foreign / "notes.txt").is_file()  # gc removes worktrees, not what the user put beside them


# ------------------------------------------------------------------------------------------------
# 2. A signal in the first moments of a command: 128 + its number, and a line saying so


def _catches(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (SigCgt in /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
@pytest.mark.parametrize("delay", [0.0, 0.4, 1.2])
@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_a_signal_in_the_first_seconds_exits_128_plus_it_and_says_so(project, tmp_path, sig, code, delay, json_flag):
    """`perfbisect run` signalled as soon as it can catch the signal (and a little later, while it is still
    importing and opening its store): the status is 128 + the signal, and stderr says which signal stopped it
    (with --json, stdout has the one Interrupted object too)."""
    r, shas = project
    config = command_config(tmp_path / "w", r.path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfbisect.cli", "run", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config),
         "--db", str(tmp_path / "r.sqlite"), *json_flag],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "COLUMNS": "300", "BENCH_SLEEP_S": "30"},  # the run cannot finish before the signal
    )
    try:
        deadline = time.monotonic() + 60
        while not _catches(proc.pid, signal.SIGTERM):  # perfbisect's own handler, not the interpreter's
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "perfbisect never installed its signal handlers"
            time.sleep(0.002)
        time.sleep(delay)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, (proc.returncode, err)
    assert f"Interrupted by {signal.Signals(sig).name}" in err, err
    assert "Traceback" not in err, err
    if json_flag:
        data = json.loads(out)
        assert (data["kind"], data["exit_code"]) == ("Interrupted", code), data


# ------------------------------------------------------------------------------------------------
# 3. Several processes creating one new results database at once all open it


def _open_at_once(target: str, paths: list[str], barrier, results) -> None:
    """Open each of ``paths`` in turn, all processes at the same moment (one barrier per path)."""
    from perfbisect.store import open_store
    from perfbisect.store.connections import make_engine

    for path in paths:
        try:
            if target == "engine":
                engine = make_engine(Path(path))  # no connection yet: the first one is made after the barrier
                barrier.wait(timeout=60)
                try:
                    with engine.connect() as conn:
                        conn.exec_driver_sql("SELECT 1").fetchall()
                finally:
                    engine.dispose()
            else:
                barrier.wait(timeout=60)
                with open_store(Path(path)) as store:
                    store.bisections(1)
            results.put((path, "ok"))
        except BaseException as exc:  # what the test reports: every process must succeed
            results.put((path, f"{type(exc).__name__}: {exc}"))


@pytest.mark.parametrize("target, rounds", [("engine", 64), ("store", 6)])
def test_concurrent_first_opens_of_a_new_database_all_succeed(tmp_path, target, rounds):
    """8 processes open the same new SQLite file at the same moment, round after round (the first
    connections switch it to WAL, one of them creates the schema): every one opens it, none calls the
    file locked or damaged."""
    import perfbisect.store.database  # noqa: F401  (imported before the fork: the processes start level)
    import perfbisect.store.migrations  # noqa: F401

    ctx = multiprocessing.get_context("fork")
    paths = [str(tmp_path / f"round{k}" / "results.sqlite") for k in range(rounds)]
    for path in paths:
        Path(path).parent.mkdir()
    barrier, results = ctx.Barrier(8), ctx.Queue()
    procs = [ctx.Process(target=_open_at_once, args=(target, paths, barrier, results)) for _ in range(8)]
    for p in procs:
        p.start()
    got = [results.get(timeout=300) for _ in range(8 * rounds)]
    for p in procs:
        p.join(timeout=60)
    assert [f"{Path(path).parent.name}: {what}" for path, what in got if what != "ok"] == []
    if target == "store":
        for path in paths:
            with sqlite3.connect(path) as con:
                assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
                assert len(con.execute("SELECT version_num FROM alembic_version").fetchall()) == 1


def _open_and_report(target: str, path: str, results) -> None:
    _open_at_once(target, [path], _NoBarrier(), results)


class _NoBarrier:
    def wait(self, timeout: float | None = None) -> None:
        return None


@pytest.mark.parametrize("target", ["engine", "store"])
def test_a_first_open_waits_while_another_process_is_creating_the_file(tmp_path, target):
    """The race above, held open: one process has begun writing the new, still empty file (it holds
    the write lock, as a first open switching the file to WAL does) when another opens it. The second
    waits for the lock and opens the file; SQLite would refuse its own switch to WAL at once."""
    import perfbisect.store.database  # noqa: F401
    import perfbisect.store.migrations  # noqa: F401

    path = tmp_path / "results.sqlite"
    # The other process, half-way through its first write of the file (a process of its own: SQLite's
    # locks are per process, and a forked child must not inherit an open connection).
    first = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys\n"
         "con = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
         "con.execute('BEGIN IMMEDIATE')\nprint('held', flush=True)\nsys.stdin.readline()\ncon.rollback()\n",
         str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert first.stdout.readline().strip() == "held"
        ctx = multiprocessing.get_context("fork")
        results = ctx.Queue()
        second = ctx.Process(target=_open_and_report, args=(target, str(path), results))
        second.start()
        time.sleep(1.0)
        assert second.is_alive(), results.get(timeout=5)  # waiting for the lock, not refused
    finally:
        first.communicate("go\n", timeout=30)
    assert results.get(timeout=120) == (str(path), "ok")
    second.join(timeout=60)


def test_a_database_locked_longer_than_the_timeout_is_not_called_damaged(tmp_path):
    """A file another process keeps write-locked past the busy timeout: the error says it is locked and
    by whom to wait for, never "damaged" or "move it aside"."""
    from perfbisect.errors import StoreError
    from perfbisect.store import open_store

    path = tmp_path / "results.sqlite"
    open_store(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode = DELETE")  # a rollback journal: an exclusive lock stops readers too
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError) as err:
            open_store(path, busy_timeout_s=0.3)
    finally:
        holder.rollback()
        holder.close()
    message = str(err.value)
    assert "stayed locked" in message and "is damaged" not in message and "do not move it aside" in message
    assert str(path) in message


# ------------------------------------------------------------------------------------------------
# 4. A NUL in a variable's value, or '=' in its name: a config error naming the file, the key, the fix


@pytest.mark.parametrize("table, key, value", [
    ("server.env", "NCCL_DEBUG", '"IN\\u0000FO"'),
    ("modes.baseline.env", "OMP_NUM_THREADS", '"4\\u0000"'),
    ("server.env", '"A=B"', '"1"'),
    ("modes.baseline.env", '""', '"1"'),
])
def test_an_env_value_with_nul_or_a_name_with_equals_is_a_config_error(project, tmp_path, table, key, value):
    r, shas = project
    config = command_config(tmp_path / "w", r.path)
    config.write_text(config.read_text() + f"[{table}]\n{key} = {value}\n")
    with pytest.raises(ConfigError) as err:
        load_config(config)
    message = str(err.value)
    shown = key.strip('"')
    assert str(config) in message and f"{table}" in message and (shown in message if shown else "empty" in message)
    assert "Fix" in message or "fix" in message
    # and through the CLI: exit 2 before anything runs, never "unexpected ValueError"
    proc = run_cli("measure", shas[0], "-n", "1", "-c", str(config), "--db", str(tmp_path / "r.sqlite"))
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert "unexpected" not in proc.stderr and "ValueError" not in proc.stderr
    assert not (tmp_path / "r.sqlite").exists()


def test_a_nul_in_a_command_argument_is_a_config_error(project, tmp_path):
    r, shas = project
    config = command_config(tmp_path / "w", r.path)
    config.write_text(config.read_text().replace('command = ["{python}", "bench.py"]',
                                                 'command = ["{python}", "bench.py\\u0000--fast"]'))
    with pytest.raises(ConfigError) as err:
        load_config(config)
    assert str(config) in str(err.value) and "workload.command" in str(err.value) and "NUL" in str(err.value)
    proc = run_cli("measure", shas[0], "-n", "1", "-c", str(config), "--db", str(tmp_path / "r.sqlite"))
    assert proc.returncode == EXIT_USAGE and "ValueError" not in proc.stderr, proc.stderr


# ------------------------------------------------------------------------------------------------
# 5. A stdout that cannot be written: exit 4 with a message on stderr, never 1 ("regression found")


def _stored(tmp_path: Path) -> Path:
    """A results database (empty: `log` still prints that it holds nothing) for commands that print what is stored."""
    from perfbisect.store import open_store

    db = tmp_path / "r.sqlite"
    open_store(db).close()
    return db


@pytest.mark.parametrize("args", [["log"], ["log", "--json"], ["plan"], ["plan", "--json"]])
def test_a_full_stdout_exits_4_with_a_message(project, tmp_path, args):
    r, shas = project
    config = command_config(tmp_path / "w", r.path)
    db = _stored(tmp_path)
    words = [args[0], *([f"good={shas[0]}", f"bad={shas[-1]}"] if args[0] == "plan" else []), *args[1:]]
    with open("/dev/full", "w") as full:
        proc = run_command(*words, "-c", str(config), "--db", str(db), stdout=full)
    assert proc.returncode == EXIT_RUNTIME, (proc.returncode, proc.stderr)
    message = " ".join(proc.stderr.split())
    assert "standard output" in message and "No space left on device" in message, message
    assert "Traceback" not in proc.stderr and "unexpected" not in message and "bug" not in message
    assert message.count("Error:") == 1


def test_a_closed_stdout_exits_0_quietly(project, tmp_path):
    """The reader of a pipe went away (`perfbisect log | head -0`, `perfbisect --help | head`): its choice, not an
    error (issue #49; it was exit 4 with a paragraph): exit 0, nothing on stderr, nothing lost."""
    r, shas = project
    config = command_config(tmp_path / "w", r.path)
    db = _stored(tmp_path)
    read, write = os.pipe()
    os.close(read)
    try:
        proc = run_command("log", "-c", str(config), "--db", str(db), stdout=write)
    finally:
        os.close(write)
    assert proc.returncode == 0 and proc.stderr == "", (proc.returncode, proc.stderr)
    read, write = os.pipe()
    os.close(read)
    try:
        helped = run_command("--help", stdout=write)
    finally:
        os.close(write)
    assert helped.returncode == 0 and helped.stderr == "", (helped.returncode, helped.stderr)


# ------------------------------------------------------------------------------------------------
# 6. The post-pull check of a command target never waits for GPUs


def test_the_hook_check_of_a_command_target_never_waits_for_gpus(project, tmp_path):
    from perfbisect.hook.checkqueue import LOG, CheckQueue, hook_dir

    r, shas = project
    config = command_config(tmp_path / "w", r.path, '[hook]\naction = "check"\nidle_s = 600\n', runs=1)
    cfg = load_config(config)
    queue = CheckQueue(hook_dir(cfg.cache_dir))
    queue.append(shas[0], shas[-1], "manual")
    proc = subprocess.Popen([sys.executable, "-m", "perfbisect.cli", "check", "--drain", "-c", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "300"})
    log = queue.path(LOG)
    try:
        deadline = time.monotonic() + 400  # a bound on a hang; a check of 3 commits takes seconds
        while proc.poll() is None:
            status = json.loads(run_command("status", "--json", "-c", str(config)).stdout or "{}")
            detail = json.dumps(status.get("worker", {}))
            assert "GPU" not in detail, f"a command target waits for GPUs: {detail}"
            assert time.monotonic() < deadline, "the check did not finish"
            time.sleep(0.3)
        output = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, output
    assert "GPUs" not in output and (not log.exists() or "GPUs" not in log.read_text())
    history = [json.loads(line) for line in (hook_dir(cfg.cache_dir) / "history.jsonl").read_text().splitlines()]
    assert len(history) == 1 and history[0]["new"] == shas[-1] and history[0]["verdict"] != "error", history


# ------------------------------------------------------------------------------------------------
# 7. The Markdown summary: perfbisect's own commands in code spans, counts in the right number


def test_the_markdown_summary_shows_commands_as_code_and_counts_in_the_singular(tmp_path):
    """`run --format markdown` over a range with one docs-only commit: "1 commit", not "1 commits", and
    the report's command as a code span, not as escaped backticks (\\`perfbisect report 1\\`)."""
    r = RepoFactory(tmp_path / "proj")
    shas = [r.commit("c0 base", {"bench.py": BENCH, "rate.txt": "100\n"})]
    shas.append(r.commit("c1 docs", {"docs/guide.md": "how\n"}))
    shas.append(r.commit("c2 slower", {"rate.txt": "70\n"}))
    config = command_config(tmp_path / "w", r.path, '[filters]\nignore = ["docs/**"]\n')
    proc = run_command("run", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(config), "--db", str(tmp_path / "r.sqlite"),
               "--format", "markdown", timeout=540)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "| not measured | 1 commit (only paths the filters ignore) |" in text, text
    assert "\\`" not in text, text
    assert "`perfbisect report 1` writes it again" in text, text
    assert not re.search(r"\b1 (commits|trials|runs|files)\b", text), text
