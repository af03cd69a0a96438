"""How a search ends: the outcome builders of the bisection policy, and the words they name answers with.

``Outcomes`` is mixed into ``bisect.SearchPolicy`` (it reads the policy's ``commits``, ``n``, ``index``,
``settings``, ``tuning``, ``noise``, ``history`` and ``higher_is_better``, and calls its posterior helpers):

- ``_done``: every outcome goes through it — the verdict's own explanation, plus what every verdict carries
  (the culprit's set with the untestable commits before it, the machine's drift, history against earlier
  days, system state, excluded trials, the noise figure kept for the next bisection on this host);
- ``_exhausted``: `inconclusive` because the budget ended first, with the price of settling what was open;
- ``_futile``: `inconclusive` at once while the tolerance cannot be ruled out within the budget even on a
  hopeful reading (``_trials_to_rule_out``, its price);
- how answers are named in explanations and on the progress line (``_describe_key``, ``_progress_key``).

``settles(outcome)`` says what an outcome's ``more_trials`` would settle (the report and the CLI print it).
"""

from __future__ import annotations

import math
from typing import Sequence

from .change_posterior import ChangePosterior
from .effects import Step
from ..metrics import level_text, short_probability
from ..model import BisectOutcome, Comparison, Verdict
from .observations import Done, SearchData
from .stats import NoiseModel, chi2_quantile, history_shift, log_of_pct, normal_quantile, pct, t_quantile

# What `stopped_by` adds when the budget ended with a check on the best answer still open (``settles`` reads it).
OPEN_CHECK_NOTE = "with a check on the best answer still open"
# The most further trials a price (what settling an open check would take) is counted up to; beyond it, "beyond".
PRICE_LIMIT = 100_000


