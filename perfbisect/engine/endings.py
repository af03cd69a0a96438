"""How a search ends: the outcome values every stop carries, and the prices an `inconclusive` states.

``Endings.done`` builds every outcome: the verdict and its evidence, the culprit's set (with the untestable commits
before it), the machine's drift, history against earlier days, the noise figure kept for the next bisection on this
host, and the ``Reason`` (a code and its numbers) that ``report.words`` turns into the explanation. ``exhausted`` is
`inconclusive` because the budget ended first (with the price of what was open); ``futile`` is `inconclusive` at once
while the tolerance cannot be ruled out within the budget even on a hopeful reading (``trials_to_rule_out``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .change_posterior import ChangePosterior
from .kernel import own_dof, pure_error, side_spreads
from .observations import Done, SearchData
from .stats import NoiseModel, chi2_quantile, history_shift, log_of_pct, normal_quantile, pct, t_quantile
from .view import Range
from ..model import BisectOutcome, Comparison, Observation, Reason, Verdict

# The most further trials a price (what settling an open check would take) is counted up to; beyond it, "beyond".
PRICE_LIMIT = 100_000


@dataclass(frozen=True)
class Endings:
    """The outcome builders, with what they need to know of the search (its range, level, tolerance, history)."""

    range: Range
    alpha: float  # stats.alpha
    tol: float  # the regression `same` must rule out (percent; 0 = none)
    higher_is_better: bool
    noise: NoiseModel  # the noise the search started from
    history: tuple[Observation, ...]  # the endpoints' trials from earlier days
    same_alpha_share: float  # tuning.same_alpha_share: one look's share of alpha
    futility_min_per_end: int  # tuning.futility_min_per_end
    futility_sigma_q: float  # tuning.futility_sigma_q
    side_scale_alpha: float  # tuning.side_scale_alpha

    # ----------------------------------------------------------------------------------------------------------
    # every outcome

    def done(self, verdict: Verdict, data: SearchData, reason: Reason, *, post: ChangePosterior | None = None,
             endpoint_cmp: Comparison | None = None, culprit_cmp: Comparison | None = None,
             ruled_out: float | None = None, top_key: tuple[int, ...] | None = None, culprit: int | None = None,
             extra: tuple[str, ...] = (), improvements: tuple[str, ...] = (), probability: float | None = None,
             budget_exhausted: bool = False, best: tuple[int, ...] = (), layout_sensitive: tuple[str, ...] = (),
             more_trials: int | None = None) -> Done:
        """The outcome, with what every verdict carries beside its own reason: the culprit's set (with the untestable
        commits before it), the machine's drift, history against earlier days, the system state and the excluded
        trials, and the noise figure kept for the next bisection on this host."""
        commits = self.range.commits
        culprit_sha = None
        culprit_set: tuple[str, ...] = ()
        if culprit is not None:
            culprit_sha = commits[culprit]
            skipped = self.range.skipped_before(culprit, data)
            if skipped:
                culprit_set = tuple(commits[i] for i in (*skipped, culprit))
        drift_pct, drift = self._drift(data, post) if post is not None else (None, None)
        # History is judged against the noise this bisection measured (its posterior), not the prior it started from.
        noise = (NoiseModel(post.sigma_top, post.dof, "this bisection's trials") if post is not None
                 else NoiseModel.from_groups([v for v in data.values if len(v) >= 2], prior=self.noise))
        reason = Reason(reason.code, {**reason.numbers, "drift": drift, "history": self._history_notes(data, noise),
                                      "trials": data.trials})
        sigma, noise_dof = self._kept_noise(data, post, top_key, culprit_cmp or endpoint_cmp)
        effect = culprit_cmp.effect_pct if culprit_cmp is not None else (endpoint_cmp.effect_pct if endpoint_cmp else None)
        return Done(BisectOutcome(
            verdict=verdict, good=commits[0], bad=commits[-1], culprit=culprit_sha, culprit_set=culprit_set,
            effect_pct=effect, endpoint_comparison=endpoint_cmp, culprit_comparison=culprit_cmp, extra_changes=extra,
            improvements=improvements, skipped=tuple(commits[i] for i in sorted(data.untestable)),
            trials_used=data.spent, answer_probability=probability, best_answer=tuple(commits[i] for i in best),
            budget_exhausted=budget_exhausted, ruled_out_pct=ruled_out, excluded=tuple(data.excluded),
            drift_pct=drift_pct, noise_sigma_pct=sigma, noise_dof=noise_dof, layout_sensitive=layout_sensitive,
            tolerance_pct=self.tol or None, more_trials=more_trials, state_notes=tuple(data.notes), reason=reason,
        ))

    def _history_notes(self, data: SearchData, noise: NoiseModel) -> list[str]:
        notes = []
        for c, i in sorted(self.range.index.items(), key=lambda kv: kv[1]):
            earlier = [(o.day or "an earlier day", o.value) for o in self.history if o.commit == c and o.value is not None]
            if earlier and data.values[i]:
                note = history_shift(data.values[i], earlier, noise, build=c[:10], alpha=self.alpha)
                if note:
                    notes.append(note)
        return notes

    @staticmethod
    def _drift(data: SearchData, post: ChangePosterior) -> tuple[float | None, dict | None]:
        """Estimated drift of the machine over the bisection: its span (percent, range of the fitted path) and the
        numbers its note states."""
        if post is None or not post.fits or post.rho_weights[0] >= 0.5:
            return None, None
        path = post.drift_path(post.evidence)
        if path is None:
            return None, None
        span = pct(float(path.max() - path.min()))
        return span, {"span_pct": span, "spent": data.spent, "p_moved": 1 - post.rho_weights[0]}

    def _kept_noise(self, data: SearchData, post: ChangePosterior | None, top_key: tuple[int, ...] | None,
                    shown: Comparison | None) -> tuple[float | None, float | None]:
        """The noise figure (percent) and its dof an outcome keeps (``noise_sigma_pct``, ``noise_dof``); None
        before this bisection has more trials than the answer has levels. ``shown``: the comparison the verdict
        states (the culprit's, else the endpoints')."""
        sigma = noise_dof = None
        if post is not None and data.trials > 2 + len(top_key or ()):
            # What this bisection learned about the noise, for the next one on this host to start from (and for the
            # which-path trials at the culprit's parent). When the sides of the answer spread differently, the
            # posterior's σ is the quietest side's: the spread of repeats of one build over the whole range is the
            # host's noise then (the H200: 8.3% before its planted slowdown, 0.8% after).
            sigma = pct(post.sigma_top)
            noise_dof = float(data.trials - 1 - len(top_key or ()))
            if top_key and side_spreads(data, top_key, self.side_scale_alpha) is not None:
                sd_own, dof_own = pure_error(data)
                sigma, noise_dof = pct(sd_own), dof_own
            # One noise figure per verdict: the one its comparison states (the text's line, --json's comparison and
            # noise_sigma_pct, the figure kept for the next bisection).
            if shown is not None and math.isfinite(shown.sigma_b_pct):
                sigma = shown.sigma_b_pct
        return sigma, noise_dof

    # ----------------------------------------------------------------------------------------------------------
    # inconclusive: the budget ended first, or cannot settle what is left

    def exhausted(self, data: SearchData, post: ChangePosterior | None, why: Reason, *, top_key=None, top_p=None,
                  ends: Comparison | None = None, ruled_out: float | None = None, price: int | None = None,
                  price_of: str | None = None) -> Done:
        """`inconclusive`: the budget ended first. ``price_of`` (a code, with ``price``; None = beyond PRICE_LIMIT): a
        check on the best answer was still open, and that is what settling it costs; else the price is the
        endpoints' trials to rule out the tolerance."""
        r = self.range
        total = data.spent + len(data.pending) >= r.max_total
        more = price if price_of else self.trials_to_rule_out(data, post, ends)
        numbers = {
            "why": why, "limit": "total" if total else "per_commit", "max_total": r.max_total,
            "max_per_commit": r.max_per_commit, "spent": data.spent,
            "best": r.sets(top_key, data) if top_key else None, "top_p": top_p, "ruled_out": ruled_out,
            "alpha": self.alpha, "price_of": price_of, "more": more, "tol": self.tol,
        }
        if not price_of and more is not None and self.tol > 0:
            numbers["ahead_pct"] = pct(post.endpoint_step())
        return self.done(Verdict.INCONCLUSIVE, data, Reason("exhausted", numbers), post=post, endpoint_cmp=ends,
                         ruled_out=ruled_out, top_key=top_key, probability=top_p, budget_exhausted=True,
                         best=top_key or (), more_trials=more)

    def futile(self, data: SearchData, post: ChangePosterior, ends: Comparison, ruled_out: float | None) -> Done | None:
        """`inconclusive` now, with its price, when the tolerance cannot be ruled out inside the budget even on a
        hopeful reading of the measurements (``futility_min_per_end``, ``futility_sigma_q``); None while it still
        can."""
        tol = self.tol
        if tol <= 0 or self.futility_min_per_end <= 0 or not math.isfinite(ends.effect_pct):
            return None
        if min(data.count(0), data.count(self.range.n - 1)) < self.futility_min_per_end:
            return None
        if log_of_pct(tol) + self.gain(ends) <= 0:  # the endpoints point to a regression of the tolerance or more
            return None
        left = self.range.left(data)
        hopeful = self.trials_to_rule_out(data, post, ends, hopeful=True)
        if hopeful is not None and hopeful <= left:
            return None
        more = self.trials_to_rule_out(data, post, ends)
        if more is not None and hopeful is not None:
            more = max(more, hopeful)  # the stop is stated on the hopeful count: the price never undercuts it
        return self.done(
            Verdict.INCONCLUSIVE, data, Reason("futile.tolerance", {
                "tol": tol, "hopeful": hopeful, "left": left, "max_total": self.range.max_total, "spent": data.spent,
                "sigma_pct": ends.sigma_b_pct, "effect_pct": ends.effect_pct, "ruled_out": ruled_out,
                "alpha": self.alpha, "ahead_pct": pct(post.endpoint_step()), "more": more}),
            post=post, endpoint_cmp=ends, ruled_out=ruled_out, probability=None, more_trials=more,
        )

    def gain(self, ends: Comparison) -> float:
        """The endpoints' difference (log), signed so that a regression is negative."""
        return log_of_pct(ends.effect_pct) * (1.0 if self.higher_is_better else -1.0)

    def trials_to_rule_out(self, data: SearchData, post: ChangePosterior | None, ends: Comparison | None,
                           hopeful: bool = False) -> int | None:
        """More endpoint trials (both ends, interleaved) after which the sequential bound would fall below the
        tolerance at the noise measured so far: the price an `inconclusive` states. The trials already run keep the
        difference they measured; the next ones are expected to differ by the posterior's mean step between the
        endpoints (``ChangePosterior.endpoint_step``: "no change" counts as none), so a difference that is likely
        noise is diluted as trials come rather than taken as the truth. None when that expected difference is itself
        a regression of the tolerance or more (more trials would confirm it instead), or beyond 100,000 trials.
        ``hopeful`` (the futility stop's own count): the noise at the lower ``futility_sigma_q`` bound of its
        estimate, the difference one standard error better than measured and never worse than none, the normal
        quantile, every trial at that difference — a count the search cannot hope to beat."""
        tol = self.tol
        if post is None or ends is None or tol <= 0 or not math.isfinite(ends.effect_pct):
            return None
        d = self.gain(ends)
        dof = own_dof(post, data)
        sigma = post.sigma_top
        n_a, n_b = len(data.values[0]), len(data.values[-1])
        log_tol = log_of_pct(tol)
        if hopeful:  # the true difference no worse than none (a regression measured so far may be noise) ...
            se = sigma * math.sqrt(1.0 / max(n_a, 1) + 1.0 / max(n_b, 1))
            d = max(d + se, 0.0)
            sigma *= math.sqrt(dof / chi2_quantile(1.0 - self.futility_sigma_q, dof))  # ... and the noise at its low end
            ahead = d
            z = normal_quantile(1.0 - self.alpha * self.same_alpha_share)
        else:
            ahead = post.endpoint_step() * (1.0 if self.higher_is_better else -1.0)
            z = t_quantile(1.0 - self.alpha * self.same_alpha_share, dof)
        if log_tol + ahead <= 0:
            return None
        room = log_tol + d
        v0 = 1.0 / max(n_a, 1) + 1.0 / max(n_b, 1)
        for k in range(0, 100_000, 2):
            a, b = n_a + k // 2, n_b + k // 2
            if not hopeful and k > 0:
                # the measured difference and the expected one, weighed by how precisely each pins the endpoints' contrast
                room = log_tol + (d / v0 + ahead * k / 4.0) / (1.0 / v0 + k / 4.0)
            if z * sigma * math.sqrt(1.0 / max(a, 1) + 1.0 / max(b, 1)) < room:
                return k
        return None

    def steps_named(self, data: SearchData, steps: Sequence) -> list:
        """Located changes as the words name them: (the commits that may carry it, its size in percent)."""
        return [[self.range.sets((st.at,), data)[0], pct(st.step)] for st in steps]


__all__ = ["Endings", "PRICE_LIMIT"]
