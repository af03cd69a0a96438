"""Shared fixtures: the demo emulator as a real subprocess on 127.0.0.1.

``emulator_worktree(name, DECODE_STEP_MS=1.0, ...)`` makes a minimal checkout whose
``python/sglang`` code sets the emulator's speed; ``start_emulator(worktree, *flags, env=...)``
launches ``python -m perfbisect.demo.emulator`` in its own process group on a free port, waits for
``/health_generate`` (unless ``wait_ready=False``) and kills the whole group at teardown.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import httpx
import pytest
from tests.cli_runner import run_command

# Quiet, deterministic-enough defaults: tests that want drift or jitter set them explicitly.
EMULATOR_TEST_ENV = {
    "PERFBISECT_DEMO_SESSION_SIGMA": "0",
    "PERFBISECT_DEMO_RUN_SIGMA": "0",
}


@pytest.fixture(autouse=True, scope="session")
def private_node_lock_for_the_session(tmp_path_factory):
    """Module- and session-scoped fixtures (a demo run shared by a module's tests) start before the
    per-test lock below: give them a private node lock too, so no fixture queues behind (or is
    refused by) a perfbisect running elsewhere on this machine."""
    old = os.environ.get("PERFBISECT_LOCK_DIR")
    os.environ["PERFBISECT_LOCK_DIR"] = str(tmp_path_factory.mktemp("session-node-lock"))
    yield
    if old is None:
        os.environ.pop("PERFBISECT_LOCK_DIR", None)
    else:
        os.environ["PERFBISECT_LOCK_DIR"] = old


@pytest.fixture(autouse=True)
def private_node_lock(tmp_path_factory, monkeypatch):
    """Each test gets its own GPU-node lock file, so tests never queue behind a perfbisect (or
    another test session) running elsewhere on this machine."""
    monkeypatch.setenv("PERFBISECT_LOCK_DIR", str(tmp_path_factory.mktemp("node-lock")))


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A real single-node Slurm (munged, slurmctld, slurmd) for this session (tests/slurm_setup.py)."""
    from tests.slurm_setup import missing_binaries, running_cluster

    missing = missing_binaries()
    if missing:
        pytest.skip(f"Slurm is not installed here (no {', '.join(missing)}): apt-get install slurm-wlm munge")
    if os.geteuid() != 0:
        pytest.skip("a sandbox slurmd runs jobs as their user and needs root")
    with running_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


@dataclass(frozen=True)
class DemoRun:
    """`perfbisect demo --json --seeded --dir DIR` run once for the session: the planted regression bisected."""

    dir: Path
    proc: subprocess.CompletedProcess
    result: dict


def _once_per_run(tmp_path_factory, name: str, compute: Callable[[Path], dict]) -> tuple[Path, dict]:
    """``compute(directory)`` run once for the whole test run, however many pytest-xdist workers ask:
    the first takes a lock in the run's shared temporary directory, computes, and writes the JSON-able
    result beside its directory; the others wait on the lock and read it. Without xdist: computed here."""
    import fcntl

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        directory = tmp_path_factory.mktemp(name)
        return directory, compute(directory)
    root = tmp_path_factory.getbasetemp().parent  # shared by the run's workers
    directory, record = root / name, root / f"{name}.json"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not record.exists():
            directory.mkdir()
            record.write_text(json.dumps(compute(directory)))
    return directory, json.loads(record.read_text())


def _completed(data: dict) -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess(data["args"], data["returncode"], data["stdout"], data["stderr"])


def _ran(proc: subprocess.CompletedProcess) -> dict:
    return {"args": [str(a) for a in proc.args], "returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory, private_node_lock_for_the_session) -> DemoRun:
    """One real `perfbisect demo --seeded` (36 commits, planted slowdown) shared by the tests that read
    what it leaves: its JSON and progress, its database, report and directory. Tests must not add to its
    database (copy it first, as test_pipeline does): others count its bisections. One for the whole
    run, whichever xdist worker gets there first (``_once_per_run``).

    Seeded (perfbisect/demo/seeded.py: each trial's speed computed from the code, with seeded noise),
    so it names the planted commit on a busy machine too; timing the emulator under CPU contention
    once ended it inconclusive and failed every test that reads it."""

    def compute(base: Path) -> dict:
        proc = run_command("demo", "--json", "--seeded", "--dir", str(base / "demo"), timeout=600)
        return _ran(proc)

    base, data = _once_per_run(tmp_path_factory, "demo-run", compute)
    proc = _completed(data)
    assert proc.returncode == 0, proc.stderr
    return DemoRun(base / "demo", proc, json.loads(proc.stdout))


@dataclass(frozen=True)
class Compared:
    """`perfbisect compare GOOD PLANTED --max-trials 6 --json` on a 10-commit demo, run once."""

    target: object  # perfbisect.demo.target.DemoTarget
    db: Path
    proc: subprocess.CompletedProcess
    result: dict

    def db_copy(self, where: Path) -> Path:
        """A copy of the database as the comparison left it, for a test to add to."""
        import sqlite3

        copy = where / "compared.sqlite"
        with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True) as src, sqlite3.connect(copy) as dst:
            src.backup(dst)
        return copy


@pytest.fixture(scope="session")
def compared_demo(tmp_path_factory, private_node_lock_for_the_session) -> Compared:
    """One real comparison across the demo's planted commit, shared by test_pipeline and test_report
    (each adds to its own copy of the database), once per run (``_once_per_run``). Seeded
    measurement: its verdict does not depend on the machine's load."""
    from perfbisect.demo.target import make_demo_target

    def compute(base: Path) -> dict:
        target = make_demo_target(base / "demo", commits=10, seeded=True)
        proc = run_command("compare", target.good, target.planted, "--max-trials", "6", "-c", str(target.config),
                           "--db", str(base / "r.sqlite"), "--json", timeout=600)
        return {"proc": _ran(proc), "target": {k: str(v) if isinstance(v, Path) else v
                                                for k, v in dataclasses.asdict(target).items()}}

    base, data = _once_per_run(tmp_path_factory, "compared", compute)
    proc = _completed(data["proc"])
    assert proc.returncode == 0, proc.stderr
    from perfbisect.demo.target import DemoTarget

    paths = {f.name for f in dataclasses.fields(DemoTarget) if "Path" in str(f.type)}
    target = DemoTarget(**{k: Path(v) if k in paths and v is not None else v for k, v in data["target"].items()})
    return Compared(target, base / "r.sqlite", proc, json.loads(proc.stdout))


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class EmulatorProcess:
    """A running emulator subprocess (its own process group)."""

    proc: subprocess.Popen
    port: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"emulator exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.base_url + "/health_generate", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"emulator not ready after {timeout} s:\n{self.log()}")

    def kill_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def write_emulator_code(worktree: Path, **knobs: object) -> Path:
    """Write the speed knobs (DECODE_STEP_MS=..., EAGLE3_CAPTURE_FIX=False, ...) into the worktree's code."""
    path = worktree / "python" / "sglang" / "srt" / "emulated_speed.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{name} = {value!r}\n" for name, value in knobs.items()))
    return worktree


