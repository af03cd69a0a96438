"""Server pidfiles: doctor tells perfbisect's own servers apart from other GPU users, and reaping
spares a server whose perfbisect is alive (real process groups and pidfiles; the GPU holder list
is given, as this machine has no GPU to hold)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from perfbisect.doctor import split_own_servers
from perfbisect.store import process_owner


@pytest.fixture
def sleepers():
    procs = []

    def start() -> int:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
        procs.append(proc)
        return proc.pid

    yield start
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _pidfile(cache, pgid: int, owner: str) -> None:
    (cache / "servers").mkdir(parents=True, exist_ok=True)
    (cache / "servers" / f"{pgid}.pid").write_text(f"owner {owner}\n{sys.executable} -c server")


def test_own_server_is_named_as_such_not_as_another_gpu_user(tmp_path, sleepers):
    server, stranger = sleepers(), sleepers()
    _pidfile(tmp_path, server, process_owner())  # started by a live perfbisect: this process
    others, findings = split_own_servers([(0, server, "python"), (1, stranger, "python")], tmp_path)
    assert others == [(1, stranger, "python")]
    assert len(findings) == 1 and findings[0].state == "warn"
    assert "perfbisect's own server" in findings[0].message and f"pid {os.getpid()}" in findings[0].message


def test_server_of_a_dead_perfbisect_is_named_a_leftover(tmp_path, sleepers):
    server = sleepers()
    _pidfile(tmp_path, server, f"{socket.gethostname()}:999999999:0")
    others, findings = split_own_servers([(0, server, "python")], tmp_path)
    assert others == [] and findings[0].state == "error"
    assert "interrupted perfbisect" in findings[0].message and f"kill -9 -{server}" in findings[0].message


def test_without_pidfiles_every_holder_is_another_process(tmp_path, sleepers):
    pid = sleepers()
    assert split_own_servers([(0, pid, "python")], tmp_path) == ([(0, pid, "python")], [])
    assert split_own_servers([(0, pid, "python")], None) == ([(0, pid, "python")], [])


def _owner_of_a_live_process() -> tuple[subprocess.Popen, str]:
    """A live process other than this one, and its owner string as perfbisect writes it."""
    child = subprocess.Popen(
        [sys.executable, "-c", "from perfbisect.store import process_owner; import time; "
         "print(process_owner(), flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )
    owner = child.stdout.readline().strip()
    return child, owner


def test_reaping_spares_a_server_whose_perfbisect_lives_and_kills_it_once_that_one_is_dead(tmp_path, sleepers):
    from perfbisect.trials import reap_leftover_servers
    from perfbisect.workspace import Progress

    server = sleepers()
    owner_proc, owner = _owner_of_a_live_process()
    try:
        cmdline = Path(f"/proc/{server}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        (tmp_path / "servers").mkdir()
        pidfile = tmp_path / "servers" / f"{server}.pid"
        pidfile.write_text(f"owner {owner}\n{cmdline}")
        assert reap_leftover_servers(tmp_path, Progress()) == []
        assert pidfile.exists() and Path(f"/proc/{server}").exists()  # in use by a live perfbisect
    finally:
        owner_proc.kill()
        owner_proc.wait()
    assert reap_leftover_servers(tmp_path, Progress()) == [server]  # its perfbisect is gone now
    assert not pidfile.exists()
