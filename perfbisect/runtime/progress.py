"""Where long work reports what it is doing: the ``Progress`` sink every layer from ``measure`` up is handed.

It lives in ``runtime``, beneath every layer that reports through it, because it is an interface and nothing
more: measuring, the executors, the use cases and the hook report through it, and the command line
(``report.console.ConsoleProgress``), the hook's log and the tests give it a body.
"""

from __future__ import annotations


class Progress:
    """Where long work reports what it is doing. The default sink drops everything."""

    def info(self, message: str) -> None:  # a step of the work
        pass

    def detail(self, message: str) -> None:  # a finer step (a run, a readiness poll)
        pass

    def warn(self, message: str) -> None:  # something the user should know and may act on
        pass

    def search(self, status) -> None:  # where a bisection stands (a cost.SearchStatus), before each trial
        pass

    def done(self) -> None:  # the long work is over (stop any live display or heartbeat)
        pass
