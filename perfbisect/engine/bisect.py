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

Where each part lives: the value types in observations.py; the kernel (observations → posterior) in kernel.py;
one decision's immutable view in view.py; the gates, in the order they run, in gates.py, with the pair checks and
the second-change probe they share in pair_checks.py; the outcome values in endings.py; the constants in tuning.py.
The engine answers with codes and numbers (``model.Reason``): ``report.words`` writes every sentence.
``SearchPolicy`` (here) builds the gates from its settings and runs them: ``next``, ``next_batch``, ``posterior``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from . import gates
from .change_posterior import ChangePosterior
from .endings import Endings
from .gates import Search
from .kernel import Fit, fit, regroup
from .observations import Done, Measure, SearchData
from .pair_checks import PairConfirm, SecondChange
from .stats import NoiseModel
from .tuning import DEFAULT_TUNING, Tuning
from .view import Range, View, look
from ..errors import UsageError
from ..model import Observation
from ..settings import StatsConfig


@dataclass
class _Fitted:
    """One batch's regrouped observations and the posterior fitted on them (they depend on the stored observations
    only, so every slot of a batch decides on the same fit: the first slot's, with the trials in flight then)."""

    data: SearchData | None = None
    post: ChangePosterior | None = None


class SearchPolicy:
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
        self.settings = settings
        self.noise = noise
        self.history = tuple(history)
        self.higher_is_better = higher_is_better
        self.tuning = tuning
        s, t = settings, tuning
        self.range = Range(tuple(commits), s.max_trials_total, s.max_trials_per_commit)
        self.index = self.range.index  # commit → its position in the range
        self.fit_params = Fit.of(noise, s, t, len(commits))
        # the regression `same` must rule out: stats.tolerance_pct, or the older key's value
        self.tolerance = s.stop_when_ruled_out_pct or s.tolerance_pct
        r = self.range
        endings = Endings(r, s.alpha, self.tolerance, higher_is_better, noise, self.history, t.same_alpha_share,
                          t.futility_min_per_end, t.futility_sigma_q, t.side_scale_alpha)
        ends = gates.EndpointTrials(r, endings)
        search = Search(r, endings, s.confidence, t.locate_min_gain_bits)
        confirm = PairConfirm(r, endings, s.confidence, noise.sigma_b, t.pure_alpha, t.pure_look_knee,
                              t.pure_look_power, t.min_trials_at_change, t.futility_sigma_q)
        second = SecondChange(r, s.second_change_z, t.second_change_pct, t.second_change_sigmas, t.second_change_share,
                              t.residual_gap_z, t.residual_probe_z, t.suspected_change_z, t.second_change_doubt,
                              t.residual_confirm_z, t.residual_confirm_max, t.residual_confirm_hidden)
        self.first = gates.EndpointsFirst(r, endings, ends)
        # the gates in the order they run (gates.py's docstring); the last, Naming, always answers
        self.gates: tuple[gates.Gate, ...] = (
            gates.EndpointVerdict(endings, ends, s.confidence, s.alpha, s.min_effect_pct, t.same_alpha_share,
                                  t.improved_min_per_side, t.same_no_change, higher_is_better),
            gates.SettleEndpoints(endings, ends, higher_is_better, t.same_no_change),
            gates.Locate(search, s.confidence, t.no_change_doubt),
            gates.SecondChangeDoubt(search, t.second_change_doubt, t.min_gain_bits),
            gates.Sized(r),
            gates.OneChange(r, endings, second),
            gates.PairChecks(r, confirm, noise.sigma_b, t.small_step_sigmas, t.small_step_trials,
                             t.ends_before_naming, t.change_trials_z, t.min_trials_at_change, t.max_trials_at_change,
                             higher_is_better),
            gates.LayoutRecheck(r, endings, s.layout_check_pct, t.min_trials_at_change, t.layout_extra_trials,
                                t.layout_min_distinct, t.layout_keep),
            gates.Naming(r, endings, s, higher_is_better, t.min_gain_bits),
        )

    @property
    def n(self) -> int:
        """Candidate commits, good and bad included."""
        return self.range.n

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
        fitted = _Fitted()
        for slot in range(min(k, len(free))):
            act = self._decide(observations, pend + [(m.commit, m.host) for m in out], free[slot], fitted)
            if isinstance(act, Done):
                return act if not pend and not out else out
            out.append(replace(act, host=free[slot]) if free[slot] is not None else act)
        return out

    def next(self, observations: Sequence[Observation]) -> Measure | Done:
        """The next trial to run, or Done with the outcome; a pure function of the observations."""
        return self._decide(observations, (), None, _Fitted())

    def next_and_posterior(self, observations: Sequence[Observation]) -> tuple[Measure | Done, ChangePosterior]:
        """``next``, and the change-point posterior it decided on (fitted here when it decided before needing
        one, while the endpoints were measured first): what a replay shows at each step, fitted once."""
        fitted = _Fitted()
        action = self._decide(observations, (), None, fitted)
        return action, fitted.post if fitted.post is not None else self.posterior(observations)

    def posterior(self, observations: Sequence[Observation]) -> ChangePosterior:
        """The change-point posterior over the observations, as the search fits it (kernel.fit)."""
        return fit(self._regroup(observations), self.fit_params)

    # ----------------------------------------------------------------------------------------
    # one decision

    def _pending_item(self, p) -> tuple[str, str | None]:
        if isinstance(p, Measure):
            commit, host = p.commit, p.host
        elif isinstance(p, str):
            commit, host = p, None
        else:
            commit, host = p
        if commit not in self.range.index:
            raise UsageError(
                f"A pending trial names commit {str(commit)[:10]}, which is not in this bisection's range. "
                f"Pass the commits of the trials in flight for this bisection only."
            )
        return commit, host

    def _regroup(self, observations: Sequence[Observation]) -> SearchData:
        return regroup(observations, self.range.index, alpha=self.settings.alpha,
                       higher_is_better=self.higher_is_better)

    def _decide(self, observations: Sequence[Observation], pending: Sequence[tuple[str, str | None]],
                host: str | None, fitted: _Fitted) -> Measure | Done:
        """``next`` with trials in flight (``pending``: (commit, node)) counted as started, for ``host``: the first
        gate that answers. Every trial asked for once there is a posterior names the best answer and its
        probability (progress shows them), and the trial it is as the budget counts them."""
        if fitted.data is None:
            fitted.data = self._regroup(observations)
        data = replace(fitted.data, pending=[(self.range.index[c], h) for c, h in pending])
        act = self.first.check(data, host)
        if act is None:
            act = self._run_gates(data, host, fitted)
        if isinstance(act, Measure) and act.best is None and fitted.post is not None:
            top_key, top_p = fitted.post.answer()
            act = replace(act, best=self.range.named(top_key, fitted.data), p=top_p)
        if isinstance(act, Measure):
            act = replace(act, trial=fitted.data.spent + len(pending) + 1)
        return act

    def _run_gates(self, data: SearchData, host: str | None, fitted: _Fitted) -> Measure | Done:
        if fitted.post is None:
            fitted.post = fit(data, self.fit_params)
        view: View = look(data, host, fitted.post, self.settings, sigma0=self.noise.sigma_b,
                          higher_is_better=self.higher_is_better, same_alpha_share=self.tuning.same_alpha_share,
                          min_trials_per_side=self.tuning.min_trials_per_side, tol=self.tolerance)
        for gate in self.gates:
            answer = gate.check(view)
            if isinstance(answer, View):
                view = answer
            elif answer is not None:
                return answer
        raise AssertionError("the last gate (Naming) always answers")


__all__ = ["SearchPolicy"]
