"""ServerSession against real subprocesses on 127.0.0.1.

Most tests launch a small stdlib HTTP server given to the interpreter with ``-c``: it is a real
process group with real sockets, and each of its flags plays one way a server can misbehave.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest

from perfbisect.settings import ModeConfig, ServerConfig
from perfbisect.errors import ServerError, ServerNotReady
from perfbisect.measure.server import ServerSession, Teardown, free_port, port_holders, port_in_use

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# A stand-in server. Every process it starts exits by itself within two minutes, so a failing
# test can never leave anything running for long.
FAKE_SERVER = r'''
import argparse, http.server, os, signal, subprocess, sys, threading, time

p = argparse.ArgumentParser()
p.add_argument("--port", type=int, required=True)
p.add_argument("--ready-after", type=float, default=0.0)
p.add_argument("--ready-after-polls", type=int, default=0, help="answer 503 to this many requests first")
p.add_argument("--never-ready", action="store_true")
p.add_argument("--exit-code", type=int)
p.add_argument("--ignore-sigterm", action="store_true")
p.add_argument("--children", type=int, default=0)
p.add_argument("--children-ignore-sigterm", action="store_true")
p.add_argument("--child-drop", help="the first child is started without this variable")
p.add_argument("--child-set", help="NAME=VALUE forced in the first child")
a = p.parse_args()
watchdog = threading.Timer(120, lambda: os._exit(9))
watchdog.daemon = True  # must not hold up a normal exit
watchdog.start()
print("fake server: cwd", os.getcwd(), "argv", sys.argv[1:], flush=True)
if a.exit_code is not None:
    print("fatal: the model does not fit in memory", flush=True)
    sys.exit(a.exit_code)
if a.ignore_sigterm:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child_code = "import signal, time\n"
if a.children_ignore_sigterm:
    child_code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
child_code += "time.sleep(120)\n"
for i in range(a.children):
    env = dict(os.environ)
    if i == 0 and a.child_drop:
        env.pop(a.child_drop, None)
    if i == 0 and a.child_set:
        name, _, value = a.child_set.partition("=")
        env[name] = value
    subprocess.Popen([sys.executable, "-c", child_code, f"worker-{i}"], env=env)
t0 = time.monotonic()
answered = []

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        answered.append(1)
        ready = (not a.never_ready and time.monotonic() - t0 >= a.ready_after
                 and len(answered) > a.ready_after_polls)
        self.send_response(200 if ready else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()

http.server.HTTPServer(("127.0.0.1", a.port), Handler).serve_forever()
'''


def fake_config(*flags: str, port: int = 0, env=None, timeout: float = 10.0, grace: float = 2.0) -> ServerConfig:
    return ServerConfig(
        command=("{python}", "-c", FAKE_SERVER, "--port", "{port}", *flags),
        env=dict(env or {}),
        host="127.0.0.1",
        port=port,
        ready_path="/health_generate",
        ready_timeout_s=timeout,
        ready_poll_s=0.1,
        shutdown_grace_s=grace,
    )


def session(tmp_path: Path, server: ServerConfig, mode: ModeConfig | None = None, **kw) -> ServerSession:
    worktree = tmp_path / "worktree"
    worktree.mkdir(exist_ok=True)
    return ServerSession(
        server,
        mode or ModeConfig(name="baseline"),
        worktree,
        sys.executable,
        tmp_path / "logs" / "server.log",
        **kw,
    )


def process_alive(pid: int) -> bool:
    """True when pid exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def test_start_ready_and_stop_a_server(tmp_path):
    polls: list[tuple[float, int]] = []
    # not ready for half a second *and* for two answers: a starved test process that polls late still
    # sees 503 twice before it is ready
    s = session(tmp_path, fake_config("--ready-after", "0.5", "--ready-after-polls", "2"))
    with s:
        took = s.wait_ready(progress=lambda elapsed, n: polls.append((elapsed, n)))
        assert s.alive() and s.returncode is None
        assert s.base_url == f"http://127.0.0.1:{s.port}"
        assert httpx.get(s.base_url + "/health_generate", trust_env=False).status_code == 200
        assert port_in_use("127.0.0.1", s.port)
        assert s.group_pids() == [s.pid]
        pid, port = s.pid, s.port
    assert took >= 0.5
    # It answered 503 first: several polls, counted in order.
    assert len(polls) >= 3 and [n for _, n in polls] == list(range(1, len(polls) + 1))
    assert polls[-1][0] == pytest.approx(took, abs=0.2)
    assert s.teardown is not None and s.teardown.how == "term"
    assert s.teardown.port_free and s.teardown.leftover_pids == ()
    assert s.returncode == -signal.SIGTERM
    assert not process_alive(pid) and not port_in_use("127.0.0.1", port)
    # stop() is idempotent: the same record, no second signal.
    assert s.stop() is s.teardown


