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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

import numpy as np

from .changepoint import RHO_GRID, RHO_PRIOR, ChangePosterior, Evidence, outlier_scale, posterior
from ..settings import StatsConfig
from .effects import Step, endpoint_comparison, is_regression, located_step, ruled_out_pct, step_comparison
from ..errors import UsageError
from .lookahead import best_trial
from .tuning import DEFAULT_TUNING, Tuning
from ..metrics import level_text, short_probability
from ..model import BisectOutcome, Comparison, Verdict
from .stats import (LOOK_ALPHA_SHARE, PRIOR_DOF_CAP, NoiseModel, chi2_quantile, covariate_notes, history_shift,
                    log_of_pct, normal_quantile, pct, pooled_squares, t_cdf, t_quantile, variance_ratio_test)

# What `stopped_by` adds when the budget ended with a check on the best answer still open (``settles`` reads it).
OPEN_CHECK_NOTE = "with a check on the best answer still open"
# The most further trials a price (what settling an open check would take) is counted up to; beyond it, "beyond".
PRICE_LIMIT = 100_000


@dataclass(frozen=True)
class Observation:
    """One trial's summary for a commit (log scale), or None when the commit cannot be tested."""

    commit: str
    value: float | None  # None = untestable: patch conflict, build failure, server never ready
    covariates: Mapping[str, float] = field(default_factory=dict)
    seq: int = 0  # order in which the trials ran: the drift model's time axis
    day: str = ""  # for history: the date it was measured ("11-28"); informs notes, never levels
    at: float | None = None  # wall-clock time the trial started (unix seconds), when known
    flag: str | None = None  # why this trial is excluded (throttled, contended); None = usable
    host: str | None = None  # the node that measured it (host fingerprint); None = the one local host
    layout: str | None = None  # the layout the trial ran under (env size, worktree path, hash seed); None = unrecorded


@dataclass(frozen=True)
class Measure:
    """What to do next: run one more trial of ``commit``; ``reason`` says why (for progress)."""

    commit: str
    reason: str
    phase: str = "locating"  # endpoints | locating | second-change check | confirming
    gain_bits: float = 0.0  # uncertainty about the answer this trial is expected to remove
    best: str = ""  # the best answer so far (for progress), when the search has one
    p: float | None = None  # its posterior probability
    host: str | None = None  # the node to run it on (next_batch with ``hosts``); None = any node
    vary_layout: bool = False  # run it under a layout its commit has not had yet, even when layouts are fixed
    # the trial this is as the budget counts them (1-based, at most stats.max_trials_total): untestable commits
    # are observations but not trials of the budget, so this is not the observation's position
    trial: int = 0


@dataclass(frozen=True)
class Done:
    """The search is over."""

    outcome: BisectOutcome


@dataclass(frozen=True)
class _Gate:
    """One check a located change must pass before it is named, as it stands now."""

    kind: str  # direction | trials | local | pure
    what: str  # what must hold, as the reason says it
    z: float | None  # where it stands (standard errors); None for a count of trials
    need: float  # its threshold: the z it must reach, or the trials each side must carry


@dataclass(frozen=True)
class _Located:
    """What a stop while confirming carries: the best answer, its probability, the endpoints and their bound."""

    key: tuple[int, ...]
    p: float
    ends: Comparison
    ruled_out: float | None


