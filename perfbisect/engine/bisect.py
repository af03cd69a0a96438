"""The bisection policy: pure logic over observations (no git, no servers, no database).

``SearchPolicy.next(observations)`` is a deterministic function of the constructor arguments and
the observations, so a bisection resumed from the database replays to the same state.

How it decides (DESIGN.md §5):

1. Each endpoint is measured once; from then on every trial (endpoints, midpoints, repeats) feeds
   one posterior over "no change", "the first change is at k" and "changes at k1 and k2"
   (changepoint.py), in which the segment levels, the noise σ *and the machine's drift over the run
   order* are integrated out. A commit is never confounded with when it was measured: trials far
   apart in time count for less when the data show drift, contrasts of neighbouring trials keep
   their weight.
2. Every decision is a posterior threshold, so looking after every trial does not inflate its error
   rate (the thresholds are checked by simulation in benchmarks/strategies.py):
   - ``same`` when "no change ≥ min_effect" holds ``confidence`` of the posterior;
   - ``improved`` (nothing to bisect) when the bad end is faster than the good one beyond the
     minimum effect with probability ``confidence``;
   - a change is named when its location holds ``confidence`` and "no change" is below
     tuning.no_change_doubt; a second change is searched for only while trials are expected to move the
     answer (tuning.second_change_doubt and tuning.min_gain_bits), never until a budget runs out.
3. The next commit is the one whose next trial is expected to remove the most uncertainty about
   the answer (a one-step look-ahead over the posterior's predictive distributions, drift included:
   lookahead.py). A located change and the endpoints' gap are sized in effects.py.
4. The culprit is the first located change that is a *regression*; a located improvement is reported
   as such, never as the first bad commit. The commits on each side of a named change carry at
   least tuning.min_trials_at_change trials each, so a single wild session cannot carry a verdict; they must
   differ on their own trials beyond the spread of repeated trials of one build (tuning.pure_alpha), and a
   step under tuning.small_step_sigmas·σ carries tuning.small_step_trials a side and tuning.ends_before_naming per endpoint.
5. Trials flagged by the runner (throttled by an external cause, contended) are excluded and said so.
   Only state the code cannot cause (external clock caps, other processes' load, the temperature a
   trial started at) may adjust trial summaries; power, utilisation, the load's own clock and
   temperature are mediators: shown, never adjusted for.
6. Untestable commits (value None) are never measured again and never blamed: a change next to
   them is reported as the set of skipped commits plus the first testable bad one.
7. Several nodes (``next_batch``): up to k trials at once, picked greedily, each scored given the
   results still in flight; when trials come from more than one node, each node's level offset is
   a random effect (prior sd tuning.host_offset_prior_pct) integrated out of the posterior, so a slow node
   is never a slow commit. The noise σ stays one for the bisection (shared by its nodes).

Where each part lives: the values it reads and answers with in observations.py; the steps of one decision,
in the order above, over an explicit state (``Look``) in decision.py; the checks a located change passes
before it is named in change_checks.py; the outcome builders in outcomes.py; the constants in tuning.py.
``SearchPolicy`` (here) is the entry point — ``next``, ``next_batch`` — and the posterior it decides on.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import numpy as np

from .change_checks import LocatedChecks
from .change_posterior import ChangePosterior, Evidence
from .changepoint import RHO_GRID, RHO_PRIOR, outlier_scale, posterior
from .decision import DecisionSteps
from ..errors import UsageError
from .observations import Done, Measure, SearchData
from ..model import Observation
from .outcomes import Outcomes
from ..settings import StatsConfig
from .covariates import covariate_notes
from .stats import PRIOR_DOF_CAP, NoiseModel, log_of_pct, pooled_squares, variance_ratio_test
from .tuning import DEFAULT_TUNING, Tuning


class SearchPolicy(DecisionSteps, LocatedChecks, Outcomes):
    """Decide which commit to measure next, or stop with an outcome (see the module docstring)."""

    def __init__(
        self,
        commits: Sequence[str],
        settings: StatsConfig,
        noise: NoiseModel,
        history: Sequence[Observation] = (),
        higher_is_better: bool = True,
        tuning: Tuning = DEFAULT_TUNING,
    ):
        commits = list(commits)
        if len(commits) < 2:
            raise UsageError(
                f"A bisection needs a good and a bad commit; got {len(commits)} candidate(s). "
                f"Pass two different revisions, good first (e.g. `perfbisect run good=bba2fc4 bad=HEAD`)."
            )
        if len(set(commits)) != len(commits):
            raise UsageError(
                "The candidate commit list repeats a commit. Build it from the first-parent range "
                "good..bad, oldest first, each commit once."
            )
        self.commits = commits
        self.index = {c: i for i, c in enumerate(commits)}
        self.settings = settings
        self.noise = noise
        self.history = tuple(history)
        self.higher_is_better = higher_is_better
        self.tuning = tuning
        self.n = len(commits)

    # ----------------------------------------------------------------------------------------
    # public

    def next_batch(
        self,
        observations: Sequence[Observation],
        k: int,
        pending: Sequence[str | Measure | tuple[str, str | None]] = (),
        hosts: Sequence[str] | None = None,
    ) -> list[Measure] | Done:
        """Up to ``k`` trials to start now, given the trials in flight (``pending``).

        ``pending``: one entry per trial started and not yet stored (a commit may repeat), as a
        commit, a ``Measure`` (its ``host`` is read) or a (commit, host) pair. ``hosts``: the nodes
        free now; each returned Measure is pinned to one of them (``Measure.host``), in their order,
        and at most ``len(hosts)`` are returned. Without ``hosts`` the trials may run anywhere.

        Greedy joint selection: slot by slot, each choice is ``next``'s decision with the pending
        trials and the earlier choices of this batch counted as started — their commits count
        towards the endpoints' interleaving, the trials each side of a change needs and the budget,
        and the look-ahead scores a commit by what it is expected to tell *given* their results
        (``lookahead.conditional_gain``) — so a batch spreads over distinct, useful commits (the
        midpoints of several sub-ranges at once, as Pinpoint does), and each node measures the
        endpoint it lacks while the endpoints are being compared, a reference for its own offset.

        A pure function of the stored observations and the pending list: results may arrive in any
        order (``seq`` = completion order). An empty list means "wait for a pending result". Done
        comes only when nothing is pending: a verdict is stated on every trial that was started
        (a result in flight could still move it; the controller waits for it rather than cancel it).
        With ``k = 1``, nothing pending and no hosts this is exactly ``next``.
        """
        pend = [self._pending_item(p) for p in pending]
        free: list[str | None] = list(hosts) if hosts is not None else [None] * max(k, 0)
        out: list[Measure] = []
        memo: dict = {}  # the regrouped data and the posterior: one per batch, whatever the slot
        for slot in range(min(k, len(free))):
            act = self._decide(observations, pend + [(m.commit, m.host) for m in out], free[slot], memo)
            if isinstance(act, Done):
                return act if not pend and not out else out
            out.append(replace(act, host=free[slot]) if free[slot] is not None else act)
        return out

    def _pending_item(self, p) -> tuple[str, str | None]:
        if isinstance(p, Measure):
            commit, host = p.commit, p.host
        elif isinstance(p, str):
            commit, host = p, None
        else:
            commit, host = p
        if commit not in self.index:
            raise UsageError(
                f"A pending trial names commit {str(commit)[:10]}, which is not in this bisection's range. "
                f"Pass the commits of the trials in flight for this bisection only."
            )
        return commit, host

    def next(self, observations: Sequence[Observation]) -> Measure | Done:
        """The next trial to run, or Done with the outcome; a pure function of the observations."""
        return self._decide(observations, (), None)

    def next_and_posterior(self, observations: Sequence[Observation]):
        """``next``, and the change-point posterior it decided on (fitted here when it decided before needing
        one, while the endpoints were measured first): what a replay shows at each step, fitted once."""
        memo: dict = {}
        action = self._decide(observations, (), None, memo)
        return action, memo["post"] if "post" in memo else self.posterior(observations)

    def posterior(self, observations: Sequence[Observation]):
        """The change-point posterior over the observations (as the search fits it)."""
        return self._posterior(self._regroup(observations))

    def _decide(self, observations: Sequence[Observation], pending: Sequence[tuple[str, str | None]],
                host: str | None, memo: dict | None = None) -> Measure | Done:
        """``next`` with trials in flight (``pending``: (commit, node)) counted as started, for ``host``.

        ``memo`` carries the regrouped observations and their posterior from one slot of a batch to
        the next (they depend on the stored observations only). Every trial asked for once there is a
        posterior names the best answer and its probability (progress shows them: a confirming trial
        left the locating step's answer on the progress line)."""
        memo = {} if memo is None else memo
        act = self._decide_step(observations, pending, host, memo)
        if isinstance(act, Measure) and not act.best and "post" in memo:
            top_key, top_p = memo["post"].answer()
            act = replace(act, best=self._progress_key(memo["data"], top_key) or "no change", p=top_p)
        if isinstance(act, Measure):
            act = replace(act, trial=memo["data"].spent + len(pending) + 1)
        return act

    # ----------------------------------------------------------------------------------------
    # observations

    def _regroup(self, observations: Sequence[Observation]) -> SearchData:
        ordered = sorted(enumerate(observations), key=lambda io: (io[1].seq, io[0]))
        values: list[list[float]] = [[] for _ in range(self.n)]
        times: list[list[int]] = [[] for _ in range(self.n)]
        untestable: set[int] = set()
        excluded: list[str] = []
        rows = []
        for pos, (_, o) in enumerate(ordered):
            i = self.index.get(o.commit)
            if i is None:
                raise UsageError(
                    f"Observation for commit {o.commit[:10]} which is not in this bisection's range. "
                    f"Resume the bisection with the same good/bad revisions it was started with."
                )
            if o.value is None or not math.isfinite(o.value):
                untestable.add(i)
                continue
            if o.flag:
                excluded.append(f"{o.commit[:10]}: {o.flag}")
                continue
            rows.append((i, pos, float(o.value), o.covariates, o.host or "", o.layout))
        # A commit that failed once is untestable: its earlier values (if any) are kept out too,
        # since a build that sometimes fails is not one identity to compare.
        rows = [r for r in rows if r[0] not in untestable]
        adjusted, notes = covariate_notes(
            [r[2] for r in rows], [r[3] for r in rows], [r[0] for r in rows], alpha=self.settings.alpha,
            higher_is_better=self.higher_is_better,
        )
        hosts: list[list[str]] = [[] for _ in range(self.n)]
        layouts: list[list[str | None]] = [[] for _ in range(self.n)]
        for (i, pos, _, _, h, lay), v in zip(rows, adjusted):
            values[i].append(v)
            times[i].append(pos)
            hosts[i].append(h)
            layouts[i].append(lay)
        return SearchData(values, times, untestable, len(rows), len(rows) + len(excluded), excluded, notes, hosts,
                     layouts=layouts)

    def _budget_left(self, data: SearchData, i: int) -> bool:
        s = self.settings
        cap = s.max_trials_per_commit or s.max_trials_total  # 0: no cap per commit, the look-ahead allocates
        return data.spent + len(data.pending) < s.max_trials_total and data.count(i) < cap

    def _noise_with(self, data: SearchData) -> NoiseModel:
        """The noise model sharpened by this bisection's own repeats of identical builds."""
        return NoiseModel.from_groups([v for v in data.values if len(v) >= 2], prior=self.noise)

    def _parent(self, b: int, data: SearchData) -> int:
        p = b - 1
        while p > 0 and p in data.untestable:
            p -= 1
        return p

    # ----------------------------------------------------------------------------------------
    # posterior

    def _level_prior_ratio(self, data: SearchData) -> float:
        """Prior variance of segment levels as a multiple of σ²: wide enough for the endpoints' gap."""
        a, b = data.values[0], data.values[-1]
        gap = abs(float(np.mean(b)) - float(np.mean(a))) if a and b else 0.0
        return max(4.0, 2.0 * (gap / self.noise.sigma_b) ** 2)

    def _tolerance(self) -> float:
        """The regression `same` must rule out (percent): stats.tolerance_pct, or the older key's value."""
        s = self.settings
        return s.stop_when_ruled_out_pct or s.tolerance_pct

    def _posterior(self, data: SearchData) -> ChangePosterior:
        """The change-point posterior, with wild sessions down-weighted once there are enough trials to see them."""
        ev = data.evidence(self.n)
        post = self._fit(ev, data)
        scale = None
        if ev.trials >= self.tuning.robust_min_trials:
            scale = outlier_scale(post)
            if scale is not None:
                post = self._fit(replace(ev, scale=scale), data)
        if self.tuning.side_scale_alpha > 0:
            side = self._side_scale(data, ev, post)
            if side is not None:
                post = self._fit(replace(ev, scale=side if scale is None else scale * side), data)
        return post

    def _side_spreads(self, data: SearchData, key) -> list[tuple[float, float] | None] | None:
        """Per segment of the answer ``key``, its repeat variance and dof (None: fewer than 2 dof), when the
        segments' repeat spreads differ beyond chance (two-sided F test of the noisiest against the quietest
        at tuning.side_scale_alpha); else None: one spread serves the whole range."""
        if not key:
            return None
        bounds = [0, *sorted(key), len(data.values)]
        var: list[tuple[float, float] | None] = []
        for a, b in zip(bounds, bounds[1:]):
            ss, dof = pooled_squares(data.values[a:b])
            var.append((ss / dof, dof) if dof >= 2 and ss > 0 else None)
        known = [v for v in var if v is not None]
        if len(known) < 2:
            return None
        hi, lo = max(known), min(known)
        if variance_ratio_test(math.sqrt(hi[0]), hi[1], math.sqrt(lo[0]), lo[1])[1] >= self.tuning.side_scale_alpha:
            return None
        return var

    def _side_scale(self, data: SearchData, ev: Evidence, post: ChangePosterior) -> np.ndarray | None:
        """Per trial, its segment's repeat variance over the quietest segment's (under the best answer), when
        the segments' repeat spreads differ beyond chance (``_side_spreads``); else None."""
        key, _ = post.answer()
        var = self._side_spreads(data, key)
        if var is None:
            return None
        known = [v for v in var if v is not None]
        lo = min(known)
        pooled = sum(v * d for v, d in known) / sum(d for _, d in known)
        mult = np.array([(v[0] if v is not None else pooled) for v in var]) / lo[0]
        bounds = [0, *sorted(key), len(data.values)]
        seg = np.searchsorted(np.asarray(bounds[1:-1]), ev.commit, side="right")
        return np.clip(mult[seg], 1.0, self.tuning.side_scale_max)

    def _fit(self, ev: Evidence, data: SearchData) -> ChangePosterior:
        return posterior(
            ev,
            sigma0=self.noise.sigma_b,
            dof0=min(self.noise.dof, PRIOR_DOF_CAP),
            level_ratio=self._level_prior_ratio(data),
            min_step=log_of_pct(self.settings.min_effect_pct),
            no_change_prior=self.tuning.no_change_prior,
            two_change_prior=self.tuning.two_change_prior if self.n >= 3 else 0.0,
            # drift_check = false: trials are i.i.d. given their commit (the model before drift).
            rho_grid=RHO_GRID if self.settings.drift_check else (0.0,),
            rho_prior=RHO_PRIOR if self.settings.drift_check else (1.0,),
            host_ratio=(log_of_pct(self.tuning.host_offset_prior_pct) / self.noise.sigma_b) ** 2,
            extra_edges=tuple(sorted({i for i, _ in data.pending})),
        )


__all__ = ["SearchPolicy"]
