"""The local executor: a search's trials on this host, one measurement at a time (``[executor] kind = "local"``).

``submit`` only queues the measurement; ``wait`` runs it (``measure.search_trials.observe``: one trial per metric mode,
through the ``TrialRunner`` the bisection opened) and ``collect`` hands the result to the search loop, which
stores it. Nothing runs in the background, so there is nothing to cancel or re-attach: a stopped search resumes
from its stored observations.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..engine.observations import Measure
from ..measure.search_trials import observe
from ..measure.trials import TrialRunner
from ..model import Commit, Observation
from .loop import Landed


class LocalExecutor:
    """Trials on this host, in order: one slot, never a node."""

    slots = 1
    what = "trials"

    def __init__(self, runner: TrialRunner, bisection_id: int, by_sha: dict[str, Commit]):
        self.runner = runner
        self.bisection_id = bisection_id
        self.by_sha = by_sha
        self._queued: list[tuple[Measure, dict[str, Any]]] = []
        self._landed: list[Landed] = []
        self._stored = 0  # observations stored: the next one's seq (the trial's mode order reads it)

    @property
    def in_flight(self) -> Sequence[Any]:
        return [*self._queued, *self._landed]

    @property
    def pending(self) -> list[tuple[str, str | None]]:
        return []  # one at a time: nothing is ever in flight when the policy is asked

    def resume(self, observations: list[Observation]) -> None:
        self._stored = len(observations)

    def free_hosts(self, free: int) -> list[str | None]:
        return [None] * free

    def submit(self, measure: Measure, decision: dict[str, Any]) -> None:
        self._queued.append((measure, decision))

    def wait(self) -> None:
        """Run what was submitted (the search loop stores it next)."""
        while self._queued:
            measure, decision = self._queued.pop(0)
            obs, trial_ids = observe(self.runner, self.by_sha[measure.commit], self.bisection_id, seq=self._stored,
                                     vary_layout=measure.vary_layout)
            self._landed.append(Landed(obs, tuple(trial_ids), decision))

    def collect(self) -> list[Landed]:
        landed, self._landed = self._landed, []
        return landed

    def observed(self, landed: Landed, seq: int) -> None:
        self._stored = seq + 1

    def cancel_all(self, why: str) -> list[str]:
        self._queued.clear()
        return []

    def interrupted_line(self, ids: Sequence[str]) -> str:
        return ""