def test_argv_placeholders_cwd_and_log(tmp_path):
    s = session(tmp_path, fake_config("--tag", "{host}|{worktree}"))
    # argparse rejects the unknown --tag, proving the expanded argv reached the process.
    with s:
        with pytest.raises(ServerError) as info:
            s.wait_ready()
    log = (tmp_path / "logs" / "server.log").read_text()
    assert f"127.0.0.1|{tmp_path / 'worktree'}" in log
    assert "unrecognized arguments: --tag" in log
    assert "exit code 2" in str(info.value)
    assert s.argv[0] == sys.executable and s.argv[-1] == f"127.0.0.1|{tmp_path / 'worktree'}"


def test_server_runs_in_the_worktree_with_the_mode_args(tmp_path):
    mode = ModeConfig(name="eagle3", args=("--ready-after", "0"))
    with session(tmp_path, fake_config(), mode) as s:
        s.wait_ready()
    log = s.log_tail(50)
    assert f"cwd {tmp_path / 'worktree'}" in log
    assert "'--ready-after', '0'" in log  # the mode's args were appended to server.command


def test_command_not_found_names_it_and_the_fix(tmp_path):
    server = ServerConfig(command=("no-such-server-binary-xyz", "--port", "{port}"), ready_poll_s=0.1)
    s = session(tmp_path, server)
    with pytest.raises(ServerError) as info:
        s.start()
    message = str(info.value)
    assert "'no-such-server-binary-xyz' was not found" in message
    assert "server.command" in message and "perfbisect.toml" in message
    assert s.stop().how == "already-exited"


def test_command_not_executable(tmp_path):
    script = tmp_path / "server.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    s = session(tmp_path, ServerConfig(command=(str(script), "{port}")))
    with pytest.raises(ServerError, match="is not executable"):
        s.start()


