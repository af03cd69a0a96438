"""One poll-until-deadline loop for every "wait until X, but not forever" in perfbisect.

``poll_until`` checks first and sleeps only between checks, so a condition that already holds costs
no wait, and a zero timeout checks exactly once. ``clock`` and ``sleep`` are seams for tests: a fake
clock whose ``sleep`` advances it runs the loop without waiting and without timing assertions.
"""

from __future__ import annotations

import time
from typing import Callable


def poll_until(
    predicate: Callable[[], bool],
    timeout_s: float | None,
    interval_s: float,
    on_wait: Callable[[float], None] | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Call ``predicate`` every ``interval_s`` until it is true (True) or ``timeout_s`` has passed (False).

    Each round: check; when false, call ``on_wait(seconds since the start)``; give up once those
    seconds reach ``timeout_s`` (``None``: never); otherwise sleep ``interval_s``. The check after
    the last sleep may therefore land up to one interval past the deadline — it is still made.
    Whatever ``predicate`` or ``on_wait`` raises propagates and ends the wait.
    """
    start = clock()
    while True:
        if predicate():
            return True
        elapsed = clock() - start
        if on_wait is not None:
            on_wait(elapsed)
        if timeout_s is not None and elapsed >= timeout_s:
            return False
        sleep(interval_s)