@pytest.fixture
def emulator_worktree(tmp_path: Path) -> Callable[..., Path]:
    """Factory: a minimal checkout whose code sets the emulator's speed (STARTUP_S defaults to 0.05)."""

    def make(name: str = "wt", **knobs: object) -> Path:
        knobs.setdefault("STARTUP_S", 0.05)
        return write_emulator_code(tmp_path / name, **knobs)

    return make


@pytest.fixture
def start_emulator(tmp_path: Path) -> Callable[..., EmulatorProcess]:
    """Factory: launch the emulator on a free port; every one started is killed (whole group) at teardown."""
    started: list[EmulatorProcess] = []

    def start(worktree: Path, *flags: str, env: dict[str, str] | None = None, wait_ready: bool = True) -> EmulatorProcess:
        port = free_port()
        log_path = tmp_path / f"emulator-{port}.log"
        full_env = {**os.environ, **EMULATOR_TEST_ENV, **(env or {})}
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "perfbisect.demo.emulator", "--port", str(port), "--worktree", str(worktree), *flags],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=full_env,
                start_new_session=True,
            )
        emulator = EmulatorProcess(proc=proc, port=port, log_path=log_path)
        started.append(emulator)
        if wait_ready:
            emulator.wait_ready()
        return emulator

    yield start
    for emulator in started:
        emulator.kill_group()


@pytest.fixture(scope="session")
def pg_cluster():
    """A throwaway PostgreSQL server on 127.0.0.1 for the session (tests/pg_server.py), or a skip
    that says why when no PostgreSQL binaries are installed."""
    from tests.pg_server import PgCluster, find_pg_bin

    bindir = find_pg_bin()
    if bindir is None:
        pytest.skip(
            "no PostgreSQL server binaries (initdb, pg_ctl, postgres) on PATH, in /usr/local/bin or in "
            "/usr/lib/postgresql/*/bin: install Debian's postgresql package (.ci/run does) to run the shared-store tests"
        )
    cluster = PgCluster(bindir).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def pg_url(pg_cluster) -> str:
    """A fresh, empty database on the session's PostgreSQL server (its URL, with a password)."""
    return pg_cluster.create_database()


@functools.lru_cache(maxsize=None)
def _keeps_together(path: Path) -> bool:
    """A test file whose tests share a module-scoped fixture, or the sandbox Slurm cluster (one per
    worker otherwise), runs on one worker."""
    try:
        text = path.read_text()
    except OSError:
        return False
    return 'scope="module"' in text or "slurm_cluster" in text


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` for this suite: every test goes to whichever worker is free, except the tests
    of a file that shares a module fixture or the Slurm sandbox (``_keeps_together``), which go to one
    worker as one unit, so nothing shared is computed twice. Done here, on the controller, because xdist's
    own ``xdist_group`` marks stopped grouping on pytest 9.2 (pytest-dev/pytest-xdist#1386)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class SharedFixtureScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if _keeps_together(Path(config.rootpath) / path):
                return path
            return super()._split_scope(nodeid)

    return SharedFixtureScheduling(config, log)


# The fast local loop: `pytest -m "not slow"` leaves out the tests tests/slow.txt lists (made by
# tools/slow_tests.py from a full run's timings) besides those marked slow by hand. CI runs everything.
_SLOW_LIST = Path(__file__).with_name("slow.txt")


def pytest_collection_modifyitems(config, items):
    if not _SLOW_LIST.exists():
        return
    slow = {line.strip() for line in _SLOW_LIST.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")}
    def shared_fixtures(item) -> set[str]:
        info = getattr(item, "_fixtureinfo", None)
        return {name for name, defs in (info.name2fixturedefs.items() if info else ()) if defs and defs[-1].scope != "function"}

    listed = [item for item in items if item.nodeid.split("[", 1)[0] in slow]
    # A shared fixture (a demo bisection for a module) is paid by whichever of its tests runs first: every test
    # that uses one a slow test uses is slow too. Fixtures nearly every test uses (autouse) say nothing.
    common = {name for name in set().union(*(shared_fixtures(i) for i in items))
              if sum(name in shared_fixtures(i) for i in items) > len(items) // 2} if items else set()
    heavy = set().union(*(shared_fixtures(i) for i in listed)) - common if listed else set()
    for item in items:
        if item in listed or shared_fixtures(item) & heavy:
            item.add_marker(pytest.mark.slow)
