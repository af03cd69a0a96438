"""The gates of one decision, in the order ``SearchPolicy`` runs them (docs/model.md, "The gates").

The pure rule is "stop when one answer holds ``confidence`` of the posterior". Each gate here is a named deviation
from it, with its own frozen parameters beside it; ``check(view)`` answers one of:

- ``None``: pass (the next gate looks);
- a ``View``: pass, knowing more (the located changes sized, a doubt kept, the changes a layout re-check set
  aside), for the next gates and the verdict to read;
- a ``Measure``: a trial that can still settle this gate (with a ``Reason``: a code and its numbers);
- a ``Done``: the search ends here (a verdict, or `inconclusive` with what settling it would cost).

In order: ``EndpointVerdict`` (`same` / `improved` from the endpoints), ``SettleEndpoints`` (while no change is
likeliest, the endpoints settle it), ``Locate`` (the look-ahead's trial until an answer holds), ``SecondChangeDoubt``
(a second change the posterior still suspects, while trials can move it), ``Sized`` (the located changes sized),
``OneChange`` (a residual gap re-measured, each side dense enough for a second step to show), ``PairChecks``
(direction, trials a side, the pair's own contrast, beyond the spread of repeats), ``LayoutRecheck``, and last
``Naming``, which always answers: the culprit is the first located regression.
``EndpointsFirst`` runs before any of them, on the data alone (no posterior before both endpoints are in).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Protocol

import numpy as np

from .change_posterior import ChangePosterior
from .effects import Step, endpoint_comparison, is_regression, located_step, step_comparison
from .endings import Endings
from .kernel import pure_error, side_spreads
from .lookahead import best_trial
from .observations import Done, Measure, SearchData
from .pair_checks import Located, OpenCheck, PairConfirm, SecondChange, side_gaps, trials_at_change
from .stats import log_of_pct, pct
from .view import Range, View
from ..model import Comparison, Reason, Verdict
from ..settings import StatsConfig


class Gate(Protocol):
    """One gate: pass (None), pass knowing more (a View), a trial that can settle it (Measure), or the end (Done)."""

    def check(self, view: View) -> Measure | Done | View | None: ...


# ------------------------------------------------------------------------------------------------------------
# the trials the gates ask for: the endpoints interleaved, the look-ahead's pick


@dataclass(frozen=True)
class EndpointTrials:
    """The next endpoint trial: good, bad, bad, good, …; with several nodes, each measures the endpoint it has
    fewer trials of (a reference for its own offset)."""

    range: Range
    endings: Endings

    def next(self, data: SearchData, post: ChangePosterior | None, ends: Comparison | None, ruled_out: float | None,
             host: str | None = None) -> Measure | Done:
        r = self.range
        good, bad = 0, r.n - 1
        m = data.count(good) + data.count(bad)
        order = [good, bad, bad, good][m % 4]
        if host is not None and several_hosts(data, host):
            on_good, on_bad = data.count_on(good, host), data.count_on(bad, host)
            if on_good != on_bad:
                order = good if on_good < on_bad else bad
        other = bad if order == good else good
        for i in (order, other):
            if r.budget_left(data, i):
                if post is None:
                    why = Reason("endpoints.waiting", {"trial": m + 1})
                else:
                    why = Reason("endpoints.interleaved", {
                        "trial": m + 1, "effect_pct": ends.effect_pct, "p_none": post.p_none,
                        "no_change": post.p_none >= 0.5, "ruled_out": ruled_out})
                return Measure(r.commits[i], why, "endpoints")
        why = Reason("no_change_uncertain" if post is None or post.p_none >= 0.5 else "faster_unsettled")
        return self.endings.exhausted(data, post, why, ends=ends, ruled_out=ruled_out)


def several_hosts(data: SearchData, host: str | None) -> bool:
    names = set(data.host_names) | {h or "" for _, h in data.pending} | {host or ""}
    return len(names) > 1


@dataclass(frozen=True)
class Search:
    """The commit whose next trial is expected to remove the most uncertainty about the answer (lookahead.py)."""

    range: Range
    endings: Endings
    confidence: float
    locate_min_gain_bits: float
    groups: Callable | None = None  # what a trial's gain is information about (lookahead.answer_groups when None)

    def step(self, view: View, phase: str) -> Measure | Done:
        r, data, post, top_key, top_p = self.range, view.data, view.post, view.top_key, view.top_p

        def eligible(js) -> list[int]:
            return [j for j in js if j not in data.untestable and r.budget_left(data, j)]

        # A long range: the look-ahead chooses among the posterior's bin edges (measured commits, quantiles of the
        # change's location, a coarse grid), where its expected gains are exact; should none be left, among at
        # most 256 evenly spread commits.
        cand = eligible(post.edges.tolist()) if post.sparse else []
        if not cand:
            cand = eligible(range(r.n))
            if post.sparse:
                cand = cand[:: max(1, len(cand) // 256)]
        if not cand:
            return self.endings.exhausted(data, post, Reason("best_holds", {"p": top_p}), top_key=top_key,
                                          top_p=top_p, ends=view.ends, ruled_out=view.ruled_out)
        if not data.pending and view.host is None:
            j, bits = best_trial(post, cand, float(data.spent), groups=self.groups)
        else:
            hosts_on = post.host_ratio > 0.0
            hid = data.host_index(view.host) if hosts_on and view.host is not None else None
            inflight = [(i, float(data.spent + q), data.host_index(h) if hosts_on and h is not None else None)
                        for q, (i, h) in enumerate(data.pending)]
            j, bits = best_trial(post, cand, float(data.spent + len(data.pending)), host=hid, pending=inflight,
                                 groups=self.groups)
        named = r.named(top_key, data)
        decisive = [b for k in top_key for b in (k, r.parent(k, data))]
        if phase == "locating" and bits < self.locate_min_gain_bits and decisive and not any(
            r.budget_left(data, b) for b in decisive
        ):
            # The commits that would decide it (the best answer and its parent) are at their per-commit budget and
            # nothing else can move the answer: stop instead of spending the rest.
            return self.endings.exhausted(data, post, Reason("decisive_capped", {"bits": bits}), top_key=top_key,
                                          top_p=top_p, ends=view.ends, ruled_out=view.ruled_out)
        return Measure(
            r.commits[j],
            Reason("search", {"phase": phase, "best": named, "p": top_p, "confidence": self.confidence, "bits": bits}),
            phase, bits, best=named, p=top_p, p_none=post.p_none,
        )


# ------------------------------------------------------------------------------------------------------------
# the endpoints


@dataclass(frozen=True)
class EndpointsFirst:
    """Each endpoint measured once before anything else, and an untestable one ends the search; while both are
    started and not both back, the nodes that wait measure them too. Runs on the data: there is no view yet."""

    range: Range
    endings: Endings
    endpoint_trials: EndpointTrials

    def check(self, data: SearchData, host: str | None) -> Measure | Done | None:
        r = self.range
        good, bad = 0, r.n - 1
        for end in (good, bad):
            if end in data.untestable:
                return self.endings.done(Verdict.INCONCLUSIVE, data, Reason("endpoint_untestable", {
                    "side": "good" if end == good else "bad", "commit": r.commits[end]}))
        for end in (good, bad):
            if not data.values[end] and not data.count(end):
                if not r.budget_left(data, end):
                    return self.endings.exhausted(data, None, Reason("endpoints_unmeasured"))
                return Measure(r.commits[end], Reason("endpoints.first"), "endpoints")
        if not data.values[good] or not data.values[bad]:
            return self.endpoint_trials.next(data, None, None, None, host)
        return None


@dataclass(frozen=True)
class EndpointVerdict:
    """`same` or `improved` from the endpoints, when one holds; an endpoint's next trial while a gain shows on fewer
    than ``improved_min_per_side`` trials of each and there is no tolerance to rule out.

    Each rests on ``min_trials_per_side`` trials of each endpoint (``View.ends_ok``): one session per side cannot
    carry a verdict. With a tolerance, every `same` states that it is ruled out (the bound at this look's level,
    this bisection's own dof): "no change anywhere" from a posterior a stored σ's pseudo-trials still lean on is not
    enough. A gain is claimed on ``improved_min_per_side`` trials a side, not fewer: two or three sessions a side of a
    lumpy noise fall wholly on either side of each other by chance (R2-AA: 5 false `improved` in 1,000 at 5-7)."""

    endings: Endings
    endpoint_trials: EndpointTrials
    confidence: float
    alpha: float
    min_effect_pct: float
    same_alpha_share: float
    improved_min_per_side: int
    same_no_change: float
    higher_is_better: bool

    def check(self, view: View) -> Measure | Done | None:
        data, post, ends, ruled_out, tol = view.data, view.post, view.ends, view.ruled_out, view.tol
        if not view.ends_ok:
            return None
        strict = 1.0 - (1.0 - self.confidence) * self.same_alpha_share
        tol_ok = tol <= 0 or (ruled_out is not None and ruled_out < tol)
        if tol_ok and post.p_none >= strict:
            return self.endings.done(
                Verdict.SAME, data, Reason("same.no_change", {
                    "min_effect_pct": self.min_effect_pct, "p_none": post.p_none, "ruled_out": ruled_out,
                    "alpha": self.alpha}),
                post=post, endpoint_cmp=replace(ends, verdict=Verdict.SAME), ruled_out=ruled_out)
        gain = view.p_better >= strict
        few = min(view.counts[0], view.counts[-1]) < self.improved_min_per_side
        if gain and few and tol <= 0:
            # no tolerance to rule out: the endpoints, not a search for a regression, settle what they show
            return self.endpoint_trials.next(data, post, ends, ruled_out, view.host)
        if gain and not few:
            return self.endings.done(
                Verdict.IMPROVED, data, Reason("improved.endpoints", {
                    "p_better": view.p_better, "min_effect_pct": self.min_effect_pct}),
                post=post, endpoint_cmp=replace(ends, verdict=Verdict.IMPROVED), ruled_out=ruled_out)
        if (tol > 0 and ruled_out is not None and ruled_out < tol
                and (post.p_none >= self.same_no_change
                     or not is_regression(log_of_pct(ends.effect_pct), self.higher_is_better))):
            return self.endings.done(
                Verdict.SAME, data, Reason("same.tolerance", {
                    "ruled_out": ruled_out, "alpha": self.alpha, "tol": tol, "p_none": post.p_none,
                    "no_change": post.p_none >= self.same_no_change}),
                post=post, endpoint_cmp=replace(ends, verdict=Verdict.SAME), ruled_out=ruled_out)
        return None


@dataclass(frozen=True)
class SettleEndpoints:
    """While no change is the likelier story (p_none ≥ ``likeliest``, the threshold `same` by tolerance reads too), or the bad end is if anything faster (no
    regression to locate: the question is whether one as big as the tolerance is ruled out), the endpoints settle
    it, interleaved — unless even a hopeful reading says the budget cannot (``Endings.futile``)."""

    endings: Endings
    endpoint_trials: EndpointTrials
    higher_is_better: bool
    likeliest: float  # tuning.same_no_change: "no change" is the likelier story from this posterior on

    def check(self, view: View) -> Measure | Done | None:
        post, ends, tol = view.post, view.ends, view.tol
        if post.p_none >= self.likeliest or (tol > 0 and not is_regression(log_of_pct(ends.effect_pct), self.higher_is_better)):
            if view.ends_ok:
                futile = self.endings.futile(view.data, post, ends, view.ruled_out)
                if futile is not None:
                    return futile
            return self.endpoint_trials.next(view.data, post, ends, view.ruled_out, view.host)
        return None


# ------------------------------------------------------------------------------------------------------------
# locating, and the second change


@dataclass(frozen=True)
class Locate:
    """The look-ahead's trial until the best answer holds ``confidence`` and "no change" is below ``no_change_doubt``."""

    search: Search
    confidence: float
    no_change_doubt: float

    def check(self, view: View) -> Measure | Done | None:
        if view.top_p >= self.confidence and view.post.p_none < self.no_change_doubt:
            return None
        return self.search.step(view, "locating")


@dataclass(frozen=True)
class SecondChangeDoubt:
    """While a second change keeps ``doubt`` of the posterior beside a single located one, the look-ahead's trial — as
    long as it is expected to remove ``min_gain_bits``; after that the doubt is kept (the verdict says it)."""

    search: Search
    doubt: float
    min_gain_bits: float

    def check(self, view: View) -> Measure | Done | View | None:
        p_two = view.post.p_two
        if len(view.top_key) == 1 and p_two >= self.doubt:
            step = self.search.step(view, "second-change check")
            if isinstance(step, Done) or step.gain_bits >= self.min_gain_bits:
                return step
            return replace(view, doubt=p_two)
        return None


@dataclass(frozen=True)
class Sized:
    """The located changes sized under the posterior (effects.located_step): what the checks after it test."""

    range: Range

    def check(self, view: View) -> View:
        return replace(view, steps=tuple(located_step(view.post, view.top_key, b, self.range.parent(b, view.data),
                                                      list(view.counts)) for b in view.top_key))


@dataclass(frozen=True)
class OneChange:
    """Before one change is accepted: a residual gap between an endpoint and the commit beside the change measured
    again, and each side measured densely enough that a second level step would show (or `inconclusive` when the
    budget cannot). Passes when it holds, or when the answer is two changes."""

    range: Range
    endings: Endings
    second: SecondChange

    def check(self, view: View) -> Measure | Done | None:
        r, data, post, top_key, top_p = self.range, view.data, view.post, view.top_key, view.top_p
        if len(top_key) != 1:
            return None
        st = view.steps[0]
        gaps = side_gaps(data, post, st)  # the re-measure and the probe both read them
        named = r.named(top_key, data)
        again = self.second.gap_recheck(data, gaps)
        if again is not None:
            j, gap = again
            side = "good" if j < st.at else "bad"
            return Measure(r.commits[j], Reason("second_change.gap", {
                "best": named, "p": top_p, "side": side, "gap": gap, "commit": r.commits[j]}),
                "second-change check", best=named, p=top_p, p_none=post.p_none, needs=1)
        blocked = self.second.gap_recheck_blocked(data, gaps)
        if blocked is not None:
            gap, price = blocked
            return self.endings.exhausted(data, post, Reason("gap_unrechecked", {"gap": gap}), top_key=top_key,
                                          top_p=top_p, ends=view.ends, ruled_out=view.ruled_out, price=price,
                                          price_of="gap")
        probe, short = self.second.probe_for(data, post, st, gaps)
        if probe is not None:
            return Measure(r.commits[probe], Reason("second_change.probe", {"best": named, "p": top_p}),
                           "second-change check", best=named, p=top_p, p_none=post.p_none,
                           needs=self.second.trials(data, post, st, gaps))
        if short is not None:
            return self.endings.exhausted(data, post, Reason("side_thin"), top_key=top_key, top_p=top_p,
                                          ends=view.ends, ruled_out=view.ruled_out, price=short, price_of="sides")
        return None


# ------------------------------------------------------------------------------------------------------------
# the located changes' pairs


@dataclass(frozen=True)
class PairChecks:
    """The checks on each located change's pair, in order: its direction; for a step under ``small_step_sigmas``·σ,
    ``ends_before_naming`` trials on each endpoint; the trials on each side (``trials_at_change``: one wild session
    must not carry a verdict alone; ``small_step_trials`` for a small step); the commit against its parent on their
    own trials and beyond the spread of repeats of one build. The first open one is confirmed (``PairConfirm``)."""

    range: Range
    confirm: PairConfirm
    sigma_prior: float
    small_step_sigmas: float
    small_step_trials: int
    ends_before_naming: int
    change_trials_z: float
    min_trials_at_change: int
    max_trials_at_change: int

    higher_is_better: bool = True

    def check(self, view: View) -> Measure | Done | View | None:
        data, post, steps = view.data, view.post, view.steps
        ctx = Located(view.top_key, view.top_p, view.ends, view.ruled_out)
        pure = pure_error(data)
        found = self.first_open(data, post, steps, pure)
        if found is None:
            return None
        st, open_ = found
        if st is None:  # an endpoint short of the trials a small step's verdict rests on (open_: which one)
            end = open_
            answer = self.confirm.confirm_end(data, post, end, ctx, self.ends_before_naming)
            what = Reason("ends_before_naming", {"n": self.ends_before_naming})
        else:
            answer = self.confirm.confirm(data, post, st, open_, ctx)
            what = open_.what
        if isinstance(answer, Done) and len(steps) == 2 and is_regression(steps[0].step, self.higher_is_better) \
                and self.first_open(data, post, steps[:1], pure) is None:
            # The earlier change passed every check of its own; only the later one's cannot be settled within the
            # budget. The earlier one is the first bad commit whatever the later one turns out to be: it is named,
            # and the later one said beside it, not named (a search that confirmed a clear step and then spent its
            # whole budget on a smaller one must not end naming neither).
            return replace(view, steps=steps[:1], unsettled=steps[1:], unsettled_check=what,
                           unsettled_price=answer.outcome.more_trials)
        return answer

    def first_open(self, data: SearchData, post: ChangePosterior, steps: tuple[Step, ...],
                   pure: tuple[float, float]) -> tuple[Step | None, OpenCheck | int] | None:
        """The first check still open over ``steps``, in the order they are confirmed: (the change, its open
        check), or (None, the endpoint) when an endpoint lacks the trials a small step needs; None when all pass."""
        for st in steps:
            open_ = self.confirm.direction(st)
            if open_ is not None:
                return st, open_
        sd_small = max(pure[0], self.sigma_prior)
        small = [st for st in steps if self.small_step_sigmas > 0 and abs(st.step) < self.small_step_sigmas * sd_small]
        for end in (0, self.range.n - 1) if small else ():
            if data.count(end) < self.ends_before_naming:
                return None, end
        for st in steps:
            need = trials_at_change(post, st, self.change_trials_z, self.min_trials_at_change, self.max_trials_at_change)
            if st in small:
                need = max(need, self.small_step_trials)
            if min(data.count(st.parent), data.count(st.at)) < need:
                what = Reason("trials", {"need": need, "second": need <= self.min_trials_at_change,
                                         "sigma_pct": pct(post.sigma_top), "step_pct": abs(pct(st.step))})
                return st, OpenCheck("trials", what, None, float(need))
        # The change must also show between its own commit and its parent, not only between the segments around
        # it: sessions that happened to fall on the same side of the noise cannot carry it then.
        for st in steps:
            open_ = self.confirm.pure(data, st, pure)
            if open_ is not None:
                return st, open_
        return None


@dataclass(frozen=True)
class LayoutRecheck:
    """A change smaller than ``layout_check_pct`` must hold under layouts its commits did not share (Mytkowicz et
    al.: env size and code placement alone move timings by several percent). Re-measure, then keep it only if every
    layout can be left out without the step vanishing (``min_distinct`` layouts a side, ``keep`` of the step); the
    ones that do not survive leave ``View.steps`` for ``View.layout_sensitive``, and when none is left the search
    ends `inconclusive`, nothing blamed."""

    range: Range
    endings: Endings
    layout_check_pct: float
    min_trials_at_change: int
    extra_trials: int
    min_distinct: int
    keep: float

    def check(self, view: View) -> Measure | Done | View | None:
        r, data, post = self.range, view.data, view.post
        sensitive: list[Step] = []
        for st in view.steps:
            if abs(pct(st.step)) >= self.layout_check_pct:
                continue
            ok, again = self.survives(data, st)
            if ok:
                continue
            extra = data.count(st.parent) + data.count(st.at) - 2 * self.min_trials_at_change
            if again is not None and extra < self.extra_trials:
                if r.budget_left(data, again):
                    return Measure(
                        r.commits[again], Reason("confirm.layout", {
                            "commit": r.commits[st.at], "step_pct": pct(st.step),
                            "layout_check_pct": self.layout_check_pct,
                            "so_far": extra + 2 * self.min_trials_at_change,
                            "at_most": self.extra_trials + 2 * self.min_trials_at_change}),
                        "confirming", vary_layout=True, p_none=post.p_none, needs=self.extra_trials - extra)
                # the budget ended before the re-check did: it was not failed, it was not made
                return self.endings.exhausted(
                    data, post, Reason("layout_not_rechecked", {"commit": r.commits[st.at], "step_pct": pct(st.step),
                                                                "layout_check_pct": self.layout_check_pct}),
                    top_key=view.top_key, top_p=view.top_p, ends=view.ends, ruled_out=view.ruled_out,
                    price=self.extra_trials - extra, price_of="layout")
            sensitive.append(st)
        if not sensitive:
            return None
        kept = tuple(st for st in view.steps if st not in sensitive)
        if not kept:
            return self.endings.done(
                Verdict.INCONCLUSIVE, data, Reason("layout_sensitive", {"steps": self.endings.steps_named(data, sensitive)}),
                post=post, endpoint_cmp=view.ends, ruled_out=view.ruled_out, top_key=view.top_key,
                layout_sensitive=tuple(r.commits[st.at] for st in sensitive), probability=view.top_p)
        return replace(view, steps=kept, layout_sensitive=tuple(sensitive))

    def survives(self, data: SearchData, st: Step) -> tuple[bool, int | None]:
        """Whether the step at ``st`` survives leaving out each layout, and which commit to re-measure if not.

        Only trials that recorded a layout count. The culprit and its parent must each have run under at least
        ``min_distinct`` layouts; then, for every layout, the culprit-minus-parent contrast of the trials of the
        other layouts must keep the step's sign and at least ``keep`` of its size. (True, None) when no trial
        recorded a layout (nothing to check)."""
        lp, lc = data.layouts[st.parent], data.layouts[st.at]
        if not any(x is not None for x in (*lp, *lc)):
            return True, None
        vp, vc = data.values[st.parent], data.values[st.at]
        dp, dc = set(lp), set(lc)
        fewer = st.parent if (len(dp), len(vp)) <= (len(dc), len(vc)) else st.at
        if min(len(dp), len(dc)) < self.min_distinct:
            return False, fewer
        sign = 1.0 if st.step > 0 else -1.0
        for left_out in dp | dc:
            rp = [v for v, x in zip(vp, lp) if x != left_out]
            rc = [v for v, x in zip(vc, lc) if x != left_out]
            if not rp or not rc:
                continue
            d = float(np.mean(rc) - np.mean(rp))
            if sign * d < self.keep * abs(st.step):
                return False, fewer
        return True, None


# ------------------------------------------------------------------------------------------------------------
# the verdict


@dataclass(frozen=True)
class Naming:
    """The culprit is the first located regression (`regressed`); a located improvement is listed as such, and when
    it is all that was located the verdict is `improved`. Always answers."""

    range: Range
    endings: Endings
    settings: StatsConfig  # the comparisons' level and minimum effect
    higher_is_better: bool
    min_gain_bits: float

    def check(self, view: View) -> Done:
        r, data, post, top_key, top_p = self.range, view.data, view.post, view.top_key, view.top_p
        regressions = [st for st in view.steps if is_regression(st.step, self.higher_is_better)]
        improvements = [st for st in view.steps if not is_regression(st.step, self.higher_is_better)]
        if not regressions:
            return self.endings.done(
                Verdict.IMPROVED, data, Reason("improved.located", {"steps": self.endings.steps_named(data, improvements)}),
                post=post, endpoint_cmp=view.ends, ruled_out=view.ruled_out, top_key=top_key,
                improvements=tuple(r.commits[st.at] for st in improvements))
        first = regressions[0]
        cmp, ends, noise = self.comparisons(view, first)
        return self.endings.done(
            Verdict.REGRESSED, data, Reason("regressed", {
                "first": r.sets((first.at,), data)[0], "n_before": first.n_before, "n_after": first.n_after,
                "noise": noise, "p": top_p, "p_none": post.p_none,
                "further": self.endings.steps_named(data, regressions[1:]),
                "improvements": self.endings.steps_named(data, improvements),
                "doubt": view.doubt, "min_gain_bits": self.min_gain_bits,
                "unsettled": self.endings.steps_named(data, view.unsettled), "unsettled_check": view.unsettled_check,
                "unsettled_price": view.unsettled_price}),
            post=post, endpoint_cmp=ends, culprit_cmp=cmp, ruled_out=view.ruled_out, top_key=top_key,
            culprit=first.at, extra=tuple(r.commits[st.at] for st in regressions[1:]),
            improvements=tuple(r.commits[st.at] for st in improvements), probability=top_p)

    def comparisons(self, view: View, first: Step) -> tuple[Comparison, Comparison, dict]:
        """The culprit's comparison, the endpoints' and the noise the verdict states, under one noise figure: the
        spread of repeats over the range when the sides of a single change spread differently (each weighed by its
        own), else the step's own σ."""
        s, data, post, counts, top_key = self.settings, view.data, view.post, list(view.counts), view.top_key
        cmp = step_comparison(first, Verdict.REGRESSED, s)
        sides = side_spreads(data, top_key, self.endings.side_scale_alpha) if len(top_key) == 1 else None
        if sides is not None and all(v is not None for v in sides):
            # the sides' repeats spread differently and each is weighed by its own: say both, not the quieter one
            before, after = (pct(math.sqrt(v[0])) for v in sides)
            sd_own, dof_own = pure_error(data)
            noise = {"pct": pct(sd_own), "before_pct": before, "after_pct": after, "dof": dof_own}
            # one noise figure for the verdict (the text's, --json's and the kept one): the spread of repeats over
            # the range; the sides' figures say what it is made of, in the comparisons' own noise field too
            own = dict(sigma_b_pct=pct(sd_own), sigma_source=(
                f"the spread of repeats over the range, {dof_own:g} dof; {before:.1f}% before the change and "
                f"{after:.1f}% from it on, each side weighed by its own"))
            cmp = replace(cmp, **own)
            noise_text = (f"noise {pct(sd_own):.1f}% per trial over the range: {before:.1f}% per trial before it and "
                          f"{after:.1f}% from it on, each side weighed by its own")
            ends = replace(endpoint_comparison(post, counts, view.level_ratio, s, self.higher_is_better,
                                               noise_text=noise_text)[0], **own)
        else:
            noise = {"pct": pct(first.sigma)}
            # the endpoints' comparison under the hypothesis the verdict names (its noise is the verdict's noise)
            ends = endpoint_comparison(post, counts, view.level_ratio, s, self.higher_is_better,
                                       hypothesis=post.top(top_key))[0]
        return cmp, ends, noise


__all__ = [
    "EndpointTrials", "EndpointVerdict", "EndpointsFirst", "Gate", "LayoutRecheck", "Locate", "Naming", "OneChange",
    "PairChecks", "Search", "SecondChangeDoubt", "SettleEndpoints", "Sized",
]