class Outcomes:
    """The outcome builders and the naming of answers (mixed into ``bisect.SearchPolicy``)."""

    def _describe_key(self, data: SearchData, key) -> str:
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

    def _progress_key(self, data: SearchData, key) -> str:
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

    def _describe_steps(self, data: SearchData, steps: Sequence[Step]) -> str:
        return ", ".join(f"{self._describe_key(data, (st.at,))} ({pct(st.step):+.1f}%)" for st in steps)

    def _skipped_before(self, b: int, data: SearchData) -> list[int]:
        out = []
        i = b - 1
        while i > 0 and i in data.untestable:
            out.append(i)
            i -= 1
        return sorted(out)

    def _history_note(self, data: SearchData, noise: NoiseModel) -> str | None:
        notes = []
        for c, i in sorted(self.index.items(), key=lambda kv: kv[1]):
            earlier = [(o.day or "an earlier day", o.value) for o in self.history if o.commit == c and o.value is not None]
            if earlier and data.values[i]:
                note = history_shift(data.values[i], earlier, noise, build=c[:10], alpha=self.settings.alpha)
                if note:
                    notes.append(note)
        return "; ".join(notes) if notes else None

    def _drift(self, data: SearchData, post: ChangePosterior) -> tuple[float | None, str | None]:
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

    def _exhausted(self, data: SearchData, post: ChangePosterior | None, why: str, *, top_key=None, top_p=None,
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
                      f"(interleaved) at the noise measured so far, the next trials differing by the "
                      f"{pct(post.endpoint_step()):+.1f}% the posterior expects; raise {limit.split(' =')[0]}, or set "
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

    def _futile(self, data: SearchData, post: ChangePosterior, ends: Comparison, ruled_out: float | None,
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
        if more is not None and hopeful is not None:
            more = max(more, hopeful)  # the stop is stated on the hopeful count: the price never undercuts it
        ahead = pct(post.endpoint_step())
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
                + (f" At the noise measured so far, the next trials differing by the {ahead:+.1f}% the posterior expects, "
                   f"it would take about {more:,} more trials of the endpoints." if more else
                   f" At the noise measured so far, the next trials differing by the {ahead:+.1f}% the posterior "
                   f"expects, it would take beyond 100,000 more trials.")
                + f" Spending the rest of the budget would not change that: set stats.tolerance_pct to the "
                  f"regression that matters to you (what this host can afford), quiet the benchmark, or raise "
                  "stats.max_trials_total."
            ),
        )

    def _gain(self, ends: Comparison) -> float:
        """The endpoints' difference (log), signed so that a regression is negative."""
        return log_of_pct(ends.effect_pct) * (1.0 if self.higher_is_better else -1.0)

    @staticmethod
    def _own_dof(post: ChangePosterior, data: SearchData) -> float:
        """Degrees of freedom of this bisection's own trials (the endpoints' two levels spent), at most
        the posterior's: what `same` and `improved` decide with, so a prior's pseudo-trials never count."""
        return min(post.dof, max(data.trials - 2.0, 1.0))

    def _trials_to_rule_out(self, data: SearchData, post: ChangePosterior | None, ends: Comparison | None,
                            tol: float, hopeful: bool = False) -> int | None:
        """More endpoint trials (both ends, interleaved) after which the sequential bound would fall below ``tol``
        at the noise measured so far: the price an `inconclusive` states. The trials already run keep the difference
        they measured; the next ones are expected to differ by the posterior's mean step between the endpoints
        (``ChangePosterior.endpoint_step``: "no change" counts as none), so a difference that is likely noise is
        diluted as trials come rather than taken as the truth. None when that expected difference is itself a
        regression of the tolerance or more (more trials would confirm it instead), or beyond 100,000 trials.
        ``hopeful`` (the futility stop's own count): the noise at the lower tuning.futility_sigma_q bound of its
        estimate, the difference one standard error better than measured and never worse than none, the normal
        quantile, every trial at that difference — a count the search cannot hope to beat (on a range that does hold
        a regression, it is what a host this noisy needs to rule out the tolerance at all, whatever the endpoints
        showed so far)."""
        if post is None or ends is None or tol <= 0 or not math.isfinite(ends.effect_pct):
            return None
        d = self._gain(ends)
        dof = self._own_dof(post, data)
        sigma = post.sigma_top
        n_a, n_b = len(data.values[0]), len(data.values[-1])
        log_tol = log_of_pct(tol)
        if hopeful:  # the true difference no worse than none (a regression measured so far may be noise) ...
            se = sigma * math.sqrt(1.0 / max(n_a, 1) + 1.0 / max(n_b, 1))
            d = max(d + se, 0.0)
            sigma *= math.sqrt(dof / chi2_quantile(1.0 - self.tuning.futility_sigma_q, dof))  # ... and the noise at its low end
            ahead = d
            z = normal_quantile(1.0 - self.settings.alpha * self.tuning.same_alpha_share)
        else:
            ahead = post.endpoint_step() * (1.0 if self.higher_is_better else -1.0)
            z = t_quantile(1.0 - self.settings.alpha * self.tuning.same_alpha_share, dof)
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

    def _done(
        self,
        verdict: Verdict,
        data: SearchData,
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
        """The outcome, with what every verdict carries beside its own explanation: the culprit's set (with the
        untestable commits before it), the machine's drift, history against earlier days, the system state and the
        excluded trials, and the noise figure kept for the next bisection on this host."""
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
        explanation += _state_sentences(data)
        sigma, noise_dof = self._kept_noise(data, post, top_key, culprit_cmp or endpoint_cmp)
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

    def _kept_noise(self, data: SearchData, post: ChangePosterior | None, top_key: tuple[int, ...] | None,
                    shown: Comparison | None) -> tuple[float | None, float | None]:
        """The noise figure (percent) and its dof an outcome keeps (``noise_sigma_pct``, ``noise_dof``); None
        before this bisection has more trials than the answer has levels. ``shown``: the comparison the verdict
        states (the culprit's, else the endpoints')."""
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
            if shown is not None and math.isfinite(shown.sigma_b_pct):
                sigma = shown.sigma_b_pct
        return sigma, noise_dof


def _state_sentences(data: SearchData) -> str:
    """What an outcome's explanation adds about the trials themselves: the system state they track, and the
    trials the runner flagged and the search left out."""
    text = ""
    if data.notes:
        text += " System state: " + "; ".join(data.notes) + "."
    if data.excluded:
        text += (
            f" Excluded {len(data.excluded)} trial(s) the runner flagged (like nvbench, a throttled or "
            f"contended trial is re-run, not averaged in): " + "; ".join(data.excluded[:5])
            + ("; …" if len(data.excluded) > 5 else "") + "."
        )
    return text


def settles(outcome: BisectOutcome) -> str:
    """What an outcome's ``more_trials`` would settle, for the line that prices it: the check on the best answer
    that was still open when the search stopped, or ruling out the tolerance."""
    stop = outcome.stopped_by or ""
    if stop.startswith("confirmation") or OPEN_CHECK_NOTE in stop:
        return "settling the check still open on the best answer"
    return f"ruling out a regression of {outcome.tolerance_pct:g}%" if outcome.tolerance_pct else "settling it"


__all__ = ["OPEN_CHECK_NOTE", "PRICE_LIMIT", "Outcomes", "settles"]
