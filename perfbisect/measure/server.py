"""One server session: launch the target's server as its own process group, wait until it is
ready, look at what environment its workers really got, and tear the whole group down.

A leftover server poisons every later trial (it holds the GPUs, the port, or both), so teardown is
the part that must never be skipped: ``ServerSession`` is a context manager whose exit always
stops the group, and ``stop()`` refuses to report success while the port is still bound.

Process groups, environments and port holders are read through psutil; signalling a group goes
through ``children.signal_group`` (the guard against a reused group id).

A gap in the env check is a warning, except on a variable that defines the mode (a key of
``[modes.NAME].env``): a worker that runs with another value (or none) of it does not run the mode,
so ``mode_not_applied`` turns that into ``ModeNotApplied`` and the trial is skipped. SGLang up to
0.5.3 overwrites NCCL_CUMEM_ENABLE / NCCL_NVLS_ENABLE in ``_set_envs_and_config`` before it spawns
its schedulers, which is exactly this: the launching process keeps the configured value, its
workers do not.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import httpx
import psutil

from ..runtime.children import group_members, own_group, signal_group
from ..placeholders import expand
from ..settings import ModeConfig, ServerConfig
from ..errors import ModeNotApplied, ServerError, ServerNotReady
from ..runtime.logtail import log_tail as read_log_tail
from ..model import EnvCheck
from ..runtime.polling import poll_until


# --------------------------------------------------------------------------------------------
# Ports


def _sockaddr(host: str, port: int) -> tuple[int, tuple]:
    """The address family and socket address to bind for host:port (IPv4 or IPv6)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ServerError(
            f"Server host '{host}' cannot be resolved ({exc.strerror}). Set server.host in "
            f"perfbisect.toml to a local address such as 127.0.0.1."
        ) from None
    family, _, _, _, addr = infos[0]
    return family, addr


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing is bound to right now (the kernel picks it)."""
    family, addr = _sockaddr(host, 0)
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(addr)
        except OSError as exc:
            raise ServerError(
                f"Cannot bind a port on host '{host}' ({exc.strerror}). Set server.host in "
                f"perfbisect.toml to an address of this machine, such as 127.0.0.1."
            ) from None
        return int(sock.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """True when a socket already holds ``host:port``, so a server could not bind it.

    SO_REUSEADDR makes sockets lingering in TIME_WAIT (a server that just exited) count as free,
    exactly as they are for a server that sets it too (uvicorn and SGLang do).
    """
    family, addr = _sockaddr(host, port)
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise ServerError(
                f"Cannot test port {port} on host '{host}' ({exc.strerror}). Use an address of "
                f"this machine for server.host and a port above 1023 (or 0 for a free one) for "
                f"server.port in perfbisect.toml."
            ) from None
    return False


def port_holders(port: int) -> list[int]:
    """Pids of the processes holding a listening TCP socket on ``port`` (those this user may see)."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return []
    return sorted({c.pid for c in conns if c.pid and c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port})


# --------------------------------------------------------------------------------------------
# Processes (psutil)


def group_and_session(pid: int) -> tuple[int, int] | None:
    """(process group, session) of a live process, or None when it is gone, a zombie or unreadable."""
    try:
        if psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return None
        return os.getpgid(pid), os.getsid(pid)
    except (psutil.Error, OSError):
        return None


def _read_environ(pid: int) -> dict[str, str] | None:
    try:
        return psutil.Process(pid).environ()
    except psutil.Error:
        return None


def process_cmdline(pid: int) -> str | None:
    """A process's command line, its words joined by spaces; None when it is gone or unreadable."""
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return None


# Longer values are shown by their length in a log header: a layout's padding (PERFBISECT_LAYOUT_PAD)
# is thousands of bytes of one character, and its length is all that matters about it.
_SHOWN_VALUE_MAX = 200


def _shown_env(env: Mapping[str, str]) -> dict[str, str]:
    """The env as a log header shows it: sorted, long values replaced by "<N bytes>"."""
    return {k: (v if len(v) <= _SHOWN_VALUE_MAX else f"<{len(v.encode())} bytes>") for k, v in sorted(env.items())}


