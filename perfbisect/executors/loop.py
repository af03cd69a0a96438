"""The search loop: one for every executor.

A bisection's search asks the policy (``engine.bisect.SearchPolicy``) what to measure, hands each measurement to
an executor, and turns each result into the next observation, stored as it lands with the decision that asked for
it. Where the trials run is the executor's business: ``LocalExecutor`` (this host, one trial at a time) and
``SlurmExecutor`` (one Slurm job per measurement, up to ``[executor] nodes`` at once) speak the same small
interface (``Executor``), so the local and the cluster search are the same loop, store the same rows and replay
the same way in the report.

Each decision is stored with what it was decided on (``batch_decision``): how many observations were stored, the
measurements in flight and the node it was asked for. A cluster job's result may land after others submitted
later, so its observation's ``seq`` (completion order) is not when it was decided; the report replays it with its
own context (``report.replay``) and checks it as it checks a local decision.

With one slot, nothing in flight and no node (the local executor) ``SearchPolicy.next_batch`` is exactly
``SearchPolicy.next``: the local search decides as it always did.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol, Sequence

from ..engine.bisect import SearchPolicy
from ..engine.observations import Done, Measure
from ..model import Observation
from ..report import words
from ..report.replay import decision_json
from ..errors import InfrastructureError
from ..runtime.progress import Progress
from ..store.database import Store


@dataclass(frozen=True)
class Landed:
    """One measurement's result, back from an executor: the observation it becomes (its ``seq`` is given when
    it is stored), the trials it is made of, the decision that asked for it, and the executor's own handle."""

    observation: Observation
    trial_ids: tuple[int, ...]
    decision: dict[str, Any] | None
    handle: Any = None  # the executor's (a Slurm job's row id); the loop hands it back in ``observed``


class Executor(Protocol):
    """Where a search's measurements run."""

    slots: int  # how many may be in flight at once
    what: str  # what its measurements are called in messages ("Slurm jobs")

    @property
    def in_flight(self) -> Sequence[Any]: ...  # started, result not yet collected

    @property
    def pending(self) -> list[tuple[str, str | None]]: ...  # (commit, node) of each one in flight

    def resume(self, observations: list[Observation]) -> None: ...  # pick up what a stopped search left

    def free_hosts(self, free: int) -> list[str | None]: ...  # a node for each free slot (None: anywhere)

    def submit(self, measure: Measure, decision: dict[str, Any]) -> None: ...

    def collect(self) -> list[Landed]: ...  # results that landed, oldest first

    def observed(self, landed: Landed, seq: int) -> None: ...  # its observation is stored as ``seq``

    def wait(self) -> None: ...  # until something may have landed

    def cancel_all(self, why: str) -> list[str]: ...  # stop what is in flight; what was stopped

    def interrupted_line(self, ids: Sequence[str]) -> str: ...  # what Ctrl-C stopped and what resume does


class Announce(Protocol):
    def __call__(self, measure: Measure, observations: Sequence[Observation]) -> None: ...


def batch_decision(measure: Measure, after: int, pending: Sequence[tuple[str, str | None]],
                   host: str | None) -> dict[str, Any]:
    """A decision as stored: what it asked for (``decision_json``) and what it was decided on — ``after``
    observations stored, ``pending`` (commit, node) in flight (this batch's earlier picks among them), for ``host``."""
    return {**decision_json(measure), "after": after, "pending": [[c, h] for c, h in pending], "host": host}


@dataclass
class SearchLoop:
    """One bisection's search over an executor; ``run`` returns the policy's Done."""

    store: Store
    policy: SearchPolicy
    bisection_id: int
    executor: Executor
    progress: Progress
    announce: Announce
    observations: list[Observation] = field(default_factory=list)

    def run(self) -> Done:
        ex = self.executor
        ex.resume(self.observations)
        try:
            while True:
                self._store_landed()
                free = ex.slots - len(ex.in_flight)
                action = self._ask(free) if free > 0 else []
                if isinstance(action, Done):
                    if ex.in_flight:
                        ids = ex.cancel_all("cancelled: the search finished without this measurement")
                        self.progress.info(f"search finished: cancelled {ex.what} {', '.join(ids)} still in flight")
                    return Done(words.explained(action.outcome))  # the engine's reason, worded as stored
                if not ex.in_flight and not action:
                    raise InfrastructureError(
                        f"The search of bisection #{self.bisection_id} asked for nothing while nothing was in flight; "
                        f"this is a bug, please report it. `perfbisect resume {self.bisection_id}` continues from what "
                        f"is stored."
                    )
                ex.wait()
        except KeyboardInterrupt:
            ids = ex.cancel_all("cancelled: perfbisect was interrupted")
            if ids:
                self.progress.warn(ex.interrupted_line(ids))
            raise

    def _ask(self, free: int) -> list[Measure] | Done:
        """Up to ``free`` measurements, each submitted with its decision as soon as it is chosen."""
        ex = self.executor
        pending, hosts = list(ex.pending), ex.free_hosts(free)
        action = self.policy.next_batch(self.observations, free, pending=pending, hosts=hosts)
        if isinstance(action, Done):
            return action
        for measure, host in zip(action, hosts):
            decision = batch_decision(measure, len(self.observations), pending, host)
            self.announce(measure, self.observations)
            ex.submit(measure, decision)
            pending.append((measure.commit, measure.host))
        return action

    def _store_landed(self) -> None:
        for landed in self.executor.collect():
            obs = replace(landed.observation, seq=len(self.observations))
            self.store.add_observation(
                self.bisection_id, obs.seq, obs.commit, obs.value, list(landed.trial_ids), obs.covariates,
                flag=obs.flag, layout=obs.layout, host=obs.host, decision=landed.decision,
            )
            self.executor.observed(landed, obs.seq)
            self.observations.append(obs)
