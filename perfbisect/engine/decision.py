"""The decision steps of the bisection policy, in the order ``SearchPolicy._decide_step`` takes them.

One decision is a sequence of named steps over an explicit state, the ``Look``: each step either answers —
a trial to run (``Measure``) or the outcome (``Done``) — or returns None and hands the look to the next.
In order:

1. ``_endpoints_first``: each endpoint measured once before anything else (an untestable one ends the search);
2. ``_look``: the posterior over "no change", "one change at k", "two changes" and what the endpoints say
   under it;
3. ``_endpoint_verdict``: `same` or `improved` from the endpoints; ``_settle_endpoints``: while "no change" is
   likeliest (or the bad end faster) the interleaved endpoints settle it, or the budget cannot (``_futile``);
4. ``_locate``: the look-ahead's trial (``_search_step``) until one answer holds ``confidence``;
5. the second-change check: ``_second_change_doubt`` (a second change the posterior still suspects, while
   trials can move it), then, the located changes sized (``effects.located_step``), ``_one_change_check``
   (a residual gap re-measured, each side probed so a second step would show);
6. ``_located_checks`` and ``_layout_recheck``: the gates on each change's pair (change_checks.py);
7. ``_verdict``: the culprit is the first located regression; a located improvement is reported as such.

``DecisionSteps`` is mixed into ``bisect.SearchPolicy``: it reads the policy's ``commits``, ``n``,
``index``, ``settings``, ``tuning``, ``noise`` and ``higher_is_better``, fits through its ``_posterior``,
confirms through ``change_checks.LocatedChecks`` and ends through ``outcomes.Outcomes``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Sequence

from .change_checks import Gate, Located
from .change_posterior import ChangePosterior
from .effects import Step, endpoint_comparison, is_regression, located_step, ruled_out_pct, step_comparison
from .lookahead import best_trial
from ..metrics import level_text, short_probability
from ..model import Comparison, Observation, Verdict
from .observations import Done, Measure, SearchData
from .stats import log_of_pct, pct


@dataclass
class Look:
    """What one decision knows once both endpoints are measured, handed from each step to the next.

    ``_look`` makes it; the steps after locating add what they found (``doubt``, ``steps``,
    ``layout_sensitive``), so the verdict reads what every check before it saw."""

    data: SearchData  # the observations regrouped, with the trials in flight
    host: str | None  # the node this decision is for (``next_batch`` with hosts); None = any
    post: ChangePosterior
    counts: list[int]  # usable trials per commit
    ends: Comparison  # the endpoints' comparison (bad vs good) at alpha
    p_better: float  # probability of a gain beyond the minimum effect, at this look's share of alpha, own dof
    ruled_out: float | None  # the regression the endpoints rule out at this look's level (percent)
    top_key: tuple[int, ...]  # the best answer: () no change, (k,) one change, (k1, k2) two
    top_p: float  # its posterior probability
    ends_ok: bool  # both endpoints carry tuning.min_trials_per_side trials
    tol: float  # the regression a `same` must rule out (percent; 0 = none)
    doubt: float | None = None  # p_two a second change keeps that no trial is expected to settle
    steps: list[Step] = field(default_factory=list)  # each located change, sized under the posterior
    layout_sensitive: list[Step] = field(default_factory=list)  # changes that did not survive another layout

    @property
    def located(self) -> Located:
        """What a stop while confirming carries: the best answer, its probability, the endpoints, their bound."""
        return Located(self.top_key, self.top_p, self.ends, self.ruled_out)


class DecisionSteps:
    """The steps of one decision, in order (module docstring; mixed into ``bisect.SearchPolicy``)."""

    def _decide_step(self, observations: Sequence[Observation], pending: Sequence[tuple[str, str | None]],
                     host: str | None, memo: dict) -> Measure | Done:
        """What ``_decide`` asks for, before the best answer is attached: the first step that answers."""
        if "data" not in memo:
            memo["data"] = self._regroup(observations)
        data = replace(memo["data"], pending=[(self.index[c], h) for c, h in pending])
        act = self._endpoints_first(data, host)
        if act is not None:
            return act
        look = self._look(data, host, memo)
        for step in (self._endpoint_verdict, self._settle_endpoints, self._locate, self._second_change_doubt):
            act = step(look)
            if act is not None:
                return act
        # Located: size each change under the posterior; the culprit is the first regression. Every check below
        # either passes, asks for a trial that can still settle it (saying where it stands), or ends the search
        # `inconclusive` with the best answer and the price of settling it: a verdict never skips its own check.
        look.steps = [located_step(look.post, look.top_key, b, self._parent(b, data), look.counts)
                      for b in look.top_key]
        for step in (self._one_change_check, self._located_checks, self._layout_recheck):
            act = step(look)
            if act is not None:
                return act
        return self._verdict(look)

    # ----------------------------------------------------------------------------------------
    # the endpoints

    def _endpoints_first(self, data: SearchData, host: str | None) -> Measure | Done | None:
        """Each endpoint is measured once before anything else, and an untestable one ends the search; while
        both are started and not both back, the nodes that wait measure them too. None once both are in."""
        good, bad = 0, self.n - 1
        for end in (good, bad):
            if end in data.untestable:
                return self._done(
                    Verdict.INCONCLUSIVE, data,
                    explanation=(
                        f"The {'good' if end == good else 'bad'} endpoint {self.commits[end][:10]} cannot be "
                        f"tested (a patch conflict, a failed build, or no trial that produced a number: `perfbisect "
                        f"log` shows why), so there is nothing to bisect against. Pick an endpoint that builds and "
                        f"can be measured."
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
        return None

    def _look(self, data: SearchData, host: str | None, memo: dict) -> Look:
        """The posterior (one per batch: ``memo``) and what the endpoints say under it."""
        s = self.settings
        good, bad = 0, self.n - 1
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
        # No verdict rests on fewer than tuning.min_trials_per_side trials of each endpoint: one session per side
        # cannot carry a verdict.
        ends_ok = min(counts[good], counts[bad]) >= self.tuning.min_trials_per_side
        return Look(data, host, post, counts, ends, p_better_seq, ruled_out, top_key, top_p, ends_ok,
                    self._tolerance())

    def _endpoint_verdict(self, look: Look) -> Measure | Done | None:
        """`same` or `improved` from the endpoints, when one holds; an endpoint's next trial while a gain shows on
        fewer than tuning.improved_min_per_side trials of each and there is no tolerance to rule out; None otherwise."""
        s, data, post, ends, ruled_out, tol = self.settings, look.data, look.post, look.ends, look.ruled_out, look.tol
        # No regression: "no change at all" holds the posterior, the bad end is faster, or a regression
        # as big as the tolerance is ruled out while no change is the likelier story. Each rests on at
        # least tuning.min_trials_per_side trials of each endpoint: one session per side cannot carry a verdict.
        # (a verdict reached on the endpoints is also their comparison's verdict in --json and the report: their
        # own rule — the whole interval inside ±min_effect_pct — read `inconclusive` beside a `same`)
        if not look.ends_ok:
            return None
        # With a tolerance, every `same` states that it is ruled out (the bound above, this bisection's own
        # dof): "no change anywhere" from a posterior that a stored σ's pseudo-trials still lean on is not enough.
        tol_ok = tol <= 0 or (ruled_out is not None and ruled_out < tol)
        if tol_ok and post.p_none >= 1.0 - (1.0 - s.confidence) * self.tuning.same_alpha_share:
            return self._done(
                Verdict.SAME, data, post=post, endpoint_cmp=replace(ends, verdict=Verdict.SAME), ruled_out=ruled_out,
                explanation=(
                    f"No regression beyond noise: no change of {s.min_effect_pct:g}% or more anywhere in the "
                    f"range holds {post.p_none:.3f} of the posterior after {data.trials} trials"
                    + (f"; no regression ≥ {ruled_out:.1f}% ({level_text(100 * (1 - s.alpha))}, one-sided)" if ruled_out is not None else "")
                    + "."  # the endpoints' effect and interval are their comparison's (one line, one field), not repeated here
                ),
            )
        # A gain is claimed on tuning.improved_min_per_side trials of each endpoint, not fewer: two or three sessions a
        # side of a lumpy session noise fall wholly on either side of each other by chance, and their spread then
        # says little about the noise (R2-AA: 5 false `improved` in 1,000 at 5-7 trials). On fewer, the weaker claim
        # below — no regression as big as the tolerance, the bad end if anything faster — is made when it holds.
        gain = look.p_better >= 1.0 - (1.0 - s.confidence) * self.tuning.same_alpha_share
        few = min(look.counts[0], look.counts[-1]) < self.tuning.improved_min_per_side
        if gain and few and tol <= 0:
            # no tolerance to rule out: the endpoints, not a search for a regression, settle what they show
            return self._measure_endpoint(data, post, ends, ruled_out, look.host)
        if gain and not few:
            return self._done(
                Verdict.IMPROVED, data, post=post, endpoint_cmp=replace(ends, verdict=Verdict.IMPROVED), ruled_out=ruled_out,
                explanation=(
                    f"The bad endpoint is faster than the good one (probability {look.p_better:.3f} of a gain beyond "
                    f"{s.min_effect_pct:g}%): no regression to bisect."
                ),
            )
        if (tol > 0 and ruled_out is not None and ruled_out < tol
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
        return None

    def _settle_endpoints(self, look: Look) -> Measure | Done | None:
        """While no change is the likeliest story, or the bad end is if anything faster (no regression to locate:
        the question is whether one as big as the tolerance is ruled out), the endpoints settle it, interleaved —
        unless even a hopeful reading says the budget cannot. None when there is a change to locate."""
        post, ends, tol = look.post, look.ends, look.tol
        if post.p_none >= 0.5 or (tol > 0 and not is_regression(log_of_pct(ends.effect_pct), self.higher_is_better)):
            if look.ends_ok:
                futile = self._futile(look.data, post, ends, look.ruled_out, tol)
                if futile is not None:
                    return futile
            return self._measure_endpoint(look.data, post, ends, look.ruled_out, look.host)
        return None

    # ----------------------------------------------------------------------------------------
    # locating, and the second-change check

    def _locate(self, look: Look) -> Measure | Done | None:
        """The look-ahead's trial until the best answer holds ``confidence`` and "no change" is below
        tuning.no_change_doubt; None once a change is located."""
        located = look.top_p >= self.settings.confidence and look.post.p_none < self.tuning.no_change_doubt
        if not located:
            return self._search_step(look.data, look.post, look.top_key, look.top_p, look.ends, look.ruled_out,
                                     phase="locating", host=look.host)
        return None

    def _second_change_doubt(self, look: Look) -> Measure | Done | None:
        """While a second change keeps tuning.second_change_doubt of the posterior beside a single located one, the
        look-ahead's trial — as long as it is expected to remove tuning.min_gain_bits; after that the doubt is
        kept (``look.doubt``: the verdict says it) and None returned."""
        p_two = look.post.p_two
        if len(look.top_key) == 1 and p_two >= self.tuning.second_change_doubt:
            step = self._search_step(look.data, look.post, look.top_key, look.top_p, look.ends, look.ruled_out,
                                     phase="second-change check", host=look.host)
            if isinstance(step, Done) or step.gain_bits >= self.tuning.min_gain_bits:
                return step
            look.doubt = p_two
        return None

    def _one_change_check(self, look: Look) -> Measure | Done | None:
        """Before one change is accepted: a residual gap between an endpoint and the commit beside the change
        measured again, and each side measured densely enough that a second level step would show (or the
        search `inconclusive` when the budget cannot). None when it holds, or the answer is two changes."""
        data, post, top_key, top_p = look.data, look.post, look.top_key, look.top_p
        if len(top_key) != 1:
            return None
        st = look.steps[0]
        gaps = self._side_gaps(data, post, st)  # the re-measure and the probe both read them
        again = self._gap_recheck(data, post, st, gaps)
        if again is not None:
            j, gap = again
            return Measure(
                self.commits[j],
                f"second-change check: {self._progress_key(data, top_key)} holds {top_p:.3f} of the posterior, but "
                f"the {'good' if j < st.at else 'bad'} endpoint and the commit beside the change on its side differ by "
                f"{gap:.1f} standard errors; measuring {self.commits[j][:10]} again before one change is accepted",
                "second-change check",
                best=self._progress_key(data, top_key),
                p=top_p,
                p_none=post.p_none,
                check=f"the {'good' if j < st.at else 'bad'} endpoint against the commit beside the change",
                needs=1,
            )
        blocked = self._gap_recheck_blocked(data, post, st, gaps)
        if blocked is not None:
            gap, price = blocked
            return self._exhausted(
                data, post, f"one change was not accepted yet (an endpoint and the commit beside the change on its "
                            f"side differ by {gap:.1f} standard errors, to be measured again first)",
                top_key=top_key, top_p=top_p, ends=look.ends, ruled_out=look.ruled_out, price=price,
                price_of="measuring that pair again")
        probe, short = self._second_change_probe_for(data, post, st, gaps)
        if probe is not None:
            return Measure(
                self.commits[probe],
                f"second-change check: {self._progress_key(data, top_key)} holds {top_p:.3f} of the posterior; "
                f"measuring this side of it so a second level step would show",
                "second-change check",
                best=self._progress_key(data, top_key),
                p=top_p,
                p_none=post.p_none,
                check="that a second step on either side of the change would show",
                needs=self._second_change_trials(data, post, st, gaps),
            )
        if short is not None:
            return self._exhausted(
                data, post, "one change was not accepted yet (a side of it has too few trials to show a second "
                            "level step)", top_key=top_key, top_p=top_p, ends=look.ends, ruled_out=look.ruled_out,
                price=short, price_of="the trials that would show a second step on either side")
        return None

    # ----------------------------------------------------------------------------------------
    # the located changes' checks, and the verdict

    def _located_checks(self, look: Look) -> Measure | Done | None:
        """The gates on each located change's pair (change_checks.py), in order: its direction, the trials on each
        side (and on each endpoint, for a small step), the commit against its parent on their own trials and
        beyond the spread of repeats of one build. The first open one is confirmed (``_confirm``); None when all
        pass."""
        data, post, steps, ctx = look.data, look.post, look.steps, look.located
        for st in steps:
            gate = self._direction_gate(st)
            if gate is not None:
                return self._confirm(data, post, st, gate, ctx)
        pure = self._pure_error(data)
        sd_small = max(pure[0], self.noise.sigma_b)
        small = [st for st in steps if self.tuning.small_step_sigmas > 0 and abs(st.step) < self.tuning.small_step_sigmas * sd_small]
        for end in (0, self.n - 1) if small else ():
            if data.count(end) < self.tuning.ends_before_naming:
                return self._confirm_end(data, post, end, look.top_key, ctx)
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
                return self._confirm(data, post, st, Gate("trials", why, None, float(need)), ctx)
        # The change must also show between its own commit and its parent, not only between the segments
        # around it: sessions that happened to fall on the same side of the noise cannot carry it then.
        for st in steps:
            gate = self._local_gate(data, post, st)
            if gate is not None:
                return self._confirm(data, post, st, gate, ctx)
            gate = self._pure_gate(data, st, pure)
            if gate is not None:
                return self._confirm(data, post, st, gate, ctx)
        return None

    def _layout_recheck(self, look: Look) -> Measure | Done | None:
        """Layout: a small change must hold under layouts its commits did not share (Mytkowicz et al.: env size and
        code placement alone move timings by several percent). Re-measure, then keep it only if every layout can be
        left out without the step vanishing; the changes that do not survive leave ``look.steps`` for
        ``look.layout_sensitive``, and when none is left the search ends `inconclusive`, nothing blamed."""
        s, data, post = self.settings, look.data, look.post
        layout_sensitive: list[Step] = []
        for st in look.steps:
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
                        "confirming", vary_layout=True, p_none=post.p_none,
                        check=f"the change at {self.commits[st.at][:10]} under another layout",
                        needs=self.tuning.layout_extra_trials - extra,
                    )
                # the budget ended before the re-check did: it was not failed, it was not made
                return self._exhausted(
                    data, post, f"the change at {self.commits[st.at][:10]} ({pct(st.step):+.1f}%) is smaller than "
                                f"{s.layout_check_pct:g}% and has not been re-measured under another layout yet",
                    top_key=look.top_key, top_p=look.top_p, ends=look.ends, ruled_out=look.ruled_out,
                    price=self.tuning.layout_extra_trials - extra, price_of="the layout re-check (at most)")
            layout_sensitive.append(st)
        look.steps = [st for st in look.steps if st not in layout_sensitive]
        look.layout_sensitive = layout_sensitive
        if layout_sensitive and not look.steps:
            return self._done(
                Verdict.INCONCLUSIVE, data, post=post, endpoint_cmp=look.ends, ruled_out=look.ruled_out,
                top_key=look.top_key, layout_sensitive=tuple(self.commits[st.at] for st in layout_sensitive),
                probability=look.top_p,
                explanation=(
                    f"Layout-sensitive, not blamed: the change located at {self._describe_steps(data, layout_sensitive)} "
                    f"does not survive a change of layout — with the trials of one layout left out, the step "
                    f"shrinks below half its size or turns around. Environment size, worktree path length and "
                    f"hash seed move timings by several percent without any code change on the hot path "
                    f"(Mytkowicz et al., ASPLOS 2009); measure this commit with its parent again, or raise "
                    f"stats.layout_check_pct only if you know the benchmark is layout-proof."
                ),
            )
        return None

    def _verdict(self, look: Look) -> Done:
        """The culprit is the first located regression (`regressed`); a located improvement is listed as such, and
        when it is all that was located the verdict is `improved`."""
        data, post, top_key, top_p = look.data, look.post, look.top_key, look.top_p
        regressions = [st for st in look.steps if is_regression(st.step, self.higher_is_better)]
        improvements = [st for st in look.steps if not is_regression(st.step, self.higher_is_better)]
        if not regressions:
            return self._done(
                Verdict.IMPROVED, data, post=post, endpoint_cmp=look.ends, ruled_out=look.ruled_out, top_key=top_key,
                improvements=tuple(self.commits[st.at] for st in improvements),
                explanation=(
                    f"The only change located is an improvement: {self._describe_steps(data, improvements)}. "
                    f"No regression to blame."
                ),
            )
        first = regressions[0]
        cmp, ends, noise_text = self._culprit_comparisons(look, first)
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
        if look.doubt is not None:
            expl += (
                f" A second, smaller change elsewhere keeps {look.doubt:.2f} of the whole posterior and further trials "
                f"are not expected to settle it (each < {self.tuning.min_gain_bits:g} bits): the first bad commit stands."
            )
        return self._done(
            Verdict.REGRESSED, data, post=post, endpoint_cmp=ends, culprit_cmp=cmp, ruled_out=look.ruled_out,
            top_key=top_key, culprit=first.at,
            extra=tuple(self.commits[st.at] for st in regressions[1:]),
            improvements=tuple(self.commits[st.at] for st in improvements),
            probability=top_p, explanation=expl,
        )

    def _culprit_comparisons(self, look: Look, first: Step) -> tuple[Comparison, Comparison, str]:
        """The culprit's comparison, the endpoints' and the noise the verdict states, under one noise figure: the
        spread of repeats over the range when the sides of a single change spread differently (each weighed by
        its own), else the step's own σ."""
        s, data, post, counts, top_key = self.settings, look.data, look.post, look.counts, look.top_key
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
        return cmp, ends, noise_text

    # ----------------------------------------------------------------------------------------
    # the trials the steps ask for: the endpoints interleaved, the look-ahead's pick

    def _measure_endpoint(self, data: SearchData, post: ChangePosterior | None, ends: Comparison | None,
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
    def _several_hosts(data: SearchData, host: str | None) -> bool:
        names = set(data.host_names) | {h or "" for _, h in data.pending} | {host or ""}
        return len(names) > 1

    def _search_step(self, data: SearchData, post: ChangePosterior, top_key, top_p, ends, ruled_out, phase: str,
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
            p_none=post.p_none,
            check="whether a second change hides beside the located one" if phase == "second-change check" else "",
        )


__all__ = ["DecisionSteps", "Look"]