def _signal_name(code: int) -> str:
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"signal {signal.Signals(-code).name} (exit code {code})"
    except ValueError:
        return f"signal {-code} (exit code {code})"


# --------------------------------------------------------------------------------------------
# Whether the mode reached the workers


def mode_not_applied(mode: ModeConfig, checks: Sequence[EnvCheck], wanted: Mapping[str, str]) -> ModeNotApplied | None:
    """The ModeNotApplied error for ``checks`` (``ServerSession.check_env``) in which a variable of
    the mode's own env (``[modes.NAME].env``) reached some process of the server's group with another
    value or not at all; None when every such variable arrived as ``wanted`` (the filled-in values).

    Gaps in variables of the shared ``[server].env`` are not the mode's: they stay warnings."""
    gaps: list[str] = []
    for name in mode.env:
        if name not in wanted:
            continue
        seen = []  # each process's value of it
        wrong = False
        for check in checks:
            actual = {n: a for n, _w, a in check.mismatched}
            if name in check.missing:
                seen.append(f"pid {check.pid} ({check.short_cmdline()}): unset")
                wrong = True
            elif name in actual:
                seen.append(f"pid {check.pid} ({check.short_cmdline()}): {actual[name]!r}")
                wrong = True
            else:
                seen.append(f"pid {check.pid} ({check.short_cmdline()}): {wanted[name]!r} as set")
        if wrong:
            gaps.append(f"{name}={wanted[name]!r}, which [modes.{mode.name}].env sets, is not what the server's "
                        f"processes run with ({'; '.join(seen)})")
    if not gaps:
        return None
    return ModeNotApplied(
        f"Mode '{mode.name}' did not reach the server's workers: {'; and '.join(gaps)}. The commit's own code "
        f"overwrites or drops the variable before it starts its workers (SGLang up to 0.5.3 sets "
        f"NCCL_CUMEM_ENABLE and NCCL_NVLS_ENABLE itself, in _set_envs_and_config of "
        f"python/sglang/srt/entrypoints/engine.py), so a trial here would not measure '{mode.name}': this "
        f"commit is skipped for it, never blamed. To measure the mode at such commits, add a patch to the "
        f"patch stack ([patches] dir) that makes the commit's engine.py keep the value it inherits (for "
        f"example os.environ.setdefault instead of os.environ[...] = ...); or, if the mode does not need "
        f"the variable, drop it from [modes.{mode.name}].env (a variable of [server].env that does not "
        f"arrive is only warned about)."
    )


# --------------------------------------------------------------------------------------------
# The session


@dataclass(frozen=True)
class Teardown:
    """How a server session ended and whether it left anything behind."""

    how: str  # "term" | "kill" | "already-exited"
    seconds: float
    leftover_pids: tuple[int, ...] = ()  # group members still alive after the bounded wait
    port_free: bool = True
    returncode: int | None = None  # of the group leader
    gpu_memory_released: bool | None = None  # None: no check was configured (or it failed)
    notes: tuple[str, ...] = ()


