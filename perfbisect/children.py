"""Child processes that cannot outlive perfbisect.

Every process perfbisect starts (server groups, ``command`` workloads, build steps) runs in a
process group of its own, so one signal stops it and whatever it spawned. An orderly exit (a
finished trial, Ctrl-C, SIGTERM) tears the group down through the ``with`` blocks; this module
covers the disorderly one. On Linux the child asks the kernel, before it execs, for SIGKILL the
moment perfbisect dies (``PR_SET_PDEATHSIG``), so a ``kill -9`` of perfbisect no longer leaves a
server holding the GPUs or a benchmark still running. Grandchildren are not covered by that (the
signal goes to the direct child only): SGLang's schedulers ask for the same signal themselves, and
the pidfiles under ``<cache_dir>/servers`` let the next perfbisect reap what is left.

``signal_group`` / ``stop_group`` are the one way perfbisect signals such a group (servers, builds,
``command`` workloads, a crashed run's leftovers), with the guard against a reused group id.

The standard library only at import (the demo emulator uses ``own_group`` under the target's
interpreter); ``group_members`` asks psutil when called.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
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


def stop_group(leader: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM the group ``leader`` leads, SIGKILL it after ``grace_s``, and reap the leader."""
    signal_group(leader.pid, signal.SIGTERM, leader)
    try:
        leader.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        signal_group(leader.pid, signal.SIGKILL, leader)
        leader.wait()