@dataclass
class _Data:
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

    def _decide_step(self, observations: Sequence[Observation], pending: Sequence[tuple[str, str | None]],
                     host: str | None, memo: dict) -> Measure | Done:
        """What ``_decide`` asks for, before the best answer is attached."""
        if "data" not in memo:
            memo["data"] = self._regroup(observations)
        data = replace(memo["data"], pending=[(self.index[c], h) for c, h in pending])
        s = self.settings
        good, bad = 0, self.n - 1
        for end in (good, bad):
            if end in data.untestable:
                return self._done(
                    Verdict.INCONCLUSIVE, data,
                    explanation=(
                        f"The {'good' if end == good else 'bad'} endpoint {self.commits[end][:10]} cannot be "
                        f"tested (patch conflict, build failure or server never ready), so there is nothing "
                        f"to bisect against. Pick an endpoint that builds and serves."
                    ),
                )
        for end in (good, bad):
            if not data.values[end] and not data.count(end):
                if not self._budget_left(data, end):
                    return self._exhausted(data, None, "the endpoints could not both be measured")
                return Measure(self.commits[end], "measuring the endpoints first (good, then bad)", "endpoints")
        if not data.values[good] or not data.values[bad]:
            # both started, not both back: while several nodes wait, they measure the endpoints too
            return self._measure_endpoint(data, None, None, None, host)

        if "post" not in memo:
            memo["post"] = self._posterior(data)
        post = memo["post"]
        counts = [len(v) for v in data.values]
        ends, _ = endpoint_comparison(post, counts, self._level_prior_ratio(data), s, self.higher_is_better)
        # What the endpoints rule out is looked at after every trial, so each look uses a stricter level
        # (tuning.same_alpha_share of alpha) for the claim "no regression ≥ X% at 1 − alpha" to hold over all looks.
        # ...and with the degrees of freedom of this bisection's own trials, not the prior's pseudo-trials:
        # a stored σ may be several times too small (issue #19), so it must not make the bound tight early.
        seq, p_better_seq = endpoint_comparison(
            post, counts, self._level_prior_ratio(data), replace(s, alpha=s.alpha * self.tuning.same_alpha_share),
            self.higher_is_better, dof=self._own_dof(post, data),
        )
        ruled_out = ruled_out_pct(seq, self.higher_is_better)
        top_key, top_p = post.answer()

        # No regression: "no change at all" holds the posterior, the bad end is faster, or a regression
        # as big as the tolerance is ruled out while no change is the likelier story. Each rests on at
        # least tuning.min_trials_per_side trials of each endpoint: one session per side cannot carry a verdict.
        # (a verdict reached on the endpoints is also their comparison's verdict in --json and the report: their
        # own rule — the whole interval inside ±min_effect_pct — read `inconclusive` beside a `same`)
        ends_ok = min(counts[good], counts[bad]) >= self.tuning.min_trials_per_side
        tol = self._tolerance()
        # With a tolerance, every `same` states that it is ruled out (the bound above, this bisection's own
        # dof): "no change anywhere" from a posterior that a stored σ's pseudo-trials still lean on is not enough.
        tol_ok = tol <= 0 or (ruled_out is not None and ruled_out < tol)
        if ends_ok and tol_ok and post.p_none >= 1.0 - (1.0 - s.confidence) * self.tuning.same_alpha_share:
            return self._done(
                Verdict.SAME, data, post=post, endpoint_cmp=replace(ends, verdict=Verdict.SAME), ruled_out=ruled_out,
                explanation=(
                    f"No regression beyond noise: no change of {s.min_effect_pct:g}% or more anywhere in the "
                    f"range holds {post.p_none:.3f} of the posterior after {data.trials} trials"
                    + (f"; no regression ≥ {ruled_out:.1f}% ({level_text(100 * (1 - s.alpha))}, one-sided)" if ruled_out is not None else "")
                    + "."  # the endpoints' effect and interval are their comparison's (one line, one field), not repeated here
                ),
            )
        if ends_ok and p_better_seq >= 1.0 - (1.0 - s.confidence) * self.tuning.same_alpha_share:
            return self._done(
                Verdict.IMPROVED, data, post=post, endpoint_cmp=replace(ends, verdict=Verdict.IMPROVED), ruled_out=ruled_out,
                explanation=(
                    f"The bad endpoint is faster than the good one (probability {p_better_seq:.3f} of a gain beyond "
                    f"{s.min_effect_pct:g}%): no regression to bisect."
                ),
            )
        if (ends_ok and tol > 0 and ruled_out is not None and ruled_out < tol
                and (post.p_none >= self.tuning.same_no_change or not is_regression(log_of_pct(ends.effect_pct), self.higher_is_better))):
            return self._done(
                Verdict.SAME, data, post=post, endpoint_cmp=replace(ends, verdict=Verdict.SAME), ruled_out=ruled_out,
                explanation=(
                    f"No regression ≥ {ruled_out:.1f}% ({level_text(100 * (1 - s.alpha))}, one-sided), inside the tolerance "
                    f"of {tol:g}% (stats.tolerance_pct), after {data.trials} trials; "
                    + (f"no change is the likelier story (posterior {post.p_none:.2f})" if post.p_none >= self.tuning.same_no_change
                       else "the bad end is, if anything, faster")
                    + "."
                ),
            )

        if post.p_none >= 0.5 or (tol > 0 and not is_regression(log_of_pct(ends.effect_pct), self.higher_is_better)):
            # No change is the likeliest story, or the bad end is if anything faster (no regression to
            # locate: the question is whether one as big as the tolerance is ruled out): the endpoints
            # settle it, interleaved — unless even a hopeful reading says the budget cannot.
            if ends_ok:
                futile = self._futile(data, post, ends, ruled_out, tol)
                if futile is not None:
                    return futile
            return self._measure_endpoint(data, post, ends, ruled_out, host)

        located = top_p >= s.confidence and post.p_none < self.tuning.no_change_doubt
        if not located:
            return self._search_step(data, post, top_key, top_p, ends, ruled_out, phase="locating", host=host)

        p_two = post.p_two
        doubt = None
        if len(top_key) == 1 and p_two >= self.tuning.second_change_doubt:
            step = self._search_step(data, post, top_key, top_p, ends, ruled_out, phase="second-change check",
                                     host=host)
            if isinstance(step, Done) or step.gain_bits >= self.tuning.min_gain_bits:
                return step
            doubt = p_two

        # Located: size each change under the posterior; the culprit is the first regression. Every check below
        # either passes, asks for a trial that can still settle it (saying where it stands), or ends the search
        # `inconclusive` with the best answer and the price of settling it: a verdict never skips its own check.
        steps = [located_step(post, top_key, b, self._parent(b, data), counts) for b in top_key]
        ctx = _Located(top_key, top_p, ends, ruled_out)
        if len(top_key) == 1:
            gaps = self._side_gaps(data, post, steps[0])  # the re-measure and the probe both read them
            again = self._gap_recheck(data, post, steps[0], gaps)
            if again is not None:
                j, gap = again
                return Measure(
                    self.commits[j],
                    f"second-change check: {self._progress_key(data, top_key)} holds {top_p:.3f} of the posterior, but "
                    f"the {'good' if j < steps[0].at else 'bad'} endpoint and the commit beside the change on its side differ by "
                    f"{gap:.1f} standard errors; measuring {self.commits[j][:10]} again before one change is accepted",
                    "second-change check",
                    best=self._progress_key(data, top_key),
                    p=top_p,
                )
            blocked = self._gap_recheck_blocked(data, post, steps[0], gaps)
            if blocked is not None:
                gap, price = blocked
                return self._exhausted(
                    data, post, f"one change was not accepted yet (an endpoint and the commit beside the change on its "
                                f"side differ by {gap:.1f} standard errors, to be measured again first)",
                    top_key=top_key, top_p=top_p, ends=ends, ruled_out=ruled_out, price=price,
                    price_of="measuring that pair again")
            probe, short = self._second_change_probe_for(data, post, steps[0], gaps)
            if probe is not None:
                return Measure(
                    self.commits[probe],
                    f"second-change check: {self._progress_key(data, top_key)} holds {top_p:.3f} of the posterior; "
                    f"measuring this side of it so a second level step would show",
                    "second-change check",
                    best=self._progress_key(data, top_key),
                    p=top_p,
                )
            if short is not None:
                return self._exhausted(
                    data, post, "one change was not accepted yet (a side of it has too few trials to show a second "
                                "level step)", top_key=top_key, top_p=top_p, ends=ends, ruled_out=ruled_out, price=short,
                    price_of="the trials that would show a second step on either side")
        for st in steps:
            gate = self._direction_gate(st)
            if gate is not None:
                return self._confirm(data, post, st, gate, ctx)
        pure = self._pure_error(data)
        sd_small = max(pure[0], self.noise.sigma_b)
        small = [st for st in steps if self.tuning.small_step_sigmas > 0 and abs(st.step) < self.tuning.small_step_sigmas * sd_small]
        for end in (0, self.n - 1) if small else ():
            if data.count(end) < self.tuning.ends_before_naming:
                return self._confirm_end(data, post, end, top_key, ctx)
        # One wild session must not carry a verdict alone: the commits on both sides of a change are
        # each measured at least twice before it is named (heavy-tailed session effects did that).
        for st in steps:
            need = self._trials_at_change(post, st)
            if st in small:
                need = max(need, self.tuning.small_step_trials)
            if min(data.count(st.parent), data.count(st.at)) < need:
                why = ("a second trial of each side, so no single session carries the verdict" if need <= self.tuning.min_trials_at_change
                       else f"{need} trials of each side: at {pct(post.sigma_top):.1f}% noise per trial a "
                            f"{abs(pct(st.step)):.1f}% step needs that many before sessions that fell on one side of "
                            f"the noise cannot carry it")
                return self._confirm(data, post, st, _Gate("trials", why, None, float(need)), ctx)
        # The change must also show between its own commit and its parent, not only between the segments
        # around it: sessions that happened to fall on the same side of the noise cannot carry it then.
        for st in steps:
            gate = self._local_gate(data, post, st)
            if gate is not None:
                return self._confirm(data, post, st, gate, ctx)
            gate = self._pure_gate(data, st, pure)
            if gate is not None:
                return self._confirm(data, post, st, gate, ctx)
        # Layout: a small change must hold under layouts its commits did not share (Mytkowicz et al.:
        # env size and code placement alone move timings by several percent). Re-measure, then keep it
        # only if every layout can be left out without the step vanishing.
        layout_sensitive: list[Step] = []
        for st in steps:
            if abs(pct(st.step)) >= s.layout_check_pct:
                continue
            ok, again = self._layout_check(data, st)
            if ok:
                continue
            extra = data.count(st.parent) + data.count(st.at) - 2 * self.tuning.min_trials_at_change
            if again is not None and extra < self.tuning.layout_extra_trials:
                if self._budget_left(data, again):
                    return Measure(
                        self.commits[again],
                        f"confirming the change at {self.commits[st.at][:10]} ({pct(st.step):+.1f}%) under another layout: "
                        f"a change smaller than {s.layout_check_pct:g}% must survive a different environment size, "
                        f"worktree path and hash seed before it is blamed ({extra + 2 * self.tuning.min_trials_at_change} of at most "
                        f"{self.tuning.layout_extra_trials + 2 * self.tuning.min_trials_at_change} trials of the pair so far)",
                        "confirming", vary_layout=True,
                    )
                # the budget ended before the re-check did: it was not failed, it was not made
                return self._exhausted(
                    data, post, f"the change at {self.commits[st.at][:10]} ({pct(st.step):+.1f}%) is smaller than "
                                f"{s.layout_check_pct:g}% and has not been re-measured under another layout yet",
                    top_key=top_key, top_p=top_p, ends=ends, ruled_out=ruled_out,
                    price=self.tuning.layout_extra_trials - extra, price_of="the layout re-check (at most)")
            layout_sensitive.append(st)
        steps = [st for st in steps if st not in layout_sensitive]
        if layout_sensitive and not steps:
            return self._done(
                Verdict.INCONCLUSIVE, data, post=post, endpoint_cmp=ends, ruled_out=ruled_out, top_key=top_key,
                layout_sensitive=tuple(self.commits[st.at] for st in layout_sensitive), probability=top_p,
                explanation=(
                    f"Layout-sensitive, not blamed: the change located at {self._describe_steps(data, layout_sensitive)} "
                    f"does not survive a change of layout — with the trials of one layout left out, the step "
                    f"shrinks below half its size or turns around. Environment size, worktree path length and "
                    f"hash seed move timings by several percent without any code change on the hot path "
                    f"(Mytkowicz et al., ASPLOS 2009); measure this commit with its parent again, or raise "
                    f"stats.layout_check_pct only if you know the benchmark is layout-proof."
                ),
            )
        regressions = [st for st in steps if is_regression(st.step, self.higher_is_better)]
        improvements = [st for st in steps if not is_regression(st.step, self.higher_is_better)]
        if not regressions:
            return self._done(
                Verdict.IMPROVED, data, post=post, endpoint_cmp=ends, ruled_out=ruled_out, top_key=top_key,
                improvements=tuple(self.commits[st.at] for st in improvements),
                explanation=(
                    f"The only change located is an improvement: {self._describe_steps(data, improvements)}. "
                    f"No regression to blame."
                ),
            )
        first = regressions[0]
        cmp = step_comparison(first, Verdict.REGRESSED, s)
        sides = self._side_spreads(data, top_key) if len(top_key) == 1 else None
        if sides is not None and all(v is not None for v in sides):
            # the sides' repeats spread differently and each is weighed by its own: say both, not the quieter one
            before, after = (pct(math.sqrt(v[0])) for v in sides)
            sd_own, dof_own = self._pure_error(data)
            # one noise figure for the verdict (the text's, --json's and the kept one): the spread of repeats over
            # the range; the sides' figures say what it is made of
            noise_text = (f"noise {pct(sd_own):.1f}% per trial over the range: {before:.1f}% per trial before it and "
                          f"{after:.1f}% from it on, each side weighed by its own")
            # ...and the comparison's own noise field (--json, the report) says so too: the posterior's σ is
            # the quieter side's, which is not the noise of this range
            own = dict(sigma_b_pct=pct(sd_own), sigma_source=(
                f"the spread of repeats over the range, {dof_own:g} dof; {before:.1f}% before the change and "
                f"{after:.1f}% from it on, each side weighed by its own"))
            cmp = replace(cmp, **own)
            # the endpoints' comparison is weighed the same way (its good end on one side, its bad end on the other)
            ends = replace(endpoint_comparison(post, counts, self._level_prior_ratio(data), s, self.higher_is_better,
                                               noise_text=noise_text)[0], **own)
        else:
            noise_text = f"noise {pct(first.sigma):.1f}% per trial"
            # the endpoints' comparison under the hypothesis the verdict names (its noise is the verdict's noise)
            ends = endpoint_comparison(post, counts, self._level_prior_ratio(data), s, self.higher_is_better,
                                       hypothesis=post.top(top_key))[0]
        # The step's size and interval are the culprit comparison's (the line under the verdict, --json's
        # culprit_comparison), the endpoints' gap theirs: said once each, not again here.
        expl = (
            f"First bad commit {self._describe_key(data, (first.at,))}: the level steps from the commits before it to "
            f"the commits from it on ({first.n_before} vs {first.n_after} trials, {noise_text}). Posterior "
            f"probability of this answer {top_p:.3f} given that something changed; of no change at all "
            f"{post.p_none:.1g}, after {data.trials} trials."
        )
        if len(regressions) > 1:
            expl += f" A further regression: {self._describe_steps(data, regressions[1:])}."
        if improvements:
            expl += f" An improvement was also located (not the culprit): {self._describe_steps(data, improvements)}."
        if doubt is not None:
            expl += (
                f" A second, smaller change elsewhere keeps {doubt:.2f} of the whole posterior and further trials "
                f"are not expected to settle it (each < {self.tuning.min_gain_bits:g} bits): the first bad commit stands."
            )
        return self._done(
            Verdict.REGRESSED, data, post=post, endpoint_cmp=ends, culprit_cmp=cmp, ruled_out=ruled_out,
            top_key=top_key, culprit=first.at,
            extra=tuple(self.commits[st.at] for st in regressions[1:]),
            improvements=tuple(self.commits[st.at] for st in improvements),
            probability=top_p, explanation=expl,
        )

    # ----------------------------------------------------------------------------------------
    # observations

    def _regroup(self, observations: Sequence[Observation]) -> _Data:
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
        return _Data(values, times, untestable, len(rows), len(rows) + len(excluded), excluded, notes, hosts,
                     layouts=layouts)

    def _budget_left(self, data: _Data, i: int) -> bool:
        s = self.settings
        cap = s.max_trials_per_commit or s.max_trials_total  # 0: no cap per commit, the look-ahead allocates
        return data.spent + len(data.pending) < s.max_trials_total and data.count(i) < cap

    def _noise_with(self, data: _Data) -> NoiseModel:
        """The noise model sharpened by this bisection's own repeats of identical builds."""
        return NoiseModel.from_groups([v for v in data.values if len(v) >= 2], prior=self.noise)

    # ----------------------------------------------------------------------------------------
    # posterior

    def _level_prior_ratio(self, data: _Data) -> float:
        """Prior variance of segment levels as a multiple of σ²: wide enough for the endpoints' gap."""
        a, b = data.values[0], data.values[-1]
        gap = abs(float(np.mean(b)) - float(np.mean(a))) if a and b else 0.0
        return max(4.0, 2.0 * (gap / self.noise.sigma_b) ** 2)

    def _tolerance(self) -> float:
        """The regression `same` must rule out (percent): stats.tolerance_pct, or the older key's value."""
        s = self.settings
        return s.stop_when_ruled_out_pct or s.tolerance_pct

    def _posterior(self, data: _Data) -> ChangePosterior:
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

    def _side_spreads(self, data: _Data, key) -> list[tuple[float, float] | None] | None:
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

    def _side_scale(self, data: _Data, ev: Evidence, post: ChangePosterior) -> np.ndarray | None:
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

    def _fit(self, ev: Evidence, data: _Data) -> ChangePosterior:
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

    # ----------------------------------------------------------------------------------------
    # endpoints

    def _measure_endpoint(self, data: _Data, post: ChangePosterior | None, ends: Comparison | None,
                          ruled_out: float | None, host: str | None = None) -> Measure | Done:
        good, bad = 0, self.n - 1
        m = data.count(good) + data.count(bad)
        order = [good, bad, bad, good][m % 4]
        if host is not None and self._several_hosts(data, host):
            # each node measures the endpoint it has fewer trials of: a reference for its own offset
            on_good, on_bad = data.count_on(good, host), data.count_on(bad, host)
            if on_good != on_bad:
                order = good if on_good < on_bad else bad
        other = bad if order == good else good
        for i in (order, other):
            if self._budget_left(data, i):
                if post is None:
                    why = f"comparing the endpoints (interleaved good/bad, endpoint trial {m + 1}) while the first results are out"
                else:
                    story = (f"no change at all is likeliest (posterior {post.p_none:.2f})" if post.p_none >= 0.5
                             else "the bad end is, if anything, faster: no regression to locate")
                    why = (
                        f"comparing the endpoints (interleaved good/bad, endpoint trial {m + 1}): so far {ends.effect_pct:+.1f}%, "
                        f"{story}" + (f"; no regression ≥ {ruled_out:.1f}% already ruled out" if ruled_out is not None else "")
                    )
                return Measure(self.commits[i], why, "endpoints")
        why = ("no change at all is likeliest but not certain" if post is None or post.p_none >= 0.5
               else "the bad end looks faster, but a regression of the tolerance is not ruled out yet")
        return self._exhausted(data, post, why, ends=ends, ruled_out=ruled_out)

    @staticmethod
    def _several_hosts(data: _Data, host: str | None) -> bool:
        names = set(data.host_names) | {h or "" for _, h in data.pending} | {host or ""}
        return len(names) > 1

    # ----------------------------------------------------------------------------------------
    # search

    def _search_step(self, data: _Data, post: ChangePosterior, top_key, top_p, ends, ruled_out, phase: str,
                     host: str | None = None) -> Measure | Done:
        """Measure the commit whose next trial is expected to remove the most uncertainty about the answer."""
        def eligible(js) -> list[int]:
            return [j for j in js if j not in data.untestable and self._budget_left(data, j)]

        # A long range: the look-ahead chooses among the posterior's bin edges (measured commits, quantiles
        # of the change's location, a coarse grid), where its expected gains are exact; should none be
        # left, among at most 256 evenly spread commits.
        cand = eligible(post.edges.tolist()) if post.sparse else []
        if not cand:
            cand = eligible(range(self.n))
            if post.sparse:
                cand = cand[:: max(1, len(cand) // 256)]
        if not cand:
            return self._exhausted(data, post, f"the best answer holds {short_probability(top_p, 3)}", top_key=top_key, top_p=top_p,
                                   ends=ends, ruled_out=ruled_out)
        if not data.pending and host is None:
            j, bits = best_trial(post, cand, float(data.spent))
        else:
            hosts_on = post.host_ratio > 0.0
            hid = data.host_index(host) if hosts_on and host is not None else None
            inflight = [(i, float(data.spent + q), data.host_index(h) if hosts_on and h is not None else None)
                        for q, (i, h) in enumerate(data.pending)]
            j, bits = best_trial(post, cand, float(data.spent + len(data.pending)), host=hid, pending=inflight)
        what = self._progress_key(data, top_key) or "no change"
        decisive = [b for k in top_key for b in (k, self._parent(k, data))]
        if phase == "locating" and bits < self.tuning.locate_min_gain_bits and decisive and not any(
            self._budget_left(data, b) for b in decisive
        ):
            # The commits that would decide it (the best answer and its parent) are at their
            # per-commit budget and nothing else can move the answer: stop instead of spending the rest.
            return self._exhausted(
                data, post,
                f"the commits that decide it reached stats.max_trials_per_commit and no other trial can move "
                f"the answer (the best would remove {max(bits, 0.0):.3f} bits)", top_key=top_key, top_p=top_p, ends=ends,
                ruled_out=ruled_out,
            )
        return Measure(
            self.commits[j],
            f"{phase}: best answer so far {what} at p={top_p:.2f} (need {self.settings.confidence}); a trial of "
            f"this commit is expected to remove {max(bits, 0.0):.2f} bits of uncertainty",
            phase,
            bits,
            best=what,
            p=top_p,
        )

    # ----------------------------------------------------------------------------------------
    # confirming a located change: each check says where it stands, asks only for trials that can settle it

    def _direction_gate(self, st: Step) -> _Gate | None:
        """Open while the step's direction is not certain at ``confidence`` (its t against the quantile)."""
        z = abs(st.step) / st.se if st.se > 0 else math.inf
        need = t_quantile(self.settings.confidence, st.dof)
        if st.se > 0 and t_cdf(-z, st.dof) > 1.0 - self.settings.confidence:
            return _Gate("direction", "its direction is not certain yet", z, need)
        return None

    def _local_gate(self, data: _Data, post: ChangePosterior, st: Step) -> _Gate | None:
        """Open while the commit and its parent differ by less than tuning.local_z standard errors on their own trials."""
        if self.tuning.local_z <= 0:
            return None
        z = self._step_z(data, st, post.sigma_top)
        if z < self.tuning.local_z:
            return _Gate("local", f"the commit and its parent must differ by {self.tuning.local_z:g} standard errors on their own "
                                  f"trials", z, self.tuning.local_z)
        return None

    def _pure_gate(self, data: _Data, st: Step, pure: tuple[float, float]) -> _Gate | None:
        """Open while the pair's own contrast is under the one-sided t quantile at this look's share of tuning.pure_alpha,
        with σ the spread of repeats of one build (``_pure_error``)."""
        if self.tuning.pure_alpha <= 0:
            return None
        sd_own, dof_own = pure
        what = ("the commit and its parent must differ on their own trials beyond the spread of repeated trials of "
                "one build")
        if dof_own < 1:
            return _Gate("pure", what, 0.0, math.inf)
        z = self._step_z(data, st, sd_own)
        need = t_quantile(1.0 - self._pure_alpha(data, st), dof_own)
        return _Gate("pure", what, z, need) if z < need else None

    @staticmethod
    def _where(gate: _Gate, data: _Data, st: Step) -> str:
        """Where an open check stands: "z 3.43 against 4.71 needed", or the trials each side carries."""
        if gate.kind == "trials":
            return (f"the parent has {data.count(st.parent)} and the commit {data.count(st.at)} of {gate.need:g} trials "
                    f"each")
        if not math.isfinite(gate.need):
            return "no build has a repeated trial yet"
        return f"z {gate.z:.2f} against {gate.need:.2f} needed"

    @staticmethod
    def _alloc(cp: int, cc: int, m: int, room_p: int | None = None, room_c: int | None = None) -> tuple[int, int]:
        """``m`` more trials of a pair as the confirming step spends them (each to the side with fewer trials, the
        parent on a tie; a side out of room leaves its trials to the other): (to the parent, to the commit)."""
        if cp <= cc:
            d = min(m, cc - cp)
            xp, xc = d + (m - d + 1) // 2, (m - d) // 2
        else:
            d = min(m, cp - cc)
            xp, xc = (m - d + 1) // 2, d + (m - d) // 2
        if room_p is not None and xp > room_p:
            xp, xc = room_p, xc + xp - room_p
        if room_c is not None and xc > room_c:
            xp, xc = xp + xc - room_c, room_c
            if room_p is not None:
                xp = min(xp, room_p)
        return xp, xc

    def _projected(self, gate: _Gate, data: _Data, post: ChangePosterior, st: Step, pure: tuple[float, float],
                   xp: int, xc: int, hopeful: bool) -> tuple[float, float]:
        """(z, threshold) of a z check after ``xp`` more trials of the parent and ``xc`` of the commit: the means and
        the noise as measured, or, ``hopeful``, as a lucky run of those trials would leave them — their means the
        upper tuning.futility_sigma_q point of where the predictive puts them (the trials measured so far stay what they
        are: only the new ones can be lucky), and each new trial as quiet as the low end of the noise's estimate.
        A check that not even that reaches within the budget is one the budget cannot settle."""
        m = xp + xc
        luck = normal_quantile(1.0 - self.tuning.futility_sigma_q) if hopeful else 0.0

        def shift(sigma: float, nc: float, npar: float) -> float:
            # sd of how far xc new trials of the commit and xp of the parent move the difference of the means
            return sigma * math.sqrt(xc / (nc * (nc + xc)) + xp / (npar * (npar + xp)))

        def noise_after(sigma: float, dof: float) -> float:
            if not hopeful or dof < 1 or not m:
                return sigma
            low = sigma * math.sqrt(dof / chi2_quantile(1.0 - self.tuning.futility_sigma_q, dof))
            return math.sqrt((dof * sigma * sigma + m * low * low) / (dof + m))

        if gate.kind == "direction":
            nb, na = max(st.n_before, 1), max(st.n_after, 1)
            sigma = st.se / math.sqrt(1.0 / nb + 1.0 / na)
            d = abs(st.step) + luck * shift(sigma, na, nb)
            se = sigma * math.sqrt(1.0 / (nb + xp) + 1.0 / (na + xc))
            return d / max(se, 1e-12), t_quantile(self.settings.confidence, st.dof + m)
        vc, vp = data.values[st.at], data.values[st.parent]
        if not vc or not vp:
            return 0.0, math.inf
        sigma, dof = (post.sigma_top, post.dof) if gate.kind == "local" else pure
        if dof < 1:  # no build repeated yet: the first repeats will start the spread; the stated σ stands in
            sigma = max(sigma, self.noise.sigma_b)
        # trials in flight count as new ones: they are not in the means yet
        xc += data.count(st.at) - len(vc)
        xp += data.count(st.parent) - len(vp)
        m = xp + xc
        d = float(np.mean(vc) - np.mean(vp)) * (1.0 if st.step > 0 else -1.0) + luck * shift(sigma, len(vc), len(vp))
        z = d / max(noise_after(sigma, dof) * math.sqrt(1.0 / (len(vc) + xc) + 1.0 / (len(vp) + xp)), 1e-12)
        if gate.kind == "local":
            return z, self.tuning.local_z
        dof_m = dof + m
        if dof_m < 1:
            return z, math.inf
        k = max(1, len(vc) + len(vp) + m - 2 * self.tuning.min_trials_at_change + 1)
        alpha = self.tuning.pure_alpha / (k * max(1.0, k / self.tuning.pure_look_knee)) ** self.tuning.pure_look_power
        return z, t_quantile(1.0 - alpha, dof_m)

    def _settles_in(self, gate: _Gate, data: _Data, post: ChangePosterior, st: Step, pure: tuple[float, float],
                    limit: int, room_p: int | None = None, room_c: int | None = None, hopeful: bool = False) -> int | None:
        """The fewest further trials of the pair (at most ``limit``, spent as ``_alloc`` spends them) after which the
        check would pass; None when no count up to ``limit`` does."""
        cp, cc = data.count(st.parent), data.count(st.at)
        if gate.kind == "trials":
            need = int(gate.need)
            sp, sc = max(0, need - cp), max(0, need - cc)
            if (room_p is not None and sp > room_p) or (room_c is not None and sc > room_c) or sp + sc > limit:
                return None
            return sp + sc
        top = limit if room_p is None or room_c is None else min(limit, room_p + room_c)
        m = 1
        while m <= top:
            xp, xc = self._alloc(cp, cc, m, room_p, room_c)
            z, need = self._projected(gate, data, post, st, pure, xp, xc, hopeful)
            if z >= need:
                return m
            m += 1 if m < 200 else max(1, m // 50)
        return None

    def _confirm(self, data: _Data, post: ChangePosterior, st: Step, gate: _Gate, ctx: _Located) -> Measure | Done:
        """A trial of the pair for an open check — only while one within the budget can still settle it, even on a
        hopeful reading; else `inconclusive` with the best answer and the price of settling it (the budget spent:
        ``_exhausted``; budget left that cannot do it: ``_confirm_futile``)."""
        s = self.settings
        pure = self._pure_error(data)
        left = s.max_trials_total - data.spent - len(data.pending)
        cap = s.max_trials_per_commit or s.max_trials_total
        room_p = max(0, min(left, cap - data.count(st.parent)))
        room_c = max(0, min(left, cap - data.count(st.at)))
        where = self._where(gate, data, st)
        price = self._settles_in(gate, data, post, st, pure, PRICE_LIMIT)
        change = f"the change at {self.commits[st.at][:10]} ({pct(st.step):+.1f}%)"
        if left <= 0 or room_p + room_c == 0:
            return self._exhausted(
                data, post, f"{change} is located, but a check is still open: {gate.what} ({where})",
                top_key=ctx.key, top_p=ctx.p, ends=ctx.ends, ruled_out=ctx.ruled_out, price=price,
                price_of="confirming it against its parent")
        if self._settles_in(gate, data, post, st, pure, left, room_p, room_c, hopeful=True) is None:
            return self._confirm_futile(data, post, ctx, gate.what, where, left, price, pct(st.step),
                                        hopeful=gate.kind != "trials")
        side = st.parent if data.count(st.parent) <= data.count(st.at) else st.at
        if (room_p if side == st.parent else room_c) == 0:
            side = st.at if side == st.parent else st.parent
        more = (f"; about {price:,} more trial{'s' if price != 1 else ''} of the pair at the difference and noise "
                f"measured so far" if price is not None and gate.kind != "trials" else
                "" if gate.kind == "trials" else
                f"; at the difference and noise measured so far more trials would not get there — only a better "
                f"reading within the {left} left would")
        return Measure(
            self.commits[side],
            f"confirming the change at {self.commits[st.at][:10]} against its parent directly "
            f"({pct(st.step):+.1f}% so far): {gate.what} — {where}{more}",
            "confirming",
        )

    def _confirm_futile(self, data: _Data, post: ChangePosterior, ctx: _Located, what: str, where: str, left: int,
                        price: int | None, step_pct: float | None = None, hopeful: bool = True) -> Done:
        """`inconclusive` now: no trial within the budget can carry this check (``what``, standing at ``where``)
        across its threshold — even on a hopeful reading, for a z check — so spending the rest would not change the
        verdict. ``price``: the trials it would take at the difference and noise measured so far."""
        s = self.settings
        limit = (f"stats.max_trials_total = {s.max_trials_total}" if not s.max_trials_per_commit else
                 f"stats.max_trials_total = {s.max_trials_total}, stats.max_trials_per_commit = {s.max_trials_per_commit}")
        hope = (f" even on a hopeful reading (the next trials as lucky a run as 1 in {round(1 / self.tuning.futility_sigma_q)}, "
                f"the noise at the low end of its estimate)" if hopeful else "")
        size = f" ({step_pct:+.1f}%)" if step_pct is not None else ""
        cost = (f" At the difference and noise measured so far it would take about {price:,} more trials."
                if price is not None else
                f" At the difference and noise measured so far it would take beyond {PRICE_LIMIT:,} more trials.")
        trials_left = f"{left} trial{'s' if left != 1 else ''}"
        return self._done(
            Verdict.INCONCLUSIVE, data, post=post, endpoint_cmp=ctx.ends, ruled_out=ctx.ruled_out, top_key=ctx.key,
            probability=ctx.p, best=ctx.key, more_trials=price,
            stopped_by=f"confirmation: {what} cannot be settled within the {trials_left} left ({limit})",
            explanation=(
                f"Stopped early, inconclusive: the change at {self._describe_key(data, ctx.key)}{size} holds "
                f"{short_probability(ctx.p, 3)} of the posterior, but it is not named until {what}, and it stands at "
                f"{where}: the {trials_left} left in the budget ({limit}) cannot get it there{hope}." + cost
                + " Spending the rest of the budget would not change the verdict: raise stats.max_trials_total, or "
                  "quiet the benchmark."
            ),
        )

    def _confirm_end(self, data: _Data, post: ChangePosterior, end: int, top_key, ctx: _Located) -> Measure | Done:
        """A trial of an endpoint that carries fewer than tuning.ends_before_naming (a small step's verdict rests on both),
        or `inconclusive` with the price when the budget cannot give both endpoints theirs."""
        s = self.settings
        short = sum(max(0, self.tuning.ends_before_naming - data.count(e)) for e in (0, self.n - 1))
        left = s.max_trials_total - data.spent - len(data.pending)
        side = "good" if end == 0 else "bad"
        where = f"the {side} endpoint has {data.count(end)} of {self.tuning.ends_before_naming} trials"
        what = f"each endpoint must carry {self.tuning.ends_before_naming} trials before a small change is named"
        cap = s.max_trials_per_commit or s.max_trials_total
        fits = all(data.count(e) + max(0, self.tuning.ends_before_naming - data.count(e)) <= cap for e in (0, self.n - 1))
        if self._budget_left(data, end) and short <= left and fits:
            return Measure(
                self.commits[end],
                f"confirming the change at {self._progress_key(data, top_key)}: {where}; no verdict rests on fewer than "
                f"{self.tuning.ends_before_naming} on each side of the range", "confirming")
        if not self._budget_left(data, end):
            return self._exhausted(data, post, f"the change is located, but a check is still open: {what} ({where})",
                                   top_key=ctx.key, top_p=ctx.p, ends=ctx.ends, ruled_out=ctx.ruled_out, price=short,
                                   price_of="the endpoints' trials")
        return self._confirm_futile(data, post, ctx, what, where, left, short, hopeful=False)

    def _second_change_probe(self, data: _Data, post: ChangePosterior, st: Step,
                             gaps: list[tuple[float, tuple[int, int]]] | None = None) -> int | None:
        """A commit to measure so that a second step on either side of the change could show, or None
        (``_second_change_probe_for`` without the price of a side the budget leaves short)."""
        return self._second_change_probe_for(data, post, st, gaps)[0]

    def _second_change_probe_for(self, data: _Data, post: ChangePosterior, st: Step,
                                 gaps: list[tuple[float, tuple[int, int]]] | None = None) -> tuple[int | None, int | None]:
        """(a commit to measure so that a second step on either side of the change could show, or None; the trials
        a side still needs when the budget has none of its commits left, or None).

        For every split point inside a side segment, the trials on its two sides give an effective
        count n_a·n_b/(n_a + n_b); the weakest split must reach the count that shows the step at
        ``settings.second_change_z`` standard errors under the current noise.
        """
        z = self.settings.second_change_z
        if z <= 0:
            return None, None
        floor = max(log_of_pct(self.tuning.second_change_pct), self.tuning.second_change_sigmas * post.sigma_top)
        step = max(floor, self.tuning.second_change_share * abs(st.step))
        gap, _ = self._residual_gap(data, post, st, gaps)
        if self.tuning.residual_gap_z > 0 and gap >= self.tuning.residual_gap_z:
            # an endpoint differs from the commit next to the change on its side: look harder, same size
            z = max(z, self.tuning.residual_probe_z)
        if self.tuning.suspected_change_z > 0 and post.p_two >= self.tuning.second_change_doubt:
            # a second change is suspected: look for one as small as the floor, with more power
            z, step = max(z, self.tuning.suspected_change_z), floor
        need = (z * post.sigma_top / step) ** 2
        cnt = np.array([data.count(i) for i in range(self.n)], dtype=float)
        best: tuple[float, int] | None = None
        short: int | None = None
        for lo, hi in ((0, st.at), (st.at, self.n)):
            idx = np.array([j for j in range(lo, hi) if j not in data.untestable])
            if len(idx) < 2:
                continue
            c = cnt[idx]
            worst = _weakest_split(c)
            if worst >= need:
                continue
            lifted = _weakest_split_lifted(c)
            ok = np.array([self._budget_left(data, int(j)) for j in idx])
            if not ok.any():
                # no commit of this side has budget left: the check stays open (what it would take, as the probe
                # would spend it, without the budget)
                c, k = c.copy(), 0
                while _weakest_split(c) < need and k < PRICE_LIMIT:
                    c[int(np.argmax(_weakest_split_lifted(c)))] += 1.0
                    k += 1
                short = (short or 0) + k
                continue
            lifted = np.where(ok, lifted, -1.0)
            k = int(np.argmax(lifted))
            cand = (-(need - worst), int(idx[k]))
            if best is None or cand < best:
                best = cand
        return (None, short) if best is None else (best[1], None)

    def _gap_pairs(self, data: _Data, post: ChangePosterior, st: Step,
                   gaps: list[tuple[float, tuple[int, int]]] | None = None):
        """(gap in se, its pair, the pair's commit with fewer trials) of each residual gap (``_side_gaps``, the
        larger first) the re-measure rule looks at: between tuning.residual_confirm_z and tuning.residual_gap_z, at least
        tuning.residual_confirm_hidden unmeasured commits between the pair, and fewer than tuning.residual_confirm_max trials
        on the commit with fewer. ``gaps``: ``_side_gaps`` when the caller has them."""
        if self.settings.second_change_z <= 0 or self.tuning.residual_confirm_z <= 0:
            return
        for gap, pair in sorted(self._side_gaps(data, post, st) if gaps is None else gaps, reverse=True):
            if not self.tuning.residual_confirm_z <= gap < self.tuning.residual_gap_z:
                continue
            hidden = sum(1 for j in range(pair[0] + 1, pair[1]) if not data.count(j) and j not in data.untestable)
            few = min(pair, key=lambda i: (data.count(i), i))
            if hidden >= self.tuning.residual_confirm_hidden and data.count(few) < self.tuning.residual_confirm_max:
                yield gap, pair, few

    def _gap_recheck_blocked(self, data: _Data, post: ChangePosterior, st: Step,
                             gaps: list[tuple[float, tuple[int, int]]] | None = None) -> tuple[float, int] | None:
        """(gap in se, trials it would take) of a residual gap ``_gap_recheck`` would measure again but for the budget:
        the re-measure is owed before one change is accepted, so the budget's end leaves it open; None otherwise."""
        for gap, pair, few in self._gap_pairs(data, post, st, gaps):
            if not self._budget_left(data, few):
                return gap, sum(max(0, self.tuning.residual_confirm_max - data.count(i)) for i in pair)
        return None

    def _gap_recheck(self, data: _Data, post: ChangePosterior, st: Step,
                     gaps: list[tuple[float, tuple[int, int]]] | None = None) -> tuple[int, float] | None:
        """(commit, gap in se) to measure again before one change is accepted, or None: the first pair of
        ``_gap_pairs`` whose commit with fewer trials the budget still allows."""
        for gap, _pair, few in self._gap_pairs(data, post, st, gaps):
            if self._budget_left(data, few):
                return few, gap
        return None

    @classmethod
    def _residual_gap(cls, data: _Data, post: ChangePosterior, st: Step,
                      gaps: list[tuple[float, tuple[int, int]]] | None = None) -> tuple[float, tuple[int, int]]:
        """The larger of the two sides' gaps (``_side_gaps``, or ``gaps`` when the caller has them) and its pair;
        0 and the good side's pair when neither side has one."""
        return max(cls._side_gaps(data, post, st) if gaps is None else gaps, default=(0.0, (0, st.parent)))

    @staticmethod
    def _side_gaps(data: _Data, post: ChangePosterior, st: Step) -> list[tuple[float, tuple[int, int]]]:
        """Per side of the located change, |difference| in standard errors between its endpoint and the commit
        beside the change on that side (good endpoint vs the parent, culprit vs the bad endpoint), with that
        pair; a side that is one commit, or whose pair lacks a trial, has none."""
        out = []
        for a, b in ((0, st.parent), (st.at, len(data.values) - 1)):
            va, vb = data.values[a], data.values[b]
            if a == b or not va or not vb:
                continue
            out.append((abs(_z_between(va, vb, post.sigma_top)), (a, b)))
        return out

    def _trials_at_change(self, post: ChangePosterior, st: Step) -> int:
        """Trials each of a named change's commit and parent carry: tuning.min_trials_at_change, more when the
        step is small against the noise (each trial then tells little, and a few sessions that happened to
        fall on one side of the noise can carry a posterior), at most tuning.max_trials_at_change."""
        ratio = self.tuning.change_trials_z * post.sigma_top / max(abs(st.step), 1e-9)
        return int(min(self.tuning.max_trials_at_change, max(self.tuning.min_trials_at_change, math.ceil(ratio * ratio))))

    @staticmethod
    def _step_z(data: _Data, st: Step, sigma: float) -> float:
        """The step between the commit's own trials and its parent's in standard errors at ``sigma`` per
        trial, signed along the step (0 when either has no trial)."""
        vc, vp = data.values[st.at], data.values[st.parent]
        if not vc or not vp:
            return 0.0
        z = _z_between(vc, vp, sigma)
        return z if st.step > 0 else -z

    @staticmethod
    def _pure_error(data: _Data) -> tuple[float, float]:
        """Pooled sd of trials of one build around their own commit's mean (log), and its dof: the noise
        as repeated trials show it, whatever the change hypothesis."""
        ss, dof = pooled_squares(data.values)
        return (math.sqrt(ss / dof) if dof else 0.0), float(dof)

    def _pure_alpha(self, data: _Data, st: Step) -> float:
        """tuning.pure_alpha spent over the looks at this pair: look k = trials of the pair beyond 2·tuning.min_trials_at_change, plus
        one, is at tuning.pure_alpha / k up to tuning.pure_look_knee and tuning.pure_alpha · knee / k² after it (at tuning.pure_look_power 1)."""
        k = max(1, data.count(st.at) + data.count(st.parent) - 2 * self.tuning.min_trials_at_change + 1)
        return self.tuning.pure_alpha / (k * max(1.0, k / self.tuning.pure_look_knee)) ** self.tuning.pure_look_power

    def _layout_check(self, data: _Data, st: Step) -> tuple[bool, int | None]:
        """Whether the step at ``st`` survives leaving out each layout, and which commit to re-measure if not.

        Only trials that recorded a layout count. The culprit and its parent must each have run under
        at least tuning.layout_min_distinct layouts; then, for every layout, the culprit-minus-parent contrast of
        the trials of the other layouts must keep the step's sign and at least tuning.layout_keep of its size.
        Returns (True, None) when no trial recorded a layout (nothing to check).
        """
        lp, lc = data.layouts[st.parent], data.layouts[st.at]
        if not any(x is not None for x in (*lp, *lc)):
            return True, None
        vp, vc = data.values[st.parent], data.values[st.at]
        dp, dc = set(lp), set(lc)
        fewer = st.parent if (len(dp), len(vp)) <= (len(dc), len(vc)) else st.at
        if min(len(dp), len(dc)) < self.tuning.layout_min_distinct:
            return False, fewer
        sign = 1.0 if st.step > 0 else -1.0
        for left_out in dp | dc:
            rp = [v for v, x in zip(vp, lp) if x != left_out]
            rc = [v for v, x in zip(vc, lc) if x != left_out]
            if not rp or not rc:
                continue
            d = float(np.mean(rc) - np.mean(rp))
            if sign * d < self.tuning.layout_keep * abs(st.step):
                return False, fewer
        return True, None

    def _parent(self, b: int, data: _Data) -> int:
        p = b - 1
        while p > 0 and p in data.untestable:
            p -= 1
        return p

    # ----------------------------------------------------------------------------------------
    # reporting

    def _describe_key(self, data: _Data, key) -> str:
        """"abc", "one of {a, b}" (skipped neighbours), or "two changes: at a and at b" (a pair is one answer)."""
        parts = []
        for b in key:
            skipped = self._skipped_before(b, data)
            if skipped:
                parts.append("one of {" + ", ".join(self.commits[i][:10] for i in (*skipped, b)) + "}")
            else:
                parts.append(self.commits[b][:10])
        if len(parts) == 2:
            return f"two changes: at {parts[0]} and at {parts[1]}"
        return " and ".join(parts)

    def _progress_key(self, data: _Data, key) -> str:
        """The best answer as progress names it: the testable commit, and how many untestable ones before it share
        the blame ("abc (or one of the 3 untestable commits before it)"), never an untestable commit by name — a
        set of fifty skipped shas, cut to the terminal's width, named only commits that cannot be the answer."""
        parts = []
        for b in key:
            while b in data.untestable and b < self.n - 1:
                b += 1
            skipped = self._skipped_before(b, data)
            name = self.commits[b][:10]
            if len(skipped) == 1:
                name += " (or the untestable commit before it)"
            elif skipped:
                name += f" (or one of the {len(skipped)} untestable commits before it)"
            parts.append(name)
        if len(parts) == 2:
            return f"two changes: at {parts[0]} and at {parts[1]}"
        return " and ".join(parts)

    def _describe_steps(self, data: _Data, steps: Sequence[Step]) -> str:
        return ", ".join(f"{self._describe_key(data, (st.at,))} ({pct(st.step):+.1f}%)" for st in steps)

    def _skipped_before(self, b: int, data: _Data) -> list[int]:
        out = []
        i = b - 1
        while i > 0 and i in data.untestable:
            out.append(i)
            i -= 1
        return sorted(out)

    def _history_note(self, data: _Data, noise: NoiseModel) -> str | None:
        notes = []
        for c, i in sorted(self.index.items(), key=lambda kv: kv[1]):
            earlier = [(o.day or "an earlier day", o.value) for o in self.history if o.commit == c and o.value is not None]
            if earlier and data.values[i]:
                note = history_shift(data.values[i], earlier, noise, build=c[:10], alpha=self.settings.alpha)
                if note:
                    notes.append(note)
        return "; ".join(notes) if notes else None

    def _drift(self, data: _Data, post: ChangePosterior) -> tuple[float | None, str | None]:
        """Estimated drift of the machine over the bisection (percent, range of the fitted path) and a note."""
        if post is None or not post.fits or post.rho_weights[0] >= 0.5:
            return None, None
        path = post.drift_path(post.evidence)
        if path is None:
            return None, None
        span = pct(float(path.max() - path.min()))
        note = (
            f"The machine drifted during the bisection (a level path spanning about {span:.1f}% over "
            f"{data.spent} trials, probability {1 - post.rho_weights[0]:.2f} that it moved at all): the model "
            f"weighs trials far apart in time less and lets neighbouring trials carry the contrasts."
        )
        return span, note

    def _exhausted(self, data: _Data, post: ChangePosterior | None, why: str, *, top_key=None, top_p=None,
                   ends: Comparison | None = None, ruled_out: float | None = None, price: int | None = None,
                   price_of: str | None = None) -> Done:
        """`inconclusive`: the budget ended first. ``price_of`` (with ``price``, None = beyond PRICE_LIMIT): a check
        on the best answer was still open, and that is what settling it costs; else the price is the endpoints'
        trials to rule out the tolerance."""
        s = self.settings
        best = self._describe_key(data, top_key) if top_key else "no change"
        if data.spent + len(data.pending) >= s.max_trials_total:
            limit = f"stats.max_trials_total = {s.max_trials_total}"
        else:
            limit = f"stats.max_trials_per_commit = {s.max_trials_per_commit} (reached by the commits that decide it)"
        tol = self._tolerance()
        more = price if price_of else self._trials_to_rule_out(data, post, ends, tol)
        bound = (f" No regression ≥ {ruled_out:.1f}% ({level_text(100 * (1 - s.alpha))}, one-sided, from the endpoints)."
                 if ruled_out is not None else "")
        stopped = limit
        if price_of:
            stopped = f"{limit}, {OPEN_CHECK_NOTE}"
            advice = (f" Settling it ({price_of}) would take about {more:,} more trials at the difference and noise "
                      f"measured so far; raise {limit.split(' =')[0]}." if more is not None else
                      f" At the difference and noise measured so far settling it ({price_of}) would take beyond "
                      f"{PRICE_LIMIT:,} more trials; quiet the benchmark, or raise {limit.split(' =')[0]}.")
        elif more is not None and tol > 0:
            advice = (f" Ruling out the tolerance of {tol:g}% would take about {more:,} more trials of the endpoints "
                      f"(interleaved) at the noise measured so far; raise {limit.split(' =')[0]}, or set "
                      f"stats.tolerance_pct to the regression that matters to you.")
        elif top_key:
            advice = f" Raise {limit.split(' =')[0]} or narrow the range around the best answer."
        else:
            advice = f" Raise {limit.split(' =')[0]}."
        return self._done(
            Verdict.INCONCLUSIVE, data, post=post, endpoint_cmp=ends, ruled_out=ruled_out, top_key=top_key,
            probability=top_p, budget_exhausted=True, best=top_key or (), stopped_by=stopped, more_trials=more,
            explanation=(
                f"The trial budget ran out ({limit}; {data.spent} trials run) before the answer was clear: {why}. "
                f"Best answer: {best}" + (f" (probability {short_probability(top_p, 3)})" if top_p is not None else "") + "."
                + bound + advice
            ),
        )

    def _futile(self, data: _Data, post: ChangePosterior, ends: Comparison, ruled_out: float | None,
                tol: float) -> Done | None:
        """`inconclusive` now, with its price, when the tolerance cannot be ruled out inside the budget even on a
        hopeful reading of the measurements (FUTILITY_* above); None while it still can."""
        s = self.settings
        if tol <= 0 or self.tuning.futility_min_per_end <= 0 or not math.isfinite(ends.effect_pct):
            return None
        if min(data.count(0), data.count(self.n - 1)) < self.tuning.futility_min_per_end:
            return None
        if log_of_pct(tol) + self._gain(ends) <= 0:  # the endpoints point to a regression of the tolerance or more
            return None
        left = s.max_trials_total - data.spent - len(data.pending)
        hopeful = self._trials_to_rule_out(data, post, ends, tol, hopeful=True)
        if hopeful is not None and hopeful <= left:
            return None
        more = self._trials_to_rule_out(data, post, ends, tol)
        limit = f"stats.max_trials_total = {s.max_trials_total}"
        need = ("more trials than any budget holds" if hopeful is None else
                f"{hopeful:,} more trials even on a hopeful reading of the noise, against {left} left")
        hope = ("" if hopeful is None else " (hopeful: the difference a standard error better than measured and no "
                "worse than none, the noise at the low end of its estimate)")
        bound = (f" No regression ≥ {ruled_out:.1f}% ({level_text(100 * (1 - s.alpha))}, one-sided, from the endpoints)."
                 if ruled_out is not None else "")
        return self._done(
            Verdict.INCONCLUSIVE, data, post=post, endpoint_cmp=ends, ruled_out=ruled_out, probability=None,
            stopped_by=f"futility: the tolerance needs {need} ({limit})", more_trials=more,
            explanation=(
                f"Stopped early, inconclusive: no change is the likelier story, but ruling out a regression of "
                f"{tol:g}% (stats.tolerance_pct) would take {need} ({limit}; {data.spent} trials run){hope} — at "
                f"{ends.sigma_b_pct:.1f}% noise per trial the endpoints differ by {ends.effect_pct:+.1f}%."
                + bound
                + (f" At the noise and difference measured so far it would take about {more:,} more trials of the endpoints."
                   if more else " At the noise and difference measured so far it would take beyond 100,000 more trials.")
                + f" Spending the rest of the budget would not change that: set stats.tolerance_pct to the "
                  f"regression that matters to you (what this host can afford), quiet the benchmark, or raise "
                  "stats.max_trials_total."
            ),
        )

    def _gain(self, ends: Comparison) -> float:
        """The endpoints' difference (log), signed so that a regression is negative."""
        return log_of_pct(ends.effect_pct) * (1.0 if self.higher_is_better else -1.0)

    @staticmethod
    def _own_dof(post: ChangePosterior, data: _Data) -> float:
        """Degrees of freedom of this bisection's own trials (the endpoints' two levels spent), at most
        the posterior's: what `same` and `improved` decide with, so a prior's pseudo-trials never count."""
        return min(post.dof, max(data.trials - 2.0, 1.0))

    def _trials_to_rule_out(self, data: _Data, post: ChangePosterior | None, ends: Comparison | None,
                            tol: float, hopeful: bool = False) -> int | None:
        """More endpoint trials (both ends, interleaved) after which the sequential bound would fall below
        ``tol`` if the endpoints' difference and the noise stayed as measured; None when the endpoints
        already point to a regression of the tolerance or more (more trials would confirm it instead).
        ``hopeful``: the noise at the lower tuning.futility_sigma_q bound of its estimate, the difference one standard
        error better than measured and never worse than none, the normal quantile — a count the search cannot
        hope to beat (on a range that does hold a regression, it is what a host this noisy needs to rule
        out the tolerance at all, whatever the endpoints showed so far)."""
        if post is None or ends is None or tol <= 0 or not math.isfinite(ends.effect_pct):
            return None
        d = self._gain(ends)
        dof = self._own_dof(post, data)
        sigma = post.sigma_top
        if hopeful:  # the true difference no worse than none (a regression measured so far may be noise) ...
            se = sigma * math.sqrt(1.0 / max(len(data.values[0]), 1) + 1.0 / max(len(data.values[-1]), 1))
            d = max(d + se, 0.0)
            sigma *= math.sqrt(dof / chi2_quantile(1.0 - self.tuning.futility_sigma_q, dof))  # ... and the noise at its low end
        room = log_of_pct(tol) + d
        if room <= 0:
            return None
        z = (normal_quantile(1.0 - self.settings.alpha * self.tuning.same_alpha_share) if hopeful
             else t_quantile(1.0 - self.settings.alpha * self.tuning.same_alpha_share, dof))
        n_a, n_b = len(data.values[0]), len(data.values[-1])
        for k in range(0, 100_000, 2):
            a, b = n_a + k // 2, n_b + k // 2
            if z * sigma * math.sqrt(1.0 / max(a, 1) + 1.0 / max(b, 1)) < room:
                return k
        return None

    def _done(
        self,
        verdict: Verdict,
        data: _Data,
        *,
        explanation: str,
        post: ChangePosterior | None = None,
        endpoint_cmp: Comparison | None = None,
        culprit_cmp: Comparison | None = None,
        ruled_out: float | None = None,
        top_key: tuple[int, ...] | None = None,
        culprit: int | None = None,
        extra: tuple[str, ...] = (),
        improvements: tuple[str, ...] = (),
        probability: float | None = None,
        budget_exhausted: bool = False,
        best: tuple[int, ...] = (),
        layout_sensitive: tuple[str, ...] = (),
        stopped_by: str | None = None,
        more_trials: int | None = None,
    ) -> Done:
        culprit_sha = None
        culprit_set: tuple[str, ...] = ()
        if culprit is not None:
            culprit_sha = self.commits[culprit]
            skipped = self._skipped_before(culprit, data)
            if skipped:
                culprit_set = tuple(self.commits[i] for i in (*skipped, culprit))
        drift_pct, drift_note = self._drift(data, post) if post is not None else (None, None)
        # History is judged against the noise this bisection measured (its posterior), not the prior it started from.
        noise = (NoiseModel(post.sigma_top, post.dof, "this bisection's trials") if post is not None
                 else self._noise_with(data))
        notes = [x for x in (drift_note, self._history_note(data, noise)) if x]
        if data.notes:
            explanation += " System state: " + "; ".join(data.notes) + "."
        if data.excluded:
            explanation += (
                f" Excluded {len(data.excluded)} trial(s) the runner flagged (like nvbench, a throttled or "
                f"contended trial is re-run, not averaged in): " + "; ".join(data.excluded[:5])
                + ("; …" if len(data.excluded) > 5 else "") + "."
            )
        sigma = noise_dof = None
        if post is not None and data.trials > 2 + len(top_key or ()):
            # What this bisection learned about the noise, for the next one on this host to start from (and
            # for the which-path trials at the culprit's parent). When the sides of the answer spread
            # differently, the posterior's σ is the quietest side's: the spread of repeats of one build over
            # the whole range is the host's noise then (the H200: 8.3% before its planted slowdown, 0.8% after).
            sigma = pct(post.sigma_top)
            noise_dof = float(data.trials - 1 - len(top_key or ()))
            if top_key and self._side_spreads(data, top_key) is not None:
                sd_own, dof_own = self._pure_error(data)
                sigma, noise_dof = pct(sd_own), dof_own
            # One noise figure per verdict: the one its comparison states (the text's line, --json's comparison and
            # noise_sigma_pct, the figure kept for the next bisection): a `same` said 3.4% in its line and 4.43% in
            # noise_sigma_pct, the likeliest story's σ beside the likeliest change's.
            shown = culprit_cmp or endpoint_cmp
            if shown is not None and math.isfinite(shown.sigma_b_pct):
                sigma = shown.sigma_b_pct
        effect = culprit_cmp.effect_pct if culprit_cmp is not None else (endpoint_cmp.effect_pct if endpoint_cmp else None)
        outcome = BisectOutcome(
            verdict=verdict,
            good=self.commits[0],
            bad=self.commits[-1],
            culprit=culprit_sha,
            culprit_set=culprit_set,
            effect_pct=effect,
            endpoint_comparison=endpoint_cmp,
            culprit_comparison=culprit_cmp,
            extra_changes=extra,
            improvements=improvements,
            skipped=tuple(self.commits[i] for i in sorted(data.untestable)),
            trials_used=data.spent,
            drift_note="; ".join(notes) if notes else None,
            explanation=explanation,
            answer_probability=probability,
            best_answer=tuple(self.commits[i] for i in best),
            budget_exhausted=budget_exhausted,
            ruled_out_pct=ruled_out,
            excluded=tuple(data.excluded),
            drift_pct=drift_pct,
            noise_sigma_pct=sigma,
            noise_dof=noise_dof,
            layout_sensitive=layout_sensitive,
            tolerance_pct=self._tolerance() or None,
            stopped_by=stopped_by,
            more_trials=more_trials,
            state_notes=tuple(data.notes),
        )
        return Done(outcome)


def _z_between(a: Sequence[float], b: Sequence[float], sigma: float) -> float:
    """mean(a) − mean(b) in standard errors, at ``sigma`` per trial."""
    se = sigma * math.sqrt(1.0 / len(a) + 1.0 / len(b))
    return float(np.mean(a) - np.mean(b)) / max(se, 1e-12)


def _weakest_split(c: np.ndarray) -> float:
    """Smallest effective count n_a·n_b/(n_a + n_b) over the split points of a run of commits."""
    left = np.cumsum(c)[:-1]
    right = c.sum() - left
    tot = np.maximum(left + right, 1e-9)
    return float((left * right / tot).min())


def _weakest_split_lifted(c: np.ndarray) -> np.ndarray:
    """``_weakest_split(c + e_k)`` for every k at once, in O(len(c)) (the same numbers, bit for bit).

    One more trial at k adds 1 to the left count of every split at or after k and to the right count of
    every split before it, so the weakest split is the smaller of a prefix minimum and a suffix minimum.
    """
    left = np.cumsum(c)[:-1]
    total = c.sum() + 1.0
    tot = max(total, 1e-9)
    before = left * (total - left) / tot  # splits s < k: the new trial is on their right
    after = (left + 1.0) * (total - (left + 1.0)) / tot  # splits s ≥ k: on their left
    m = len(c)
    prefix = np.full(m, np.inf)
    prefix[1:] = np.minimum.accumulate(before)
    suffix = np.full(m, np.inf)
    suffix[:-1] = np.minimum.accumulate(after[::-1])[::-1]
    return np.minimum(prefix, suffix)


def settles(outcome: BisectOutcome) -> str:
    """What an outcome's ``more_trials`` would settle, for the line that prices it: the check on the best answer
    that was still open when the search stopped, or ruling out the tolerance."""
    stop = outcome.stopped_by or ""
    if stop.startswith("confirmation") or OPEN_CHECK_NOTE in stop:
        return "settling the check still open on the best answer"
    return f"ruling out a regression of {outcome.tolerance_pct:g}%" if outcome.tolerance_pct else "settling it"


__all__ = ["Done", "Measure", "Observation", "SearchPolicy", "settles"]