class ServerSession:
    """The target's server as one process group: start, wait until ready, inspect, stop."""

    def __init__(
        self,
        server: ServerConfig,
        mode: ModeConfig,
        worktree: Path,
        python: str,
        log_path: Path,
        extra_env: Mapping[str, str] | None = None,
        gpu_memory_released: Callable[[], bool] | None = None,
        *,
        settle_timeout_s: float = 5.0,
        gpu_release_timeout_s: float = 30.0,
    ):
        self.server = server
        self.mode = mode
        self.worktree = Path(worktree)
        self.python = python
        self.log_path = Path(log_path)
        self.extra_env = dict(extra_env or {})
        self.gpu_memory_released = gpu_memory_released
        # Bounds on how long stop() waits, after the group is signalled, for the port to come
        # free and the group to vanish, and then for the GPU memory to come back.
        self.settle_timeout_s = settle_timeout_s
        self.gpu_release_timeout_s = gpu_release_timeout_s
        self.argv: list[str] = []
        self._port: int | None = None
        self._proc: subprocess.Popen | None = None
        self._teardown: Teardown | None = None
        self.polls = 0

    # -- context manager ------------------------------------------------------------------

    def __enter__(self) -> "ServerSession":
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # Teardown runs even when the body raised. If teardown itself fails (port still held),
        # that error propagates with the body's exception chained as its __context__: a leftover
        # server is the graver problem, since it spoils every trial after this one.
        self.stop()

    # -- properties -----------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise ServerError("The server session has not been started; call start() first.")
        return self._port

    @property
    def base_url(self) -> str:
        host = self.server.host
        if ":" in host:  # an IPv6 literal needs brackets in a URL
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise ServerError("The server session has not been started; call start() first.")
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        """The group leader's exit status, or None while it runs (or before start)."""
        return None if self._proc is None else self._proc.poll()

    @property
    def teardown(self) -> Teardown | None:
        """The record of the last stop(), once it happened."""
        return self._teardown

    def alive(self) -> bool:
        """True while the group leader (the launched server process) is running."""
        return self._proc is not None and self._proc.poll() is None

    def configured_env(self) -> dict[str, str]:
        """The variables the config asks the server to get: server.env, then mode.env, with their
        placeholders filled (PYTHONPATH = "{worktree}/python" imports the checkout under test)."""
        values = {"python": self.python, "worktree": str(self.worktree), "host": self.server.host}
        if self._port is not None:
            values["port"] = str(self._port)
        return {name: expand((value,), **values)[0] for name, value in {**self.server.env, **self.mode.env}.items()}

    # -- start ----------------------------------------------------------------------------

    def start(self) -> None:
        """Launch the server command in its own process group, output to the log file."""
        if self._proc is not None:
            raise ServerError(
                f"This server session was already started (pid {self._proc.pid}); use a new "
                f"ServerSession for each trial."
            )
        host = self.server.host
        if self.server.port == 0:
            port = free_port(host)
        else:
            port = self.server.port
            if port_in_use(host, port):
                holders = port_holders(port)
                held = f" (held by pid {', '.join(map(str, holders))})" if holders else ""
                raise ServerError(
                    f"Port {port} on {host} is already in use{held}, so the server cannot bind it. "
                    f"Stop whatever holds it (a leftover server from an earlier trial?), or set "
                    f"server.port = 0 in perfbisect.toml to pick a free port for every trial."
                )
        if not self.worktree.is_dir():
            raise ServerError(
                f"The worktree {self.worktree} does not exist, so the server cannot run in it. "
                f"Check the commit out into it first, or pass the path of an existing checkout."
            )
        self._port = port
        self.argv = expand(
            tuple(self.server.command) + tuple(self.mode.args),
            port=str(port),
            python=self.python,
            worktree=str(self.worktree),
            host=host,
        )
        env = {**os.environ, **self.configured_env(), **self.extra_env}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            # A header so a log read later says what was launched, where, with which extra env.
            log.write(
                f"# perfbisect: mode {self.mode.name}, port {port}, cwd {self.worktree}\n"
                f"# perfbisect: argv {self.argv!r}\n"
                f"# perfbisect: env {_shown_env({**self.configured_env(), **self.extra_env})!r}\n".encode()
            )
            log.flush()
            try:
                self._proc = subprocess.Popen(
                    self.argv,
                    cwd=self.worktree,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    **own_group(),  # its own process group (and session), killable as one; dies with us
                )
            except FileNotFoundError:
                raise ServerError(
                    f"Cannot launch the server: command '{self.argv[0]}' was not found (full "
                    f"command: {self.argv!r}). Fix server.command in perfbisect.toml: give an "
                    f"absolute path or '{{python}}' (the target's interpreter) as its first word."
                ) from None
            except PermissionError:
                raise ServerError(
                    f"Cannot launch the server: '{self.argv[0]}' is not executable. Fix "
                    f"server.command in perfbisect.toml, or make that file executable (chmod +x)."
                ) from None
            except OSError as exc:
                raise ServerError(
                    f"Cannot launch the server command {self.argv!r}: {exc.strerror}. Fix "
                    f"server.command in perfbisect.toml."
                ) from None

    # -- readiness ------------------------------------------------------------------------

    def wait_ready(self, progress: Callable[[float, int], None] | None = None) -> float:
        """Poll the readiness path until it answers 200; returns the seconds it took.

        ServerError when the process exits first; ServerNotReady when server.ready_timeout_s
        passes. Connection refused while the server is loading is expected, not an error.
        """
        proc = self._require_started()
        path = self.server.ready_path
        url = self.base_url + (path if path.startswith("/") else "/" + path)
        timeout_s = self.server.ready_timeout_s
        poll_s = self.server.ready_poll_s
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        last = "no answer yet"
        self.polls = 0
        with httpx.Client(trust_env=False) as client:  # no proxy between us and 127.0.0.1
            while True:
                if proc.poll() is not None:
                    raise self._exited_error("while starting")
                now = time.monotonic()
                # /health_generate runs a real one-token generation: give it time, within the deadline.
                request_timeout = max(0.1, min(deadline - now, max(5.0, poll_s)))
                started = time.monotonic()
                try:
                    response = client.get(url, timeout=request_timeout)
                    if response.status_code == 200:
                        self.polls += 1
                        if progress:
                            progress(time.monotonic() - t0, self.polls)
                        return time.monotonic() - t0
                    last = f"HTTP {response.status_code}"
                except httpx.ConnectError:
                    last = "connection refused"
                except httpx.TimeoutException:
                    last = f"no answer within {request_timeout:.1f} s"
                except httpx.TransportError as exc:
                    last = f"{type(exc).__name__}"
                self.polls += 1
                if progress:
                    progress(time.monotonic() - t0, self.polls)
                now = time.monotonic()
                if now >= deadline:
                    break
                # Sleep by waiting on the process, so an exit during the pause is seen at once.
                pause = min(max(0.0, poll_s - (now - started)), deadline - now)
                try:
                    proc.wait(timeout=pause)
                except subprocess.TimeoutExpired:
                    pass
        if proc.poll() is not None:
            raise self._exited_error("while starting")
        tail = self.log_tail(20)
        raise ServerNotReady(
            f"The server did not become ready within {timeout_s:g} s: {self.polls} polls of "
            f"GET {url}, last answer: {last}. Its log is {self.log_path}; last lines:\n{tail}\n"
            f"If the log shows it still loading, raise server.ready_timeout_s in perfbisect.toml; "
            f"otherwise fix what the log reports.",
            log_path=str(self.log_path),
            log_tail=tail,
        )

    # -- inspection -----------------------------------------------------------------------

    def group_pids(self) -> list[int]:
        """Every live (non-zombie) process of the server's process group or session, leader included."""
        if self._proc is None:
            return []
        return group_members(self._proc.pid)

    def check_env(self, expected: Mapping[str, str] | None = None) -> tuple[EnvCheck, ...]:
        """Compare each group process's real environment with the configured one.

        ``expected`` defaults to server.env + mode.env. /proc/<pid>/environ is the environment a
        process was started with, which is what a worker inherits; processes that vanish while
        being read are skipped.
        """
        wanted = self.configured_env() if expected is None else dict(expected)
        checks = []
        for pid in self.group_pids():
            env = _read_environ(pid)
            cmdline = process_cmdline(pid)
            if env is None or cmdline is None:
                continue
            missing = tuple(name for name in wanted if name not in env)
            mismatched = tuple(
                (name, value, env[name])
                for name, value in wanted.items()
                if name in env and env[name] != value
            )
            checks.append(EnvCheck(pid=pid, cmdline=cmdline, missing=missing, mismatched=mismatched))
        return tuple(checks)

    def mode_not_applied(self, checks: Sequence[EnvCheck]) -> ModeNotApplied | None:
        """``mode_not_applied`` for this session's mode and its filled-in env (see there)."""
        return mode_not_applied(self.mode, checks, self.configured_env())

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of the server's log (empty when there is none yet)."""
        return read_log_tail(self.log_path, lines)

    # -- stop -----------------------------------------------------------------------------

    def stop(self) -> Teardown:
        """SIGTERM the group, SIGKILL it after server.shutdown_grace_s, then check the port is free.

        Idempotent: a second call returns the first call's record. Raises ServerError when the
        port is still bound afterwards, naming the pids that hold it.
        """
        if self._teardown is not None:
            return self._teardown
        if self._proc is None:
            self._teardown = Teardown(how="already-exited", seconds=0.0, notes=("never started",))
            return self._teardown
        try:
            return self._stop()
        except KeyboardInterrupt:
            # Ctrl-C / SIGTERM in the middle of the grace period: no grace left, but no leftover either.
            self._signal_group(signal.SIGKILL)
            raise

    def _stop(self) -> Teardown:
        assert self._proc is not None
        t0 = time.monotonic()
        proc = self._proc
        notes: list[str] = []

        if self._group_gone():
            how = "already-exited"
        else:
            self._signal_group(signal.SIGTERM)
            if self._wait_group_gone(self.server.shutdown_grace_s):
                how = "term"
            else:
                how = "kill"
                self._signal_group(signal.SIGKILL)
                # SIGKILL cannot be ignored, but a process stuck in the kernel (a GPU driver call)
                # dies only when that returns: the wait below is bounded, what remains is reported.
                self._wait_group_gone(self.settle_timeout_s)

        leftovers = tuple(self.group_pids())
        if leftovers:
            notes.append(f"processes of the group still alive: {', '.join(map(str, leftovers))}")
        port_free = self._wait_port_free(self.settle_timeout_s)

        gpu_released: bool | None = None
        if self.gpu_memory_released is not None:
            gpu_released, gpu_note = self._wait_gpu_released()
            if gpu_note:
                notes.append(gpu_note)

        self._teardown = Teardown(
            how=how,
            seconds=time.monotonic() - t0,
            leftover_pids=leftovers,
            port_free=port_free,
            returncode=proc.poll(),
            gpu_memory_released=gpu_released,
            notes=tuple(notes),
        )
        if not port_free:
            holders = port_holders(self.port) or list(leftovers)
            held = ", ".join(map(str, holders)) if holders else "unknown (not this user's?)"
            raise ServerError(
                f"After stopping the server, port {self.port} on {self.server.host} is still bound "
                f"(pids holding it: {held}). A leftover server would spoil every later trial: kill "
                f"those processes (kill -9 PID) before running perfbisect again.",
                log_path=str(self.log_path),
                log_tail=self.log_tail(20),
            )
        return self._teardown

    # -- internals ------------------------------------------------------------------------

    def _require_started(self) -> subprocess.Popen:
        if self._proc is None:
            raise ServerError("The server session has not been started; call start() first.")
        return self._proc

    def _exited_error(self, when: str) -> ServerError:
        code = self._proc.poll() if self._proc else None
        tail = self.log_tail(20)
        how = _signal_name(code) if code is not None else "an unknown status"
        return ServerError(
            f"The server process exited {when} with {how}. Its log is {self.log_path}; last "
            f"lines:\n{tail}\nFix what the log reports (a wrong flag in server.command or "
            f"mode args, a missing model, out of memory) and run again.",
            log_path=str(self.log_path),
            log_tail=tail,
        )

    def _group_gone(self) -> bool:
        """True when the leader has exited (and is reaped) and no group member is alive."""
        return self._proc is not None and self._proc.poll() is not None and not self.group_pids()

    def _wait_group_gone(self, timeout_s: float) -> bool:
        return poll_until(self._group_gone, timeout_s, 0.05)

    def _signal_group(self, sig: signal.Signals) -> None:
        assert self._proc is not None
        signal_group(self._proc.pid, sig, self._proc)

    def _wait_port_free(self, timeout_s: float) -> bool:
        return poll_until(lambda: not port_in_use(self.server.host, self.port), timeout_s, 0.1)

    def _wait_gpu_released(self) -> tuple[bool | None, str | None]:
        assert self.gpu_memory_released is not None
        try:
            if poll_until(self.gpu_memory_released, self.gpu_release_timeout_s, 0.5):
                return True, None
        except Exception as exc:  # a broken probe must not leave the teardown half done
            return None, f"GPU memory check failed: {type(exc).__name__}: {exc}"
        return False, (
            f"GPU memory was not released within {self.gpu_release_timeout_s:g} s of the "
            f"server group exiting"
        )
