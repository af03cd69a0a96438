"""Child processes that cannot outlive perfbisect.

Every process perfbisect starts (server groups, ``command`` workloads, build steps) runs in a
process group of its own, so one signal stops it and whatever it spawned. An orderly exit (a
finished trial, Ctrl-C, SIGTERM) tears the group down through the ``with`` blocks; this module
covers the disorderly one. On Linux the child asks the kernel, before it execs, for SIGKILL the
moment perfbisect dies (``PR_SET_PDEATHSIG``), so a ``kill -9`` of perfbisect no longer leaves a
server holding the GPUs or a benchmark still running. Grandchildren are not covered by that (the
signal goes to the direct child only): SGLang's schedulers ask for the same signal themselves, and
the pidfiles under ``<cache_dir>/servers`` let the next perfbisect reap what is left.

Only stdlib: the demo emulator uses it too.
"""

from __future__ import annotations

import ctypes
import os
import signal
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
