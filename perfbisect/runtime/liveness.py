"""Whether the process that holds something is still alive: the owner strings of this host's processes.

Everything perfbisect leaves behind while it works — a running trial or bisection in the results
store, a server's pidfile, the note that a trial waits for GPUs — names the process that wrote it by
its owner string, ``host:pid:start`` (``process_owner``). Whoever finds it later asks ``owner_alive``
whether that process still runs, and treats what it left as in use or as left over by a crash. The
start time guards against a pid the kernel has handed to an unrelated process since.

A shared (PostgreSQL) store answers the same question for every host through its owner locks
(``perfbisect.store.shared.owner_checker``); this module answers it for this host only.

The standard library at import; psutil when asked.
"""

from __future__ import annotations

import os
import socket


def process_owner() -> str:
    """``host:pid:start`` of this process; recovery uses it to tell live trials from dead ones."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_process_start(pid)}"


def owner_alive(owner: str) -> bool:
    """Whether the process that wrote ``owner`` (see ``process_owner``) is still running here.

    An owner from another host name counts as gone: SQLite files are not shared across machines,
    and a container restart changes the host name, so waiting for it would wait forever.
    """
    host, _, rest = owner.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    state, now_start = _process_state(pid)
    if state == "Z":  # killed but not yet reaped by its parent: gone for our purposes
        return False
    # The pid may have been reused by an unrelated process since: compare start times.
    return start in ("", "?") or now_start in (start, "?")


def _process_start(pid: int) -> str:
    return _process_state(pid)[1]


def _process_state(pid: int) -> tuple[str, str]:
    """("Z" for a zombie, else "R"; start time in clock ticks since boot), or ("?", "?") where there is none.

    The start is in clock ticks (proc(5)'s starttime), as owner strings have always been written:
    psutil's create_time is boot time + ticks / CLK_TCK, so rounding gives the ticks back exactly."""
    import psutil

    try:
        proc = psutil.Process(pid)
        status, created = proc.status(), proc.create_time()
        ticks = round((created - psutil.boot_time()) * os.sysconf("SC_CLK_TCK"))
    except (psutil.Error, OSError, ValueError):
        return "?", "?"
    return ("Z" if status in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD) else "R"), str(ticks)
