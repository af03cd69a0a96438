"""The checks between a located change and its name: what each asks for, where it stands, what settling it costs.

The posterior locates a change; before it is named (DESIGN.md §5, ``bisect``'s docstring, point 4) it must
pass the checks here, each of which either passes, asks for a trial that can still settle it, or ends the
search `inconclusive` with the best answer and the price of settling it — a verdict never skips its own check:

- the second-change check: each side of a single change measured densely enough that a second level step
  would show (``_second_change_probe_for``), and a residual gap between an endpoint and the commit beside the
  change measured again before one change is accepted (``_gap_recheck``, ``_gap_recheck_blocked``);
- the gates on the pair (``Gate``), decided by ``_confirm``: the step's direction, the trials each side
  carries (``_trials_at_change``; the endpoints' own, ``_confirm_end``), the commit against its parent on their
  own trials (``_local_gate``) and beyond the spread of repeats of one build (``_pure_gate``, its level spent
  over the looks by ``_pure_alpha``); a gate no trial within the budget can carry across, even on a hopeful
  reading (``_projected``, ``_settles_in``), ends the search at once (``_confirm_futile``);
- the layout re-check of a small change (``_layout_check``).

``LocatedChecks`` is mixed into ``bisect.SearchPolicy`` (it reads the policy's ``commits``, ``n``,
``settings``, ``tuning`` and ``noise``, and ends searches through ``outcomes.Outcomes``); the steps of
``decision.DecisionSteps`` call it in order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .change_posterior import ChangePosterior
from .effects import Step
from ..metrics import short_probability
from ..model import Comparison, Verdict
from .observations import Done, Measure, SearchData
from .outcomes import PRICE_LIMIT
from .stats import chi2_quantile, log_of_pct, normal_quantile, pct, pooled_squares, t_cdf, t_quantile


@dataclass(frozen=True)
class Gate:
    """One check a located change must pass before it is named, as it stands now."""

    kind: str  # direction | trials | local | pure
    what: str  # what must hold, as the reason says it
    z: float | None  # where it stands (standard errors); None for a count of trials
    need: float  # its threshold: the z it must reach, or the trials each side must carry


@dataclass(frozen=True)
class Located:
    """What a stop while confirming carries: the best answer, its probability, the endpoints and their bound."""

    key: tuple[int, ...]
    p: float
    ends: Comparison
    ruled_out: float | None


class LocatedChecks:
    """The checks a located change passes before it is named (mixed into ``bisect.SearchPolicy``): each says
    where it stands and asks only for trials that can settle it."""

    def _direction_gate(self, st: Step) -> Gate | None:
        """Open while the step's direction is not certain at ``confidence`` (its t against the quantile)."""
        z = abs(st.step) / st.se if st.se > 0 else math.inf
        need = t_quantile(self.settings.confidence, st.dof)
        if st.se > 0 and t_cdf(-z, st.dof) > 1.0 - self.settings.confidence:
            return Gate("direction", "its direction is not certain yet", z, need)
        return None

    def _local_gate(self, data: SearchData, post: ChangePosterior, st: Step) -> Gate | None:
        """Open while the commit and its parent differ by less than tuning.local_z standard errors on their own trials."""
        if self.tuning.local_z <= 0:
            return None
        z = self._step_z(data, st, post.sigma_top)
        if z < self.tuning.local_z:
            return Gate("local", f"the commit and its parent must differ by {self.tuning.local_z:g} standard errors on their own "
                                  f"trials", z, self.tuning.local_z)
        return None

    def _pure_gate(self, data: SearchData, st: Step, pure: tuple[float, float]) -> Gate | None:
        """Open while the pair's own contrast is under the one-sided t quantile at this look's share of tuning.pure_alpha,
        with σ the spread of repeats of one build (``_pure_error``)."""
        if self.tuning.pure_alpha <= 0:
            return None
        sd_own, dof_own = pure
        what = ("the commit and its parent must differ on their own trials beyond the spread of repeated trials of "
                "one build")
        if dof_own < 1:
            return Gate("pure", what, 0.0, math.inf)
        z = self._step_z(data, st, sd_own)
        need = t_quantile(1.0 - self._pure_alpha(data, st), dof_own)
        return Gate("pure", what, z, need) if z < need else None

    @staticmethod
    def _where(gate: Gate, data: SearchData, st: Step) -> str:
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

    def _projected(self, gate: Gate, data: SearchData, post: ChangePosterior, st: Step, pure: tuple[float, float],
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

    def _settles_in(self, gate: Gate, data: SearchData, post: ChangePosterior, st: Step, pure: tuple[float, float],
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

    def _confirm(self, data: SearchData, post: ChangePosterior, st: Step, gate: Gate, ctx: Located) -> Measure | Done:
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
            p_none=post.p_none,
            check=f"the change at {self.commits[st.at][:10]} against its parent",
            needs=(price if gate.kind != "trials" else
                   sum(max(0, math.ceil(gate.need) - data.count(b)) for b in (st.parent, st.at)) or None),
        )

    def _confirm_futile(self, data: SearchData, post: ChangePosterior, ctx: Located, what: str, where: str, left: int,
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

    def _confirm_end(self, data: SearchData, post: ChangePosterior, end: int, top_key, ctx: Located) -> Measure | Done:
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
                f"{self.tuning.ends_before_naming} on each side of the range", "confirming", p_none=post.p_none,
                check=f"both endpoints' trials ({self.tuning.ends_before_naming} each) before a small change is named",
                needs=short)
        if not self._budget_left(data, end):
            return self._exhausted(data, post, f"the change is located, but a check is still open: {what} ({where})",
                                   top_key=ctx.key, top_p=ctx.p, ends=ctx.ends, ruled_out=ctx.ruled_out, price=short,
                                   price_of="the endpoints' trials")
        return self._confirm_futile(data, post, ctx, what, where, left, short, hopeful=False)

    # ----------------------------------------------------------------------------------------
    # the second-change check: a side of the change too thinly measured to show a second step, a residual gap

    def _second_change_probe_for(self, data: SearchData, post: ChangePosterior, st: Step,
                                 gaps: list[tuple[float, tuple[int, int]]] | None = None) -> tuple[int | None, int | None]:
        """(a commit to measure so that a second step on either side of the change could show, or None; the trials
        a side still needs when the budget has none of its commits left, or None).

        For every split point inside a side segment, the trials on its two sides give an effective
        count n_a·n_b/(n_a + n_b); the weakest split must reach the count that shows the step at
        ``settings.second_change_z`` standard errors under the current noise.
        """
        need = self._probe_need(data, post, st, gaps)
        if need is None:
            return None, None
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
                short = (short or 0) + _trials_to_show(c, need)
                continue
            lifted = np.where(ok, lifted, -1.0)
            k = int(np.argmax(lifted))
            cand = (-(need - worst), int(idx[k]))
            if best is None or cand < best:
                best = cand
        return (None, short) if best is None else (best[1], None)

    def _probe_need(self, data: SearchData, post: ChangePosterior, st: Step,
                    gaps: list[tuple[float, tuple[int, int]]] | None = None) -> float | None:
        """The effective trial count the weakest split of a side must reach for a second step to show at
        ``settings.second_change_z`` standard errors (more where a residual gap or a suspected change says look
        harder), or None when the check is off."""
        z = self.settings.second_change_z
        if z <= 0:
            return None
        floor, step = self._second_change_sizes(post, st)
        gap, _ = self._residual_gap(data, post, st, gaps)
        if self.tuning.residual_gap_z > 0 and gap >= self.tuning.residual_gap_z:
            # an endpoint differs from the commit next to the change on its side: look harder, same size
            z = max(z, self.tuning.residual_probe_z)
        if self.tuning.suspected_change_z > 0 and post.p_two >= self.tuning.second_change_doubt:
            # a second change is suspected: look for one as small as the floor, with more power
            z, step = max(z, self.tuning.suspected_change_z), floor
        return (z * post.sigma_top / step) ** 2

    def _second_change_trials(self, data: SearchData, post: ChangePosterior, st: Step,
                              gaps: list[tuple[float, tuple[int, int]]] | None = None) -> int | None:
        """About how many more trials, on both sides of the change, before a second step there would show (for
        the status line; the probe spends them one decision at a time)."""
        need = self._probe_need(data, post, st, gaps)
        if need is None:
            return None
        cnt = np.array([data.count(i) for i in range(self.n)], dtype=float)
        total = 0
        for lo, hi in ((0, st.at), (st.at, self.n)):
            idx = [j for j in range(lo, hi) if j not in data.untestable]
            if len(idx) >= 2:
                total += _trials_to_show(cnt[idx].copy(), need)
        return total

    def _second_change_sizes(self, post: ChangePosterior, st: Step) -> tuple[float, float]:
        """(floor, step), log: the smallest second step worth ruling out — max(tuning.second_change_pct,
        tuning.second_change_sigmas·σ) — and the one the probe looks for beside the change at ``st``, at least
        tuning.second_change_share of it."""
        floor = max(log_of_pct(self.tuning.second_change_pct), self.tuning.second_change_sigmas * post.sigma_top)
        return floor, max(floor, self.tuning.second_change_share * abs(st.step))

    def _gap_pairs(self, data: SearchData, post: ChangePosterior, st: Step,
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

    def _gap_recheck_blocked(self, data: SearchData, post: ChangePosterior, st: Step,
                             gaps: list[tuple[float, tuple[int, int]]] | None = None) -> tuple[float, int] | None:
        """(gap in se, trials it would take) of a residual gap ``_gap_recheck`` would measure again but for the budget:
        the re-measure is owed before one change is accepted, so the budget's end leaves it open; None otherwise."""
        for gap, pair, few in self._gap_pairs(data, post, st, gaps):
            if not self._budget_left(data, few):
                return gap, sum(max(0, self.tuning.residual_confirm_max - data.count(i)) for i in pair)
        return None

    def _gap_recheck(self, data: SearchData, post: ChangePosterior, st: Step,
                     gaps: list[tuple[float, tuple[int, int]]] | None = None) -> tuple[int, float] | None:
        """(commit, gap in se) to measure again before one change is accepted, or None: the first pair of
        ``_gap_pairs`` whose commit with fewer trials the budget still allows."""
        for gap, _pair, few in self._gap_pairs(data, post, st, gaps):
            if self._budget_left(data, few):
                return few, gap
        return None

    @classmethod
    def _residual_gap(cls, data: SearchData, post: ChangePosterior, st: Step,
                      gaps: list[tuple[float, tuple[int, int]]] | None = None) -> tuple[float, tuple[int, int]]:
        """The larger of the two sides' gaps (``_side_gaps``, or ``gaps`` when the caller has them) and its pair;
        0 and the good side's pair when neither side has one."""
        return max(cls._side_gaps(data, post, st) if gaps is None else gaps, default=(0.0, (0, st.parent)))

    @staticmethod
    def _side_gaps(data: SearchData, post: ChangePosterior, st: Step) -> list[tuple[float, tuple[int, int]]]:
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

    # ----------------------------------------------------------------------------------------
    # what the checks measure: trials a side, the pair's own contrast, the spread of repeats, the layouts

    def _trials_at_change(self, post: ChangePosterior, st: Step) -> int:
        """Trials each of a named change's commit and parent carry: tuning.min_trials_at_change, more when the
        step is small against the noise (each trial then tells little, and a few sessions that happened to
        fall on one side of the noise can carry a posterior), at most tuning.max_trials_at_change."""
        ratio = self.tuning.change_trials_z * post.sigma_top / max(abs(st.step), 1e-9)
        return int(min(self.tuning.max_trials_at_change, max(self.tuning.min_trials_at_change, math.ceil(ratio * ratio))))

    @staticmethod
    def _step_z(data: SearchData, st: Step, sigma: float) -> float:
        """The step between the commit's own trials and its parent's in standard errors at ``sigma`` per
        trial, signed along the step (0 when either has no trial)."""
        vc, vp = data.values[st.at], data.values[st.parent]
        if not vc or not vp:
            return 0.0
        z = _z_between(vc, vp, sigma)
        return z if st.step > 0 else -z

    @staticmethod
    def _pure_error(data: SearchData) -> tuple[float, float]:
        """Pooled sd of trials of one build around their own commit's mean (log), and its dof: the noise
        as repeated trials show it, whatever the change hypothesis."""
        ss, dof = pooled_squares(data.values)
        return (math.sqrt(ss / dof) if dof else 0.0), float(dof)

    def _pure_alpha(self, data: SearchData, st: Step) -> float:
        """tuning.pure_alpha spent over the looks at this pair: look k = trials of the pair beyond 2·tuning.min_trials_at_change, plus
        one, is at tuning.pure_alpha / k up to tuning.pure_look_knee and tuning.pure_alpha · knee / k² after it (at tuning.pure_look_power 1)."""
        k = max(1, data.count(st.at) + data.count(st.parent) - 2 * self.tuning.min_trials_at_change + 1)
        return self.tuning.pure_alpha / (k * max(1.0, k / self.tuning.pure_look_knee)) ** self.tuning.pure_look_power

    def _layout_check(self, data: SearchData, st: Step) -> tuple[bool, int | None]:
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


__all__ = ["Gate", "LocatedChecks", "Located"]


def _trials_to_show(c: np.ndarray, need: float) -> int:
    """Trials added one at a time where they lift the weakest split most, until it reaches ``need`` (at most
    PRICE_LIMIT): what a side of a change still needs for a second step on it to show. ``c`` is changed."""
    k = 0
    while _weakest_split(c) < need and k < PRICE_LIMIT:
        c[int(np.argmax(_weakest_split_lifted(c)))] += 1.0
        k += 1
    return k
