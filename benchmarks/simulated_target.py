"""The simulated target the tests and the benchmarks share: a range of commits with planted steps, trials drawn
with noise, and the two loops that let the engine search it — one trial at a time (``search``) or on several nodes
at once (``search_on_nodes``, an event-driven cluster).

Who uses it: tests/test_bisect.py (``SimulatedTarget``, ``drive``/``drive_with`` over ``search``), and through
it test_batch.py, test_decisive.py and test_edges_engine.py; benchmarks/strategies.py (its scenarios' levels are
``step_levels``, and ``run_perfbisect``/``run_perfbisect_nodes`` drive the engine with ``search`` and
``search_on_nodes``). The demo's stand-in GPU server is a different thing (perfbisect/demo/emulator.py): it
serves HTTP for the real pipeline, this feeds the search policy directly.

Only the engine's public API: ``SearchPolicy.next`` and ``next_batch``, ``Done``, ``model.Observation``.

Random draws: nothing here draws a number except ``SimulatedTarget.trial``; the loops call the caller's own
``measure``/``run`` in the order the policy asks, so a seeded test or benchmark cell gets exactly the draws it
always had. What this module does not unify, and why: strategies.py's ``Target`` draws a session effect of
sd log1p(σ_b) from the scenario's noise process plus the median of 5 runs, from streams seeded per part
(``[seed, 2]``, ``[seed, 3]`` …), and keeps a simulated clock; ``SimulatedTarget`` draws one N(0, σ/100) per
trial from one stream. Making either draw like the other would change every seeded outcome the tests and the
recorded benchmark tables rest on, so both keep their draws and share the levels and the loops.
"""

from __future__ import annotations

import heapq
import math
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from perfbisect.engine.bisect import SearchPolicy
from perfbisect.engine.observations import Done, Measure
from perfbisect.model import BisectOutcome, Observation

LOG82 = math.log(82.0)  # every simulated commit's level before its steps: 82 (a throughput), log scale


def step_levels(n: int, steps: Mapping[int, float] | Iterable[tuple[int, float]], base: float = LOG82) -> np.ndarray:
    """The log level of each of ``n`` commits: ``base``, moved by each step (commit index → percent) from its
    commit on, the steps applied in the order given."""
    levels = np.full(n, base)
    for k, pct in (steps.items() if isinstance(steps, Mapping) else steps):
        levels[k:] += math.log1p(pct / 100)
    return levels


class SimulatedTarget:
    """A fake GPU node: per-commit levels, one N(0, σ) session per trial, optional untestable commits and a
    slow-down of the whole machine from a given trial on."""

    def __init__(self, steps: dict[int, float], n: int, sigma_pct: float, seed: int,
                 untestable: frozenset[int] = frozenset(), shift_good_after: int | None = None):
        self.levels = step_levels(n, steps)
        self.sigma = sigma_pct / 100
        self.rng = np.random.default_rng(seed)
        self.untestable = untestable
        self.shift_good_after = shift_good_after

    def trial(self, j: int, seq: int) -> float | None:
        """Commit ``j``'s summary in the ``seq``-th trial of the run (None: it cannot be tested)."""
        if j in self.untestable:
            return None
        level = self.levels[j]
        if self.shift_good_after is not None and seq >= self.shift_good_after:
            level += math.log(0.85)  # the whole machine slows down: same code, different state
        return float(level + self.rng.normal(0.0, self.sigma))


def search(policy: SearchPolicy, measure: Callable[[Measure, list[Observation]], None],
           limit: int) -> tuple[BisectOutcome, list[Observation]]:
    """Run ``policy`` to its verdict, one trial at a time: ``measure(act, obs)`` carries out the decision ``act``
    and appends what it stored to ``obs`` (one observation, or a flagged trial and its re-runs, or an untestable
    commit's None). Returns the outcome and every observation; raises after ``limit`` decisions."""
    obs: list[Observation] = []
    for _ in range(limit):
        act = policy.next(obs)
        if isinstance(act, Done):
            return act.outcome, obs
        measure(act, obs)
    raise RuntimeError(f"the policy did not finish in {limit} decisions")


def search_on_nodes(policy: SearchPolicy, nodes: Sequence[str],
                    run: Callable[[int, Measure, float], tuple[float, list[dict[str, Any]]]], *,
                    start: float = 0.0, limit: int = 400, initial: Sequence[Observation] = (),
                    named: bool = True, on_batch: Callable[[list[Measure]], None] | None = None,
                    ) -> tuple[BisectOutcome, list[Observation], float]:
    """Run ``policy`` to its verdict on a cluster of ``nodes``: an event-driven clock, ``next_batch`` for every
    free node given the trials in flight.

    ``run(k, m, now)`` starts the decision ``m`` on node ``k`` at time ``now`` and returns when its result comes
    back and what it stores: Observation fields without ``seq`` and ``host`` (``commit``, ``value``, and any of
    ``covariates``, ``at``, ``flag``). When a node's result comes back it is stored (``seq`` = completion order;
    ``host`` = the node's name, or None when ``named`` is false: a model that cannot see the nodes) and the
    policy is asked again for every free node; an empty batch leaves a node idle until the next result.
    ``initial``: observations stored before the run. Returns the outcome, every observation and the clock at
    the verdict; raises after ``limit`` results. ``on_batch`` sees each batch asked for (maybe empty) before it
    starts."""
    free = list(range(len(nodes)))
    inflight: dict[int, tuple[str, str]] = {}
    events: list = []
    obs: list[Observation] = list(initial)
    now = start
    for _ in range(limit):
        if free:
            act = policy.next_batch(obs, len(free), pending=list(inflight.values()), hosts=[nodes[k] for k in free])
            if on_batch is not None and not isinstance(act, Done):
                on_batch(act)
            if isinstance(act, Done):
                assert not inflight, "Done with trials in flight"
                return act.outcome, obs, now
            for m in act:
                k = nodes.index(m.host)
                free.remove(k)
                done_at, rows = run(k, m, now)
                inflight[k] = (m.commit, m.host)
                heapq.heappush(events, (done_at, k, rows))  # one event per node: k breaks every tie
        if not events:
            raise RuntimeError("the policy asked to wait with nothing in flight")
        now, k, rows = heapq.heappop(events)
        for row in rows:
            obs.append(Observation(**row, seq=len(obs), host=nodes[k] if named else None))
        del inflight[k]
        free.append(k)
    raise RuntimeError(f"the policy did not finish in {limit} results")
