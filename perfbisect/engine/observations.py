"""What the search answers with, and its own view of what it reads: the value types of the bisection policy.

The policy reads ``model.Observation``s (one trial's summary each: a value every layer passes, so the
measure layer builds them without importing the engine); ``Measure`` (run one more trial of a commit) and
``Done`` (the outcome) are what ``bisect.SearchPolicy.next`` and ``next_batch`` return. ``SearchData`` is
the policy's own view of the observations: the usable ones regrouped by commit index with their run-order
positions, nodes and layouts, the trials in flight beside them, and the ``Evidence`` the change-point
posterior is fitted on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .change_posterior import Evidence
from ..model import BisectOutcome, Reason

# The best answer as progress names it: per change, the testable commit and how many untestable commits before it
# share the blame; () is "no change".
Named = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Measure:
    """What to do next: run one more trial of ``commit``; ``why`` says why (a code and its numbers: ``report.words``
    writes the sentence, and what a check phase is checking)."""

    commit: str
    why: Reason
    phase: str = "locating"  # endpoints | locating | second-change check | confirming
    gain_bits: float = 0.0  # uncertainty about the answer this trial is expected to remove
    best: Named | None = None  # the best answer so far (for progress), when the search has one
    p: float | None = None  # its posterior probability
    host: str | None = None  # the node to run it on (next_batch with ``hosts``); None = any node
    vary_layout: bool = False  # run it under a layout its commit has not had yet, even when layouts are fixed
    # the trial this is as the budget counts them (1-based, at most stats.max_trials_total): untestable commits
    # are observations but not trials of the budget, so this is not the observation's position
    trial: int = 0
    p_none: float | None = None  # the posterior of "no change at all" (``p`` is given that something changed)
    needs: int | None = None  # about how many more trials that check needs at the noise measured so far


@dataclass(frozen=True)
class Done:
    """The search is over."""

    outcome: BisectOutcome


@dataclass
class SearchData:
    """Usable observations regrouped by commit index, with their run-order positions."""

    values: list[list[float]]  # per commit, log summaries (adjusted for exogenous state where earned)
    times: list[list[int]]  # per commit, run-order position of each value
    untestable: set[int]
    trials: int  # usable trials
    spent: int  # every trial run, excluded ones included (the budget counts these)
    excluded: list[str]  # "c0ffee1234: throttled: HwSlowdown" per excluded trial
    notes: list[str]  # covariate sentences
    hosts: list[list[str]] = field(default_factory=list)  # per commit, the node of each value ("" = unnamed)
    pending: list[tuple[int, str | None]] = field(default_factory=list)  # trials in flight: (commit, node)
    layouts: list[list[str | None]] = field(default_factory=list)  # per commit, the layout of each value

    @property
    def host_names(self) -> list[str]:
        """Nodes of the usable trials, in order of first appearance by commit (a stable numbering)."""
        seen: dict[str, int] = {}
        for hs in self.hosts:
            for h in hs:
                seen.setdefault(h, len(seen))
        return list(seen)

    def host_index(self, host: str | None) -> int:
        """Index of ``host`` in ``host_names``; -1 for a node that has no usable trial yet."""
        names = self.host_names
        return names.index(host) if host in names else -1

    def count(self, i: int) -> int:
        """Trials of commit ``i``: usable ones and those in flight."""
        return len(self.values[i]) + sum(1 for j, _ in self.pending if j == i)

    def count_on(self, i: int, host: str | None) -> int:
        """Trials of commit ``i`` on ``host``: usable ones and those in flight."""
        hs = self.hosts[i] if self.hosts else []
        return sum(1 for h in hs if h == (host or "")) + sum(1 for j, h in self.pending if j == i and h == host)

    def evidence(self, n: int) -> Evidence:
        commit, time, value, host = [], [], [], []
        names = {h: k for k, h in enumerate(self.host_names)}
        for i, (vs, ts) in enumerate(zip(self.values, self.times)):
            hs = self.hosts[i] if self.hosts else [""] * len(vs)
            for v, t, h in zip(vs, ts, hs):
                commit.append(i)
                time.append(t)
                value.append(v)
                host.append(names[h])
        nt = np.arange(n)
        nxt = n - 1
        for k in range(n - 1, -1, -1):
            if k not in self.untestable:
                nxt = k
            nt[k] = nxt
        order = np.argsort(np.asarray(time), kind="stable")
        hosts = np.asarray(host, dtype=int)[order] if len(names) > 1 else None
        return Evidence(
            np.asarray(commit, dtype=int)[order], np.asarray(time, dtype=float)[order],
            np.asarray(value, dtype=float)[order], n, nt, hosts,
        )


__all__ = ["Done", "Measure", "Named", "SearchData"]