def test_port_already_in_use_is_refused_with_the_fix(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert port_in_use("127.0.0.1", port)
        assert os.getpid() in port_holders(port)
        s = session(tmp_path, fake_config(port=port))
        with pytest.raises(ServerError) as info:
            s.start()
    message = str(info.value)
    assert f"Port {port}" in message and "already in use" in message
    assert f"pid {os.getpid()}" in message
    assert "server.port = 0" in message
    assert not s.alive()


def test_fixed_free_port_is_used(tmp_path):
    port = free_port("127.0.0.1")
    assert not port_in_use("127.0.0.1", port)
    with session(tmp_path, fake_config(port=port)) as s:
        s.wait_ready()
        assert s.port == port
        assert port_in_use("127.0.0.1", port)
    assert not port_in_use("127.0.0.1", port)


def test_never_ready_times_out_with_log_tail(tmp_path):
    polls = []
    s = session(tmp_path, fake_config("--never-ready", timeout=2.0))
    t0 = time.monotonic()
    with s:
        with pytest.raises(ServerNotReady) as info:
            s.wait_ready(progress=lambda elapsed, n: polls.append(n))
        assert s.alive()  # not ready is not dead: the context manager still stops it
    elapsed = time.monotonic() - t0
    err = info.value
    message = str(err)
    assert 2.0 <= elapsed < 8.0
    assert "within 2 s" in message
    assert f"{s.polls} polls" in message and s.polls == polls[-1] >= 10
    assert "last answer: HTTP 503" in message
    assert str(tmp_path / "logs" / "server.log") in message
    assert "ready_timeout_s" in message
    assert '"GET /health_generate HTTP/1.1" 503' in err.log_tail and err.log_tail in message
    assert len(err.log_tail.splitlines()) == 20
    assert err.log_path == str(tmp_path / "logs" / "server.log")
    assert s.teardown.how == "term"


def test_nothing_listening_counts_as_normal_until_timeout(tmp_path):
    # A process that never binds: every poll is "connection refused", which is not an error.
    code = "import time, sys; print('loading weights', flush=True); time.sleep(60)"
    server = ServerConfig(command=("{python}", "-c", code, "{port}"), ready_timeout_s=1.0, ready_poll_s=0.1, shutdown_grace_s=2.0)
    with session(tmp_path, server) as s:
        with pytest.raises(ServerNotReady, match="last answer: connection refused") as info:
            s.wait_ready()
    assert "loading weights" in info.value.log_tail


def test_exit_during_startup_reports_exit_code_and_log(tmp_path):
    # A deadline far away: the exit must end the wait, not the deadline. Counted in polls (0.1 s
    # apart), not seconds: waiting out the deadline would take 6000 of them.
    s = session(tmp_path, fake_config("--exit-code", "3", timeout=600.0))
    with s:
        with pytest.raises(ServerError) as info:
            s.wait_ready()
    assert not isinstance(info.value, ServerNotReady)
    assert s.polls < 3000
    message = str(info.value)
    assert "exit code 3" in message
    assert "the model does not fit in memory" in info.value.log_tail
    assert "the model does not fit in memory" in message
    assert s.returncode == 3
    assert s.teardown.how == "already-exited"


def test_server_ignoring_sigterm_is_killed_and_port_freed(tmp_path):
    s = session(tmp_path, fake_config("--ignore-sigterm", grace=0.5))
    with s:
        s.wait_ready()
        port = s.port
    td = s.teardown
    assert isinstance(td, Teardown)
    assert td.how == "kill"
    assert 0.5 <= td.seconds < 6.0
    assert td.port_free and not port_in_use("127.0.0.1", port)
    assert s.returncode == -signal.SIGKILL
    assert td.returncode == -signal.SIGKILL


def test_every_child_of_the_group_is_gone_after_stop(tmp_path):
    with session(tmp_path, fake_config("--children", "3")) as s:
        s.wait_ready()
        deadline = time.monotonic() + 5
        while len(s.group_pids()) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = s.group_pids()
        assert len(pids) == 4 and s.pid in pids
        td = s.stop()
    assert td.how == "term" and td.leftover_pids == ()
    assert [p for p in pids if process_alive(p)] == []
    assert s.group_pids() == []


def _ignores_sigterm(pid: int) -> bool:
    """Whether ``pid`` ignores SIGTERM (the SigIgn mask of /proc/PID/status)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    except (OSError, ValueError):
        pass
    return False


def test_orphaned_child_ignoring_sigterm_is_killed(tmp_path):
    # The leader exits on SIGTERM but a worker ignores it: the group still holds a process, so
    # the teardown must escalate to SIGKILL rather than call it done.
    with session(tmp_path, fake_config("--children", "1", "--children-ignore-sigterm", grace=0.5)) as s:
        s.wait_ready()
        deadline = time.monotonic() + 30
        # Until the worker has installed its SIG_IGN (its /proc status says so), a TERM would still kill
        # it: on a busy machine that moment can come after the group has two members.
        while not (len(s.group_pids()) == 2 and any(_ignores_sigterm(p) for p in s.group_pids())) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = s.group_pids()
        assert len(pids) == 2 and any(_ignores_sigterm(p) for p in pids)
    assert s.teardown.how == "kill"
    assert s.returncode == -signal.SIGTERM  # the leader itself went on TERM
    assert [p for p in pids if process_alive(p)] == []


def test_env_check_reports_a_variable_missing_in_one_worker(tmp_path):
    server = fake_config("--children", "2", env={"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"})
    mode = ModeConfig(name="eagle3", args=("--child-drop", "NCCL_ALGO"), env={"NCCL_BUFFSIZE": "16777216"})
    with session(tmp_path, server, mode) as s:
        s.wait_ready()
        deadline = time.monotonic() + 5
        while len(s.group_pids()) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        checks = s.check_env()
    assert len(checks) == 3
    by_pid = {c.pid: c for c in checks}
    assert by_pid[s.pid].ok and by_pid[s.pid].missing == ()
    bad = [c for c in checks if not c.ok]
    assert len(bad) == 1
    assert bad[0].missing == ("NCCL_ALGO",) and bad[0].mismatched == ()
    assert "worker-0" in bad[0].cmdline
    good_worker = [c for c in checks if c.ok and c.pid != s.pid]
    assert len(good_worker) == 1 and "worker-1" in good_worker[0].cmdline


def test_env_check_reports_a_mismatched_value_and_explicit_expectations(tmp_path):
    server = fake_config("--children", "1", "--child-set", "NCCL_PROTO=Simple", env={"NCCL_PROTO": "LL"})
    with session(tmp_path, server, extra_env={"PERFBISECT_TRIAL": "7"}) as s:
        s.wait_ready()
        deadline = time.monotonic() + 5
        while len(s.group_pids()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        checks = {c.pid: c for c in s.check_env()}
        explicit = s.check_env({"PERFBISECT_TRIAL": "7", "NOT_SET_ANYWHERE": "1"})
    worker = next(c for pid, c in checks.items() if pid != s.pid)
    assert worker.mismatched == (("NCCL_PROTO", "LL", "Simple"),)
    assert checks[s.pid].ok
    # extra_env reached every process; a name set nowhere is missing everywhere.
    assert len(explicit) == 2
    assert all(c.missing == ("NOT_SET_ANYWHERE",) and c.mismatched == () for c in explicit)


def test_context_manager_tears_down_when_the_body_raises(tmp_path):
    s = session(tmp_path, fake_config("--children", "1"))
    with pytest.raises(RuntimeError, match="benchmark blew up"):
        with s:
            s.wait_ready()
            deadline = time.monotonic() + 5
            while len(s.group_pids()) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            pids, port = s.group_pids(), s.port
            raise RuntimeError("benchmark blew up")
    assert len(pids) == 2
    assert s.teardown.how == "term"
    assert [p for p in pids if process_alive(p)] == []
    assert not port_in_use("127.0.0.1", port)


def test_gpu_memory_hook_is_polled_after_the_group_is_gone(tmp_path):
    answers = iter([False, False, True])
    seen_alive = []

    def released() -> bool:
        seen_alive.append(bool(s.group_pids()))
        return next(answers)

    s = session(tmp_path, fake_config(), gpu_memory_released=released, gpu_release_timeout_s=5.0)
    with s:
        s.wait_ready()
    assert s.teardown.gpu_memory_released is True
    assert seen_alive == [False, False, False]  # only asked once the group had vanished


def test_gpu_memory_hook_bounded_when_never_released(tmp_path):
    asked = []

    def never() -> bool:
        asked.append(1)
        return False

    s = session(tmp_path, fake_config(), gpu_memory_released=never, gpu_release_timeout_s=0.6)
    with s:
        s.wait_ready()
    td = s.teardown
    assert td.gpu_memory_released is False
    assert any("GPU memory was not released" in n for n in td.notes)
    assert len(asked) >= 2  # polled again after the first "no", then given up (the test returns)


def test_port_still_bound_after_stop_is_an_error(tmp_path):
    # The server hands its listening socket to a process outside its group (a daemon that
    # escaped with setsid and a new session): the group dies, the port stays bound.
    code = r'''
import os, socket, sys, time
port = int(sys.argv[1])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port)); s.listen()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(30); os._exit(0)
    os._exit(0)
s.close(); time.sleep(60)
'''
    server = ServerConfig(command=("{python}", "-c", code, "{port}"), shutdown_grace_s=1.0)
    s = session(tmp_path, server, settle_timeout_s=0.5)
    s.start()
    deadline = time.monotonic() + 5
    while not port_holders(s.port) and time.monotonic() < deadline:
        time.sleep(0.05)
    holders = port_holders(s.port)
    try:
        assert holders and s.pid not in holders
        with pytest.raises(ServerError) as info:
            s.stop()
        message = str(info.value)
        assert f"port {s.port}" in message and "still bound" in message
        assert str(holders[0]) in message
        assert s.teardown is not None and not s.teardown.port_free
    finally:
        for pid in holders:
            os.kill(pid, signal.SIGKILL)


# --------------------------------------------------------------------------------------------
# With the demo emulator (the SGLang stand-in the demo and the integration tests use)


def emulator_config(*flags: str, env=None, timeout: float = 20.0, grace: float = 3.0) -> ServerConfig:
    return ServerConfig(
        command=(
            "{python}", "-m", "perfbisect.demo.emulator", "--host", "{host}", "--port", "{port}",
            "--worktree", "{worktree}", *flags,
        ),
        env=dict(env or {}),
        ready_timeout_s=timeout,
        ready_poll_s=0.1,
        shutdown_grace_s=grace,
    )


def wait_for_group(s: ServerSession, size: int) -> list[int]:
    deadline = time.monotonic() + 5
    while len(s.group_pids()) < size and time.monotonic() < deadline:
        time.sleep(0.05)
    return s.group_pids()


def test_emulator_session_with_workers_env_check_and_teardown(tmp_path):
    server = emulator_config("--workers", "2", env={"NCCL_PROTO": "LL", "NCCL_P2P_LEVEL": "SYS"})
    mode = ModeConfig(name="baseline", args=("--drop-env", "NCCL_P2P_LEVEL"), env={"NCCL_ALGO": "Ring"})
    with session(tmp_path, server, mode) as s:
        s.wait_ready()
        info = httpx.get(s.base_url + "/get_server_info", trust_env=False, timeout=5).json()
        assert info  # the emulator answers like SGLang once ready
        pids = wait_for_group(s, 3)
        assert len(pids) == 3
        checks = {c.pid: c for c in s.check_env()}
    assert checks[s.pid].ok
    workers = [c for pid, c in checks.items() if pid != s.pid]
    assert len(workers) == 2
    assert all(c.missing == ("NCCL_P2P_LEVEL",) and c.mismatched == () for c in workers)
    assert all("worker" in c.cmdline for c in workers)
    assert s.teardown.how == "term" and s.teardown.port_free
    assert [p for p in pids if process_alive(p)] == []


def test_emulator_never_ready(tmp_path):
    with session(tmp_path, emulator_config("--never-ready", timeout=1.5)) as s:
        with pytest.raises(ServerNotReady) as info:
            s.wait_ready()
    assert "last answer: HTTP 503" in str(info.value)
    assert "emulator" in info.value.log_tail
    assert s.teardown.how == "term"


def test_emulator_ignoring_sigterm_is_killed_with_its_workers(tmp_path):
    with session(tmp_path, emulator_config("--ignore-sigterm", "--workers", "2", grace=0.5)) as s:
        s.wait_ready()
        pids = wait_for_group(s, 3)
        port = s.port
    assert len(pids) == 3
    assert s.teardown.how == "kill" and s.returncode == -signal.SIGKILL
    assert [p for p in pids if process_alive(p)] == []
    assert not port_in_use("127.0.0.1", port)


def test_emulator_dying_mid_run_is_server_died(tmp_path):
    with session(tmp_path, emulator_config("--die-after-requests", "1")) as s:
        s.wait_ready()
        assert s.alive()
        body = {"text": "hello", "sampling_params": {"max_new_tokens": 64, "ignore_eos": True}, "stream": True}
        with pytest.raises(httpx.HTTPError):
            with httpx.stream("POST", s.base_url + "/generate", json=body, trust_env=False, timeout=10) as r:
                for _ in r.iter_bytes():
                    pass
        deadline = time.monotonic() + 5
        while s.alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not s.alive()
        assert "dying mid-stream" in s.log_tail(20)
    # The leader is gone; its workers notice within 0.2 s, so teardown may still find them.
    assert s.teardown.how in ("already-exited", "term") and s.teardown.leftover_pids == ()
    assert s.teardown.returncode == 3
