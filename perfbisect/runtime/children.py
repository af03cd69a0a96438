"""Child processes that cannot outlive perfbisect.

Every process perfbisect starts (server groups, ``command`` workloads, build steps) runs in a
process group of its own, so one signal stops it and whatever it spawned. An orderly exit (a
finished trial, Ctrl-C, SIGTERM) tears the group down through the ``with`` blocks; this module
covers the disorderly one. On Linux the child asks the kernel, before it execs, for SIGKILL the
moment perfbisect dies (``PR_SET_PDEATHSIG``), so a ``kill -9`` of perfbisect leaves no server
holding the GPUs and no benchmark still running. Grandchildren are not covered by that (the
signal goes to the direct child only): SGLang's schedulers ask for the same signal themselves, and
the pidfiles under ``<cache_dir>/servers`` let the next perfbisect reap what is left.

``signal_group`` is the one way perfbisect signals such a group (servers, builds,
``command`` workloads, a crashed run's leftovers), with the guard against a reused group id.

The standard library only at import (the demo emulator uses ``own_group`` under the target's
interpreter); ``group_members`` asks psutil when called.
"""

from __future__ import annotations

import codecs
import ctypes
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


# Resolved once here, not in the forked child: between fork and exec only async-signal-safe work
# is safe while other threads (the state sampler) may hold locks, and a symbol lookup is not.
_PRCTL = _load_prctl()


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive ``sig`` when this process dies (None off Linux)."""
    if _PRCTL is None:
        return None
    parent = os.getpid()
    prctl = _PRCTL

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        # The parent may have died between fork and prctl: then no signal would ever come.
        if os.getppid() != parent:
            os.kill(os.getpid(), int(sig))

    return arm


def own_group() -> dict[str, Any]:
    """Popen keyword arguments for a child in its own process group that dies with perfbisect."""
    kwargs: dict[str, Any] = {"start_new_session": True}
    arm = die_with_parent()
    if arm is not None:
        kwargs["preexec_fn"] = arm
    return kwargs


def group_members(group: int) -> list[int]:
    """Live (non-zombie) processes of the process group ``group`` or of the session it leads.

    ``start_new_session`` makes the leader's pid the id of both its group and its session; a worker
    that moved to a group of its own (setpgid) still belongs to the session."""
    import psutil

    pids = []
    for proc in psutil.process_iter(["status"]):
        if proc.info["status"] in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            continue  # exited, waiting to be reaped: holds no memory, port or GPU
        try:
            if os.getpgid(proc.pid) == group or os.getsid(proc.pid) == group:
                pids.append(proc.pid)
        except OSError:
            continue  # gone meanwhile
    return sorted(pids)


def signal_group(group: int, sig: int, leader: subprocess.Popen | None = None) -> bool:
    """Send ``sig`` to the process group ``group``; False when there was nothing to signal.

    A group id is its leader's pid, which the kernel may give to an unrelated process once the
    leader is reaped. With ``leader`` (our Popen of it): until it is reaped the id cannot be reused;
    after that the group is signalled only while members of it remain. Without one, the caller has
    checked what the group is (a leftover server's pidfile names its command line).
    """
    if leader is not None and leader.returncode is not None and not group_members(group):
        return False
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# A bounded run: a command whose time, output and leftovers perfbisect controls

# What a run's log keeps of each stream: its first LOG_HEAD_BYTES as they come, then its last
# TAIL_BYTES (also what the output is parsed from). A benchmark printing 100 MB keeps ~0.5 MB.
LOG_HEAD_BYTES = 256 * 1024
TAIL_BYTES = 256 * 1024
# After the command exits, how long a process it started may keep its stdout/stderr open before
# perfbisect kills it (a benchmark must wait for what it starts, or detach it from its output).
LINGER_GRACE_S = 5.0
_READ_CHUNK = 64 * 1024


@dataclass
class Captured:
    """What a bounded run saw: exit status (None when killed at the deadline), each stream's tail
    (decoded, bad bytes replaced) and size, and what lingered after the command exited."""

    returncode: int | None
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    seconds: float
    lingering: str = ""  # "pid 123 (sleep 600)": processes that held the output open and were killed

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


class _Log:
    """The run's log: chunks of either stream appended as they come, under a header when the stream changes."""

    def __init__(self, fh: Any):
        self.fh = fh
        self.lock = threading.Lock()
        self.current = ""

    def write(self, stream: str, text: str) -> None:
        if self.fh is None or not text:
            return
        with self.lock:
            if stream != self.current:
                self.fh.write(("" if text.startswith("\n") or not self.current else "\n") + f"--- {stream}\n")
                self.current = stream
            self.fh.write(text)
            self.fh.flush()

    def note(self, text: str) -> None:
        if self.fh is None:
            return
        with self.lock:
            self.fh.write(("\n" if self.current else "") + text + "\n")
            self.fh.flush()
            self.current = ""


class _Reader(threading.Thread):
    """Drains one pipe: its head to the log, its last TAIL_BYTES in memory, nothing else kept."""

    def __init__(self, name: str, fd: int, log: _Log):
        super().__init__(name=f"perfbisect-{name}-reader", daemon=True)
        self.stream, self.fd, self.log = name, fd, log
        self.total = 0
        self.tail = bytearray()
        self.stop = threading.Event()
        self.eof = threading.Event()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                ready, _, _ = select.select([self.fd], [], [], 0.1)
                if not ready:
                    continue
                chunk = os.read(self.fd, _READ_CHUNK)
                if not chunk:
                    break
                if self.total < LOG_HEAD_BYTES:
                    self.log.write(self.stream, self._decoder.decode(chunk[: LOG_HEAD_BYTES - self.total]))
                self.total += len(chunk)
                self.tail += chunk
                if len(self.tail) > TAIL_BYTES:
                    del self.tail[: len(self.tail) - TAIL_BYTES]
        except OSError:
            pass
        finally:
            self.eof.set()

    def finish_log(self) -> None:
        """Write what the head left out: the size dropped, then the tail."""
        if self.total <= LOG_HEAD_BYTES:
            self.log.write(self.stream, self._decoder.decode(b"", final=True))
            return
        kept = self.tail[-min(len(self.tail), self.total - LOG_HEAD_BYTES):]
        dropped = self.total - LOG_HEAD_BYTES - len(kept)
        if dropped:
            self.log.note(f"[perfbisect: {dropped} bytes of {self.stream} not kept ({self.total} in all); its last {len(kept)} follow]")
        self.log.write(self.stream, bytes(kept).decode(errors="replace"))

    def text(self) -> str:
        return bytes(self.tail).decode(errors="replace")


def _exited(pid: int) -> bool:
    """Has ``pid`` exited? It is not reaped, so its pid (and process group id) stays reserved."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None and info.si_pid == pid


def pipe_holders(fds: Sequence[int], proc_root: str = "/proc") -> dict[int, str]:
    """Processes (pid → command line) other than this one that hold an end of the pipes ``fds``."""
    wanted = set()
    for fd in fds:
        try:
            wanted.add(f"pipe:[{os.fstat(fd).st_ino}]")
        except OSError:
            continue
    found: dict[int, str] = {}
    if not wanted:
        return found
    try:
        pids = [int(p) for p in os.listdir(proc_root) if p.isdigit()]
    except OSError:
        return found
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            links = os.listdir(f"{proc_root}/{pid}/fd")
        except OSError:
            continue
        for link in links:
            try:
                target = os.readlink(f"{proc_root}/{pid}/fd/{link}")
            except OSError:
                continue
            if target in wanted:
                try:
                    with open(f"{proc_root}/{pid}/cmdline", "rb") as fh:
                        cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
                except OSError:
                    cmd = "?"
                found[pid] = cmd[:80]
                break
    return found


def _kill(pgid: int, holders: dict[int, str]) -> None:
    # The leader is not reaped yet (waitid WNOWAIT), so its group id cannot have been reused.
    try:
        signal_group(pgid, signal.SIGKILL)
    except PermissionError:
        pass
    for pid in holders:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def run_bounded(argv: Sequence[str], *, cwd: Any, env: Mapping[str, str] | None, timeout_s: float,
                log_path: Any = None, header: str = "", merge_stderr: bool = False,
                footer: bool = True) -> Captured:
    """Run ``argv`` in its own process group with one deadline for the process, its group and its pipes.

    Output is read as it comes (never held whole): each stream's head is appended to ``log_path``
    and its last ``TAIL_BYTES`` kept for parsing; bytes that are not UTF-8 are replaced. At the
    deadline the group is killed with every process still holding the pipes (a ``setsid``
    grandchild too). After the command exits, a process that keeps its output open for
    ``LINGER_GRACE_S`` is killed and named in ``lingering``; the group is killed either way, so
    nothing the command started outlives it. Ctrl-C / SIGTERM kill it all and propagate. The log
    ends with the exit status (``footer``; always after a kill).
    Raises FileNotFoundError / OSError when the command cannot start.
    """
    start = time.monotonic()
    deadline = start + timeout_s
    fh = open(log_path, "a", encoding="utf-8") if log_path is not None else None
    try:
        log = _Log(fh)
        if header:
            log.note(header)
        proc = subprocess.Popen(
            list(argv), cwd=cwd, env=dict(env) if env is not None else None, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE, **own_group(),
        )
        pipes = [p for p in (proc.stdout, proc.stderr) if p is not None]
        readers = [_Reader(name, p.fileno(), log) for name, p in zip(("stdout", "stderr"), pipes)]
        for r in readers:
            r.start()
        lingering = ""
        try:
            delay = 0.001
            while not _exited(proc.pid) and time.monotonic() < deadline:
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
            timed_out = not _exited(proc.pid)
            if not timed_out:
                grace = min(deadline, time.monotonic() + LINGER_GRACE_S)
                for r in readers:
                    r.eof.wait(max(0.0, grace - time.monotonic()))
            holders = pipe_holders([p.fileno() for p in pipes]) if timed_out or not all(r.eof.is_set() for r in readers) else {}
            holders.pop(proc.pid, None)
            if holders and not timed_out:
                lingering = ", ".join(f"pid {pid} ({cmd})" for pid, cmd in sorted(holders.items()))
            _kill(proc.pid, holders)
        except BaseException:
            _kill(proc.pid, pipe_holders([p.fileno() for p in pipes]))
            proc.wait()
            for r in readers:
                r.stop.set()
            raise
        returncode = proc.wait()
        for r in readers:
            r.join(10.0)
            r.stop.set()
            r.join(1.0)
        for p in pipes:
            p.close()
        for r in readers:
            r.finish_log()
        seconds = time.monotonic() - start
        status = (f"killed at the {timeout_s:g} s deadline" if timed_out else f"exit {returncode}")
        if lingering:
            status += f"; killed what still held its output after it exited: {lingering}"
        if footer or timed_out or lingering:
            log.note(f"--- perfbisect: {status} after {seconds:.1f} s")
        by_name = {r.stream: r for r in readers}
        out, err = by_name["stdout"], by_name.get("stderr")
        return Captured(
            returncode=None if timed_out else returncode, stdout=out.text(), stderr=err.text() if err else "",
            stdout_bytes=out.total, stderr_bytes=err.total if err else 0, seconds=seconds, lingering=lingering,
        )
    finally:
        if fh is not None:
            fh.close()
