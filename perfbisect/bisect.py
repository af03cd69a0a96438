"""The bisection policy: pure logic over observations (no git, no servers, no database).

``SearchPolicy.next(observations)`` is a deterministic function of the constructor arguments and
the observations, so a bisection resumed from the database replays to the same state.

How it decides (DESIGN.md §5):

1. A cheap endpoint gate: two interleaved trials of each end (good, bad, bad, good). ``same``
   (the (1 − 2·alpha) interval inside ± the minimum effect) or a significantly faster bad end stops
   there; nothing else is decided from the endpoints alone.
2. A Bayesian posterior over "no change", "the first bad commit is k" and "changes at k1 and k2"
   (a midpoint unlike both ends): each hypothesis is scored by its marginal likelihood with the
   segment levels and the noise σ integrated out (Normal / scaled-inverse-χ² conjugacy, the noise
   model as the prior), so every trial — endpoints, midpoints, repeats — sharpens the levels and σ
   and keeps testing "no change" against "a change somewhere". While "no change" is likeliest the
   endpoints are measured; otherwise the next commit is the one whose next trial is expected to
   remove the most uncertainty about the answer. The search stops when the answer holds
   ``settings.confidence`` of the posterior given that something changed, and "no change" is
   below NO_CHANGE_DOUBT.
3. Before one change is accepted, each side of it must carry enough trials, split anywhere, to show
   a second SECOND_CHANGE_PCT step; a second change the posterior cannot rule out keeps it searching.
4. Each change is confirmed by the trials of the good-like segment before it against those of the
   bad-like segment after it, one-sided at alpha, the interval reaching the minimum effect.
5. Untestable commits (value None) are never measured again and never blamed: a change next to
   them is reported as the set of skipped commits plus the first testable bad one. The good
   endpoint is measured again late (drift guard); if it moved, the outcome is inconclusive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from .config import StatsConfig
from .errors import UsageError
from .model import BisectOutcome, Comparison, Verdict
from .stats import NoiseModel, adjust, attribute, compare, history_shift, log_of_pct, normal_cdf

# Prior probability that the range holds two changes rather than one.
TWO_CHANGE_PRIOR = 0.1
# Hypotheses kept for the look-ahead once sorted by posterior mass (the rest hold < 1e-6 of it).
MAX_HYPOTHESES = 128
LOOKAHEAD_GRID = 32
# Prior probability that nothing changed in the range (the endpoints differ by noise only).
NO_CHANGE_PRIOR = 0.5
# Posterior of "no change" below which a located change may be named.
NO_CHANGE_DOUBT = 0.05
# Interleaved trials of each endpoint before the search starts.
GATE_TRIALS = 2
# A second level step this big (percent) must be visible, at this many standard errors, on
# each side of a located change before one change is accepted.
SECOND_CHANGE_PCT = 5.0
SECOND_CHANGE_Z = 3.0
# ... or this share of the located change, when that is bigger.
SECOND_CHANGE_SHARE = 0.3
# Posterior of a second change above which one change is not accepted yet.
SECOND_CHANGE_DOUBT = 0.04


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


@dataclass(frozen=True)
class Measure:
    """What to do next: run one more trial of ``commit``; ``reason`` says why (for progress)."""

    commit: str
    reason: str


@dataclass(frozen=True)
class Done:
    """The search is over."""

    outcome: BisectOutcome


@dataclass
class _Data:
    """Observations regrouped by commit index, in the order they ran."""

    values: list[list[float]]  # per commit, log summaries (covariate-adjusted where earned)
    orders: list[list[int]]  # per commit, position of each value in the run order
    untestable: set[int]
    trials: int
    attribution_note: str | None


@dataclass(frozen=True)
class _Posterior:
    """Posterior over change hypotheses: boundaries (b1, b2); b2 == n is one change, b1 == b2 == n none."""

    b1: np.ndarray
    b2: np.ndarray
    logw: np.ndarray
    w: np.ndarray  # normalised
    keys: list[tuple[int, ...]]  # per hypothesis, its reportable answer (skip sets merged; () = no change)
    groups: dict[tuple[int, ...], float]
    p_none: float  # posterior of "no change in the range"
    sigma_top: float  # posterior noise estimate (log) under the most probable hypothesis


def _cumulative_sums(data: _Data) -> tuple[float, float, np.ndarray, np.ndarray, np.ndarray]:
    """Trial count, grand mean and cumulative count / sum / sum of squares per commit index.

    Values are centred on the grand mean so sums of squares stay well conditioned; any segment's
    sufficient statistics are then a difference of two entries (O(1) per hypothesis).
    """
    cnt = np.array([len(v) for v in data.values], dtype=float)
    sm = np.array([sum(v) for v in data.values], dtype=float)
    sq = np.array([sum(x * x for x in v) for v in data.values], dtype=float)
    N = cnt.sum()
    m0 = sm.sum() / N
    sq = sq - 2 * m0 * sm + m0 * m0 * cnt
    sm = sm - m0 * cnt
    C = np.concatenate([[0.0], np.cumsum(cnt)])
    S = np.concatenate([[0.0], np.cumsum(sm)])
    Q = np.concatenate([[0.0], np.cumsum(sq)])
    return N, m0, C, S, Q


class SearchPolicy:
    """Decide which commit to measure next, or stop with an outcome (see the module docstring)."""

    def __init__(
        self,
        commits: Sequence[str],
        settings: StatsConfig,
        noise: NoiseModel,
        history: Sequence[Observation] = (),
        higher_is_better: bool = True,
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
        self.n = len(commits)
        # Next testable commit at or after k, filled per call (depends on which commits are skipped).

    # ----------------------------------------------------------------------------------------
    # public

    def next(self, observations: Sequence[Observation]) -> Measure | Done:
        """The next trial to run, or Done with the outcome; a pure function of the observations."""
        data = self._regroup(observations)
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

        # 1. A cheap endpoint gate: a couple of interleaved trials of each end (A B B A). From
        # then on the endpoints are one more pair of commits in the posterior, and every trial
        # (midpoints included) keeps testing "no change at all" against "a change somewhere".
        endpoint_cmp = self._endpoint_comparison(data)
        if min(len(data.values[good]), len(data.values[bad])) < GATE_TRIALS:
            return self._measure_endpoint(data, endpoint_cmp)
        if endpoint_cmp.verdict is Verdict.SAME or self._significantly_better(endpoint_cmp):
            word = (
                "no regression beyond noise" if endpoint_cmp.verdict is Verdict.SAME
                else "the bad endpoint is faster than the good one: no regression to bisect"
            )
            verdict = Verdict.SAME if endpoint_cmp.verdict is Verdict.SAME else Verdict.IMPROVED
            return self._done(
                verdict, data, endpoint_cmp=endpoint_cmp,
                explanation=f"Endpoints compared first: {word}. {endpoint_cmp.explanation}",
            )

        # 2. Posterior over "no change", one change at k, or changes at (k1, k2).
        post = self._posterior(data)
        if post.p_none >= 0.5:
            # No change is the likeliest story: the endpoints settle it (equivalence or a difference).
            return self._measure_endpoint(data, endpoint_cmp, p_none=post.p_none)
        top_key, top_p = self._answer(post)
        # Whenever the good endpoint has been measured again since the search began, check it did
        # not move: if it did, every comparison straddling the move is suspect, so stop honestly.
        moved = self._drift_note(data)
        if moved is not None:
            return self._done(
                Verdict.INCONCLUSIVE, data, endpoint_cmp=endpoint_cmp, post=post, drift_note=moved,
                explanation=(
                    f"{moved} The search pointed at {self._describe_key(data, top_key) or 'no change'}, but "
                    f"that cannot be trusted while the baseline itself drifts. Let the machine settle "
                    f"(clocks, temperature) and run the bisection again."
                ),
            )
        p_two = sum(p for k, p in post.groups.items() if len(k) == 2)
        # A second change that is neither ruled out nor located keeps the search going.
        if (
            top_p < s.confidence
            or post.p_none >= NO_CHANGE_DOUBT
            or (len(top_key) == 1 and p_two >= SECOND_CHANGE_DOUBT)
        ):
            return self._search_step(data, post, top_key, top_p, endpoint_cmp)

        # 3. One change located. A second change hides where nothing was measured: each side of
        # it must carry enough trials, split anywhere, to show a level step the size of
        # SECOND_CHANGE_PCT; the posterior then weighs the two-change hypotheses on real evidence.
        changes = list(top_key)
        if len(changes) == 1:
            probe = self._second_change_probe(data, post, changes[0])
            if probe is not None:
                return Measure(
                    self.commits[probe],
                    f"one change or two: {self._describe_key(data, top_key)} holds {top_p:.3f} of the posterior; "
                    f"measuring this side of it so a second level step would show",
                )

        # 4. Confirm each change: the trials of the good-like segment before it against those of
        # the bad-like segment after it (the same pooling the posterior uses), one-sided at alpha.
        confirmations: list[Comparison] = []
        bounds = [0, *changes, self.n]
        for idx, b in enumerate(changes):
            lo_seg, hi_seg = bounds[idx], bounds[idx + 2]
            before = [v for i in range(lo_seg, b) for v in data.values[i]]
            after = [v for i in range(b, hi_seg) for v in data.values[i]]
            cmp = compare(before, after, self.noise, s, self.higher_is_better, alpha=2 * s.alpha)
            if not self._shows_regression(cmp, data, top_key, b):
                parent = self._parent(b, data)
                step = self._confirm_step(data, parent, b, cmp, endpoint_cmp)
                if isinstance(step, Measure):
                    return step
                return self._done(
                    Verdict.INCONCLUSIVE, data, endpoint_cmp=endpoint_cmp, culprit_cmp=cmp, post=post,
                    top_key=top_key,
                    explanation=(
                        f"The search points at {self._describe_key(data, (b,))} (posterior "
                        f"{top_p:.3f}), but the commits before it against those after it give "
                        f"{cmp.verdict.value} and the trial budget is spent: {cmp.explanation}"
                    ),
                )
            confirmations.append(cmp)

        # 5. Drift guard: the good endpoint measured again late in the search.
        drift_note = None
        if s.drift_check and not self._late_good(data) and self._budget_left(data, good):
            return Measure(
                self.commits[good],
                "drift guard: re-measuring the good endpoint late in the search to check the machine did not move",
            )

        first = confirmations[0]
        extra = ", ".join(self.commits[b][:10] for b in changes[1:])
        expl = (
            f"First bad commit {self._describe_key(data, (changes[0],))}: {first.effect_pct:+.1f}% from the "
            f"commits before it to the commits from it on, tested one-sided at {s.alpha:g} in the direction "
            f"of the change ({first.explanation}) Posterior probability of this answer {top_p:.3f}, of no "
            f"change at all {post.p_none:.1g}, after {data.trials} trials; the endpoints differ by "
            f"{endpoint_cmp.effect_pct:+.1f}%."
        )
        if extra:
            expl += (
                f" More than one change: a further change at {extra} "
                f"({', '.join(f'{c.effect_pct:+.1f}%' for c in confirmations[1:])} against the commits before it)."
            )
        return self._done(
            Verdict.REGRESSED, data, endpoint_cmp=endpoint_cmp, culprit_cmp=first, post=post,
            top_key=top_key, drift_note=drift_note, explanation=expl, confirmed=True,
        )

    def _shows_regression(self, cmp: Comparison, data: _Data, key, b: int) -> bool:
        """Significant one-sided at alpha in the direction the levels give, and not shown smaller than the minimum effect."""
        s = self.settings
        if cmp.p_value is None or not cmp.p_value < 2 * s.alpha:
            return False
        worse = cmp.effect_pct < 0 if self.higher_is_better else cmp.effect_pct > 0
        want = self._wanted_verdict(self._segment_mean(data, key, self._parent(b, data)), self._segment_mean(data, key, b))
        if worse != (want is Verdict.REGRESSED):
            return False
        # The far end of the interval must reach the minimum effect (the change may matter).
        far = cmp.ci_low_pct if cmp.effect_pct < 0 else cmp.ci_high_pct
        return abs(far) >= s.min_effect_pct

    def _late_good(self, data: _Data) -> list[float]:
        """Good-endpoint trials run after the search began (the drift guard's evidence)."""
        started = self._search_started_at(data)
        return [v for v, o in zip(data.values[0], data.orders[0]) if o > started]

    def _drift_note(self, data: _Data) -> str | None:
        """A sentence when the good endpoint moved beyond noise between the gate and later in the search."""
        if not self.settings.drift_check:
            return None
        late = self._late_good(data)
        if not late:
            return None
        started = self._search_started_at(data)
        early = [v for v, o in zip(data.values[0], data.orders[0]) if o <= started]
        drift = compare(early, late, self._noise_with(data), self.settings, self.higher_is_better)
        if drift.verdict not in (Verdict.REGRESSED, Verdict.IMPROVED):
            return None
        return (
            f"The good endpoint {self.commits[0][:10]} moved during the bisection "
            f"({drift.effect_pct:+.1f}%, {drift.explanation}) — same code, different machine "
            f"state: comparisons that straddle the move are not trusted."
        )

    def _significantly_better(self, cmp: Comparison) -> bool:
        better = cmp.effect_pct > 0 if self.higher_is_better else cmp.effect_pct < 0
        return cmp.verdict is Verdict.IMPROVED and better and cmp.p_value is not None and cmp.p_value < self.settings.alpha

    def _search_started_at(self, data: _Data) -> int:
        """Run-order position of the first trial of a commit other than the endpoints."""
        inner = [o for i in range(1, self.n - 1) for o in data.orders[i]]
        return min(inner) if inner else max((o for v in data.orders for o in v), default=-1)

    def _second_change_probe(self, data: _Data, post: "_Posterior", b: int) -> int | None:
        """A commit to measure so that a second step on either side of the change ``b`` could show, or None.

        For every split point inside a side segment, the trials on its two sides give an
        effective count n_a·n_b/(n_a + n_b); the weakest split must reach the count that shows
        a SECOND_CHANGE_PCT step at SECOND_CHANGE_Z standard errors under the current noise.
        """
        sigma = post.sigma_top
        # Next to a big change a second step matters in proportion to it; a fixed 5% would ask a
        # noisy mode (σ ≈ 5%) for dozens of trials to rule out a step far smaller than the one found.
        key = (b,)
        found = abs(self._segment_mean(data, key, b) - self._segment_mean(data, key, self._parent(b, data)))
        step = max(log_of_pct(SECOND_CHANGE_PCT), SECOND_CHANGE_SHARE * found) if math.isfinite(found) else log_of_pct(SECOND_CHANGE_PCT)
        need = (SECOND_CHANGE_Z * sigma / step) ** 2
        cnt = np.array([len(v) for v in data.values], dtype=float)
        best: tuple[float, int] | None = None
        for lo, hi in ((0, b), (b, self.n)):
            idx = np.array([j for j in range(lo, hi) if j not in data.untestable])
            if len(idx) < 2:
                continue
            c = cnt[idx]
            worst = self._weakest_split(c)
            if worst >= need:
                continue
            # Try one more trial at each commit of the segment; keep the one that lifts the weakest split most.
            trial = c[None, :] + np.eye(len(idx))
            lifted = np.array([self._weakest_split(row) for row in trial])
            ok = np.array([self._budget_left(data, int(j)) for j in idx])
            if not ok.any():
                continue
            lifted = np.where(ok, lifted, -1.0)
            k = int(np.argmax(lifted))
            cand = (-(need - worst), int(idx[k]))
            if best is None or cand < best:
                best = cand
        return None if best is None else best[1]

    @staticmethod
    def _weakest_split(c: np.ndarray) -> float:
        left = np.cumsum(c)[:-1]
        right = c.sum() - left
        tot = np.maximum(left + right, 1e-9)
        return float((left * right / tot).min())

    # ----------------------------------------------------------------------------------------
    # observations

    def _regroup(self, observations: Sequence[Observation]) -> _Data:
        ordered = sorted(enumerate(observations), key=lambda io: (io[1].seq, io[0]))
        values: list[list[float]] = [[] for _ in range(self.n)]
        orders: list[list[int]] = [[] for _ in range(self.n)]
        untestable: set[int] = set()
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
            rows.append((i, pos, float(o.value), o.covariates))
        # A commit that failed once is untestable: its earlier values (if any) are kept out too,
        # since a build that sometimes fails is not one identity to compare.
        rows = [r for r in rows if r[0] not in untestable]
        note = None
        with_cov = [r for r in rows if r[3]]
        adjusted = {pos: v for _, pos, v, _ in rows}
        if len(with_cov) >= 6:
            att = attribute([r[2] for r in with_cov], [r[3] for r in with_cov], [r[0] for r in with_cov], alpha=self.settings.alpha)
            if att is not None:
                note = att.sentence
                if att.adjusted:
                    for r, v in zip(with_cov, adjust([r[2] for r in with_cov], [r[3] for r in with_cov], att)):
                        adjusted[r[1]] = v
        for i, pos, _, _ in rows:
            values[i].append(adjusted[pos])
            orders[i].append(pos)
        return _Data(values, orders, untestable, len(rows), note)

    def _budget_left(self, data: _Data, i: int) -> bool:
        s = self.settings
        return data.trials < s.max_trials_total and len(data.values[i]) < s.max_trials_per_commit

    def _noise_with(self, data: _Data) -> NoiseModel:
        """The noise model sharpened by this bisection's own repeats of identical builds."""
        return NoiseModel.from_groups([v for v in data.values if len(v) >= 2], prior=self.noise)

    # ----------------------------------------------------------------------------------------
    # phase 1: endpoints

    def _endpoint_comparison(self, data: _Data) -> Comparison:
        """Bad endpoint vs good endpoint on all their trials; ``same`` is the equivalence test at alpha.

        compare() at 2·alpha gives a (1 − 2·alpha) interval: inside ± the minimum effect it is
        TOST at alpha. A regression is never decided here: the posterior and the confirmation
        of the located change do that with every trial of the range.
        """
        s = self.settings
        good, bad = 0, self.n - 1
        return compare(data.values[good], data.values[bad], self.noise, s, self.higher_is_better, alpha=2 * s.alpha)

    def _measure_endpoint(self, data: _Data, cmp: Comparison, p_none: float | None = None) -> Measure | Done:
        good, bad = 0, self.n - 1
        m = len(data.values[good]) + len(data.values[bad])
        order = [good, bad, bad, good][m % 4]
        other = bad if order == good else good
        for i in (order, other):
            if self._budget_left(data, i):
                state = "" if m < 4 else f" so far {cmp.effect_pct:+.1f}% ({cmp.verdict.value})"
                if p_none is not None:
                    state += f"; no change at all is still likeliest (posterior {p_none:.2f})"
                return Measure(self.commits[i], f"comparing the endpoints (interleaved good/bad, trial {m + 1}){state}")
        return self._done(
            Verdict.INCONCLUSIVE, data, endpoint_cmp=cmp,
            explanation=(
                f"No regression beyond noise could be shown between the endpoints within the budget "
                f"({len(data.values[good])} + {len(data.values[bad])} trials): {cmp.explanation} "
                f"Raise stats.max_trials_per_commit, lower the noise (calibrate, quieter machine), or accept "
                f"that any change is smaller than this interval."
            ),
        )

    # ----------------------------------------------------------------------------------------
    # phase 2: change-point posterior

    def _next_testable(self, data: _Data) -> np.ndarray:
        nt = np.arange(self.n)
        nxt = self.n - 1
        for k in range(self.n - 1, -1, -1):
            if k not in data.untestable:
                nxt = k
            nt[k] = nxt
        return nt

    def _posterior(self, data: _Data) -> _Posterior:
        n = self.n
        N, m0, C, S, Q = _cumulative_sums(data)
        nu0, s0 = self.noise.dof, self.noise.sigma_b
        g = self._level_prior_ratio(data)

        # Hypotheses: one change at k (b1 = k, b2 = n), two at (k1, k2), and none (b1 = b2 = n).
        ks = np.arange(1, n)
        b1 = [ks]
        b2 = [np.full(len(ks), n)]
        if n >= 3:
            i1, i2 = np.triu_indices(n - 1, k=1)
            b1.append(i1 + 1)
            b2.append(i2 + 1)
        b1.append(np.array([n]))
        b2.append(np.array([n]))
        b1a = np.concatenate(b1)
        b2a = np.concatenate(b2)
        zero = np.zeros_like(b1a)
        full = np.full_like(b1a, n)
        R = np.zeros(len(b1a))
        occam = np.zeros(len(b1a))
        means, precs = [], []
        for lo, hi in ((zero, b1a), (b1a, b2a), (b2a, full)):
            ns = C[hi] - C[lo]
            ss = S[hi] - S[lo]
            qs = Q[hi] - Q[lo]
            safe = np.maximum(ns, 1.0)
            R += np.where(ns > 0, qs - ss * ss / safe + (ss / safe) ** 2 * ns / (1.0 + g * ns), 0.0)
            occam += -0.5 * np.log1p(g * ns)
            means.append(ss / (ns + 1.0 / g))
            precs.append(ns + 1.0 / g)
        # σ is integrated out with the noise model as a scaled-inverse-χ² prior: every trial's
        # residual under each hypothesis (levels fitted) is evidence about the noise.
        logml = occam - 0.5 * (nu0 + N) * np.log(nu0 * s0 * s0 + np.maximum(R, 1e-300))
        none = b1a == n
        single = (b2a == n) & ~none
        two = ~(single | none)
        # A "change" smaller than the minimum effect is no change to the user: weigh each
        # hypothesis by the posterior probability that each of its steps is at least that big
        # (a truncated prior on step sizes). Without it, splits of one level into two equal
        # ones keep posterior mass that no trial can remove, and "no change" could never win.
        m = log_of_pct(self.settings.min_effect_pct)
        s2 = (nu0 * s0 * s0 + R) / (nu0 + N)
        for a, b, mask in ((0, 1, ~none), (1, 2, two)):
            d = means[b] - means[a]
            se = np.sqrt(s2 * (1.0 / precs[a] + 1.0 / precs[b]))
            big = normal_cdf((-m - d) / se) + normal_cdf((d - m) / se)
            logml = logml + np.where(mask, np.log(np.maximum(big, 1e-300)), 0.0)
        n_pairs = max(int(two.sum()), 1)
        p_change = 1.0 - NO_CHANGE_PRIOR
        two_prior = TWO_CHANGE_PRIOR if n >= 3 else 0.0
        with np.errstate(divide="ignore"):
            logprior = np.where(
                none, math.log(NO_CHANGE_PRIOR),
                np.where(single, math.log(p_change * (1 - two_prior)) - math.log(n - 1),
                         np.log(p_change * two_prior) - math.log(n_pairs)),
            )
        logw = logml + logprior
        logw -= logw.max()
        w = np.exp(logw)
        w /= w.sum()
        nt = self._next_testable(data)
        keys: list[tuple[int, ...]] = []
        groups: dict[tuple[int, ...], float] = {}
        for x1, x2, wi in zip(b1a.tolist(), b2a.tolist(), w.tolist()):
            if x1 == n:
                key: tuple[int, ...] = ()
            else:
                k1 = int(nt[x1])
                key = (k1,) if x2 == n or int(nt[x2]) == k1 else (k1, int(nt[x2]))
            keys.append(key)
            groups[key] = groups.get(key, 0.0) + wi
        top = int(np.argmax(np.where(none, -np.inf, logw)))
        return _Posterior(b1a, b2a, logw, w, keys, groups, groups.get((), 0.0), float(math.sqrt(s2[top])))

    def _answer(self, post: _Posterior) -> tuple[tuple[int, ...], float]:
        """The best answer and how sure the posterior is of it.

        With one change likelier than two, the answer is the commit most probably a change point,
        scored by the mass of every hypothesis containing it (a possible small second change
        elsewhere does not make this one less certain). Once two changes are likelier, both must
        be located: the answer is the best pair and its own mass.
        """
        p_two = sum(p for k, p in post.groups.items() if len(k) == 2)
        p_one = sum(p for k, p in post.groups.items() if len(k) == 1)
        # Where the change is, given that there is one ("no change" is weighed on its own).
        some = max(p_one + p_two, 1e-300)
        if p_two < p_one:
            cp: dict[int, float] = {}
            for key, p in post.groups.items():
                for b in key:
                    cp[b] = cp.get(b, 0.0) + p
            b, p = max(cp.items(), key=lambda kv: (kv[1], -kv[0]))
            return (b,), min(p / some, 1.0)
        # Two changes are likelier than one: where they are, given that there are two. Whether the
        # second is real is then up to its own confirmation (the segments around it, one-sided at
        # alpha); the posterior of "two" itself carries the look-elsewhere cost of every possible
        # pair, which no affordable number of trials of one modest step can overcome.
        pairs = {k: p for k, p in post.groups.items() if len(k) == 2}
        key, p = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        return key, min(p / max(p_two, 1e-300), 1.0)

    def _level_prior_ratio(self, data: _Data) -> float:
        """Prior variance of segment levels as a multiple of σ²: wide enough for the endpoints' gap."""
        a, b = data.values[0], data.values[-1]
        gap = abs(float(np.mean(b)) - float(np.mean(a))) if a and b else 0.0
        return max(4.0, 2.0 * (gap / self.noise.sigma_b) ** 2)

    def _search_step(self, data: _Data, post: _Posterior, top_key, top_p, endpoint_cmp) -> Measure | Done:
        """Pick the commit whose next trial is expected to remove the most posterior entropy."""
        n = self.n
        order = np.argsort(-post.w, kind="stable")
        csum = np.cumsum(post.w[order])
        keep = order[: max(1, min(MAX_HYPOTHESES, int(np.searchsorted(csum, 1 - 1e-6)) + 1))]
        w = post.w[keep] / post.w[keep].sum()
        b1, b2 = post.b1[keep], post.b2[keep]
        cand = [j for j in range(n) if j not in data.untestable and self._budget_left(data, j)]
        if not cand:
            return self._done(
                Verdict.INCONCLUSIVE, data, endpoint_cmp=endpoint_cmp, post=post, top_key=top_key,
                explanation=(
                    f"The trial budget ran out before the change could be located: the best answer, "
                    f"{self._describe_key(data, top_key)}, holds {top_p:.2f} of the posterior (needed "
                    f"{self.settings.confidence}). {data.trials} trials used. Raise stats.max_trials_total "
                    f"or stats.max_trials_per_commit, or narrow the range."
                ),
            )
        J = np.asarray(cand)
        seg = (J[None, :] >= b1[:, None]).astype(int) + (J[None, :] >= b2[:, None]).astype(int)
        # Only commits whose segment is still uncertain can move the posterior much.
        purity = np.max(np.stack([(w[:, None] * (seg == i)).sum(axis=0) for i in range(3)]), axis=0)
        varies = purity < 0.995
        if varies.any():
            J, seg = J[varies], seg[:, varies]
        # Segment posterior means and predictive scales per kept hypothesis.
        N, m0, C, S, Q = _cumulative_sums(data)
        g = self._level_prior_ratio(data)
        nu0, s0 = self.noise.dof, self.noise.sigma_b
        bounds = [np.zeros_like(b1), b1, b2, np.full_like(b1, n)]
        seg_n, seg_mean = [], []
        R = np.zeros(len(b1))
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            ns, ss, qs = C[hi] - C[lo], S[hi] - S[lo], Q[hi] - Q[lo]
            safe = np.maximum(ns, 1.0)
            R += np.where(ns > 0, qs - ss * ss / safe + (ss / safe) ** 2 * ns / (1.0 + g * ns), 0.0)
            seg_n.append(ns)
            seg_mean.append(ss / (ns + 1.0 / g))
        seg_n_a = np.stack(seg_n, axis=1)
        seg_mean_a = np.stack(seg_mean, axis=1)
        nu = nu0 + N
        s2 = (nu0 * s0 * s0 + R) / nu
        loc = np.take_along_axis(seg_mean_a, seg, axis=1)
        scale = np.sqrt(s2[:, None] * (1.0 + 1.0 / (np.take_along_axis(seg_n_a, seg, axis=1) + 1.0 / g)))
        lo_y = float((loc - 4.5 * scale).min())
        hi_y = float((loc + 4.5 * scale).max())
        y = np.linspace(lo_y, hi_y, LOOKAHEAD_GRID)
        z = (y[None, None, :] - loc[:, :, None]) / scale[:, :, None]
        logf = -0.5 * (nu + 1.0) * np.log1p(z * z / nu) - np.log(scale)[:, :, None]
        f = np.exp(logf - logf.max())
        joint = w[:, None, None] * f  # (H, J, G)
        marg = joint.sum(axis=0)  # (J, G)
        postw = joint / np.maximum(marg[None], 1e-300)
        # The uncertainty that matters is about the answer, not about which of thousands of
        # near-equivalent pair hypotheses holds: while one change is likelier, it is where the
        # first change is plus how many changes there are; once two are likelier, which pair.
        onehots = self._answer_groups(post, keep, n)
        ent = np.zeros(postw.shape[1:])
        for oh in onehots:
            pg = np.einsum("hk,hjy->kjy", oh, postw)
            ent += -(pg * np.log(np.maximum(pg, 1e-300))).sum(axis=0)  # (J, G)
        py = marg / marg.sum(axis=1, keepdims=True)
        expected = (py * ent).sum(axis=1)
        h0 = 0.0
        for oh in onehots:
            wg = w @ oh
            h0 += float(-(wg * np.log(np.maximum(wg, 1e-300))).sum())
        gain = h0 - expected
        best = int(np.argmax(gain))
        j = int(J[best])
        return Measure(
            self.commits[j],
            f"locating the change: best answer so far {self._describe_key(data, top_key)} at "
            f"p={top_p:.2f} (need {self.settings.confidence}); a trial of this commit is expected to "
            f"remove {gain[best] / math.log(2):.2f} bits of uncertainty",
        )

    def _answer_groups(self, post: "_Posterior", keep: np.ndarray, n: int) -> list[np.ndarray]:
        """One-hot maps (kept hypotheses × answers) whose entropies sum to the answer's uncertainty."""
        keys = [post.keys[i] for i in keep.tolist()]
        p_two = sum(p for k, p in post.groups.items() if len(k) == 2)
        p_one = sum(p for k, p in post.groups.items() if len(k) == 1)
        if p_two < p_one:
            labels = [[k[0] if k else -1 for k in keys], [len(k) for k in keys]]
        else:
            labels = [keys]
        out = []
        for lab in labels:
            ids: dict = {}
            col = np.array([ids.setdefault(x, len(ids)) for x in lab])
            oh = np.zeros((len(lab), len(ids)))
            oh[np.arange(len(lab)), col] = 1.0
            out.append(oh)
        return out

    def _segment_mean(self, data: _Data, key, j: int) -> float:
        """Mean of the trials in the segment of commit j under the answer ``key``."""
        bounds = [0, *key, self.n]
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            if lo <= j < hi:
                vals = [v for i in range(lo, hi) for v in data.values[i]]
                return float(np.mean(vals)) if vals else math.nan
        return math.nan

    def _parent(self, b: int, data: _Data) -> int:
        p = b - 1
        while p > 0 and p in data.untestable:
            p -= 1
        return p

    def _wanted_verdict(self, parent_level: float, level: float) -> Verdict:
        """The direction the segment levels give a change (so its direct test can be one-sided)."""
        lower = level < parent_level
        return Verdict.REGRESSED if lower == self.higher_is_better else Verdict.IMPROVED

    def _confirm_step(self, data: _Data, parent: int, b: int, cmp: Comparison, endpoint_cmp) -> Measure | None:
        first, second = (parent, b) if len(data.values[parent]) <= len(data.values[b]) else (b, parent)
        for i in (first, second):
            if self._budget_left(data, i):
                return Measure(
                    self.commits[i],
                    f"confirming the change at {self.commits[b][:10]} against its parent directly: "
                    f"{cmp.effect_pct:+.1f}% so far, {cmp.verdict.value}",
                )
        return None

    # ----------------------------------------------------------------------------------------
    # reporting

    def _describe_key(self, data: _Data, key) -> str:
        parts = []
        for b in key:
            skipped = self._skipped_before(b, data)
            if skipped:
                parts.append("{" + ", ".join(self.commits[i][:10] for i in (*skipped, b)) + "}")
            else:
                parts.append(self.commits[b][:10])
        return " and ".join(parts)

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
                raw = data.values[i]
                note = history_shift(raw, earlier, noise, build=c[:10], alpha=self.settings.alpha)
                if note:
                    notes.append(note)
        return "; ".join(notes) if notes else None

    def _done(
        self,
        verdict: Verdict,
        data: _Data,
        *,
        explanation: str,
        endpoint_cmp: Comparison | None = None,
        culprit_cmp: Comparison | None = None,
        post: _Posterior | None = None,
        top_key: tuple[int, ...] | None = None,
        drift_note: str | None = None,
        confirmed: bool = False,
    ) -> Done:
        culprit = None
        culprit_set: tuple[str, ...] = ()
        extra: tuple[str, ...] = ()
        if confirmed and top_key:
            b = top_key[0]
            culprit = self.commits[b]
            skipped = self._skipped_before(b, data)
            if skipped:
                culprit_set = tuple(self.commits[i] for i in (*skipped, b))
            extra = tuple(self.commits[k] for k in top_key[1:])
        notes = [n for n in (drift_note, self._history_note(data, self._noise_with(data))) if n]
        if data.attribution_note:
            explanation += f" System state: {data.attribution_note}."
        outcome = BisectOutcome(
            verdict=verdict,
            good=self.commits[0],
            bad=self.commits[-1],
            culprit=culprit,
            culprit_set=culprit_set,
            effect_pct=culprit_cmp.effect_pct if culprit_cmp and confirmed else (endpoint_cmp.effect_pct if endpoint_cmp else None),
            endpoint_comparison=endpoint_cmp,
            culprit_comparison=culprit_cmp,
            extra_changes=extra,
            skipped=tuple(self.commits[i] for i in sorted(data.untestable)),
            trials_used=data.trials,
            drift_note="; ".join(notes) if notes else None,
            explanation=explanation,
        )
        return Done(outcome)


__all__ = ["Done", "Measure", "Observation", "SearchPolicy"]
