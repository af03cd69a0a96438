"""What the checks on a located change measure, and what settling an open one costs.

Two services the gates (gates.py) share:

- ``PairConfirm``: a located change's pair (its commit and its parent) against an open check (``OpenCheck``: the
  step's direction, the trials each side carries, the pair's own contrast beyond the spread of repeats of one build
  at a t level spent over the looks). ``confirm`` asks for a trial of the pair only while
  one within the budget can still settle the check, even on a hopeful reading (``projected``, ``settles_in``);
  else the search ends `inconclusive` with the best answer and the price of settling it.
- ``SecondChange``: before one change is accepted, each side of it measured densely enough that a second level
  step would show (``probe_for``: the weakest split of a side's trials), and a residual gap between an endpoint and
  the commit beside the change measured again (``gap_recheck``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .change_posterior import ChangePosterior
from .effects import Step
from .endings import PRICE_LIMIT, Endings
from .kernel import pure_error
from .observations import Done, Measure, SearchData
from .stats import chi2_quantile, log_of_pct, normal_quantile, pct, t_cdf, t_quantile
from .view import Range
from ..model import Comparison, Reason, Verdict


@dataclass(frozen=True)
class OpenCheck:
    """One check a located change has not passed yet, as it stands now."""

    kind: str  # direction | trials | pure
    what: Reason  # what must hold
    z: float | None  # where it stands (standard errors); None for a count of trials
    need: float  # its threshold: the z it must reach, or the trials each side must carry


@dataclass(frozen=True)
class Located:
    """What a stop while confirming carries: the best answer, its probability, the endpoints and their bound."""

    key: tuple[int, ...]
    p: float
    ends: Comparison
    ruled_out: float | None


@dataclass(frozen=True)
class PairConfirm:
    """The checks on a located change's pair and the trials that settle them (module docstring)."""

    range: Range
    endings: Endings
    confidence: float  # stats.confidence: the direction's t level
    sigma_prior: float  # the stated σ (the noise model's), standing in before any build is repeated
    pure_alpha: float
    pure_look_knee: float
    pure_look_power: float
    min_trials_at_change: int
    futility_sigma_q: float

    # ---------------------------------------------------------------------------------------------------------
    # the open checks

    def direction(self, st: Step) -> OpenCheck | None:
        """Open while the step's direction is not certain at ``confidence`` (its t against the quantile)."""
        z = abs(st.step) / st.se if st.se > 0 else math.inf
        need = t_quantile(self.confidence, st.dof)
        if st.se > 0 and t_cdf(-z, st.dof) > 1.0 - self.confidence:
            return OpenCheck("direction", Reason("direction"), z, need)
        return None

    def pure(self, data: SearchData, st: Step, pure: tuple[float, float]) -> OpenCheck | None:
        """Open while the pair's own contrast is under the one-sided t quantile at this look's share of
        ``pure_alpha``, with σ the spread of repeats of one build (``kernel.pure_error``)."""
        if self.pure_alpha <= 0:
            return None
        sd_own, dof_own = pure
        if dof_own < 1:
            return OpenCheck("pure", Reason("pure"), 0.0, math.inf)
        z = step_z(data, st, sd_own)
        need = t_quantile(1.0 - self.pure_level(data, st), dof_own)
        return OpenCheck("pure", Reason("pure"), z, need) if z < need else None

    def pure_level(self, data: SearchData, st: Step) -> float:
        """``pure_alpha`` spent over the looks at this pair: look k = trials of the pair beyond
        2·min_trials_at_change, plus one, is at pure_alpha / k up to ``pure_look_knee`` and pure_alpha · knee / k²
        after it (at ``pure_look_power`` 1)."""
        k = max(1, data.count(st.at) + data.count(st.parent) - 2 * self.min_trials_at_change + 1)
        return self.pure_alpha / (k * max(1.0, k / self.pure_look_knee)) ** self.pure_look_power

    @staticmethod
    def where(check: OpenCheck, data: SearchData, st: Step) -> Reason:
        """Where an open check stands: its z against the one needed, or the trials each side carries."""
        if check.kind == "trials":
            return Reason("counts", {"parent": data.count(st.parent), "commit": data.count(st.at), "need": check.need})
        if not math.isfinite(check.need):
            return Reason("no_repeat")
        return Reason("z", {"z": check.z, "need": check.need})

    # ---------------------------------------------------------------------------------------------------------
    # what settling one costs

    @staticmethod
    def alloc(cp: int, cc: int, m: int, room_p: int | None = None, room_c: int | None = None) -> tuple[int, int]:
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

    def projected(self, check: OpenCheck, data: SearchData, post: ChangePosterior, st: Step,
                  pure: tuple[float, float], xp: int, xc: int, hopeful: bool) -> tuple[float, float]:
        """(z, threshold) of a z check after ``xp`` more trials of the parent and ``xc`` of the commit: the means and
        the noise as measured, or, ``hopeful``, as a lucky run of those trials would leave them — their means the
        upper ``futility_sigma_q`` point of where the predictive puts them (the trials measured so far stay what
        they are: only the new ones can be lucky), and each new trial as quiet as the low end of the noise's
        estimate. A check that not even that reaches within the budget is one the budget cannot settle."""
        m = xp + xc
        luck = normal_quantile(1.0 - self.futility_sigma_q) if hopeful else 0.0

        def shift(sigma: float, nc: float, npar: float) -> float:
            # sd of how far xc new trials of the commit and xp of the parent move the difference of the means
            return sigma * math.sqrt(xc / (nc * (nc + xc)) + xp / (npar * (npar + xp)))

        def noise_after(sigma: float, dof: float) -> float:
            if not hopeful or dof < 1 or not m:
                return sigma
            low = sigma * math.sqrt(dof / chi2_quantile(1.0 - self.futility_sigma_q, dof))
            return math.sqrt((dof * sigma * sigma + m * low * low) / (dof + m))

        if check.kind == "direction":
            nb, na = max(st.n_before, 1), max(st.n_after, 1)
            sigma = st.se / math.sqrt(1.0 / nb + 1.0 / na)
            d = abs(st.step) + luck * shift(sigma, na, nb)
            se = sigma * math.sqrt(1.0 / (nb + xp) + 1.0 / (na + xc))
            return d / max(se, 1e-12), t_quantile(self.confidence, st.dof + m)
        vc, vp = data.values[st.at], data.values[st.parent]
        if not vc or not vp:
            return 0.0, math.inf
        sigma, dof = pure
        if dof < 1:  # no build repeated yet: the first repeats will start the spread; the stated σ stands in
            sigma = max(sigma, self.sigma_prior)
        # trials in flight count as new ones: they are not in the means yet
        xc += data.count(st.at) - len(vc)
        xp += data.count(st.parent) - len(vp)
        m = xp + xc
        d = float(np.mean(vc) - np.mean(vp)) * (1.0 if st.step > 0 else -1.0) + luck * shift(sigma, len(vc), len(vp))
        z = d / max(noise_after(sigma, dof) * math.sqrt(1.0 / (len(vc) + xc) + 1.0 / (len(vp) + xp)), 1e-12)
        dof_m = dof + m
        if dof_m < 1:
            return z, math.inf
        k = max(1, len(vc) + len(vp) + m - 2 * self.min_trials_at_change + 1)
        alpha = self.pure_alpha / (k * max(1.0, k / self.pure_look_knee)) ** self.pure_look_power
        return z, t_quantile(1.0 - alpha, dof_m)

    def settles_in(self, check: OpenCheck, data: SearchData, post: ChangePosterior, st: Step,
                   pure: tuple[float, float], limit: int, room_p: int | None = None, room_c: int | None = None,
                   hopeful: bool = False) -> int | None:
        """The fewest further trials of the pair (at most ``limit``, spent as ``alloc`` spends them) after which the
        check would pass; None when no count up to ``limit`` does."""
        cp, cc = data.count(st.parent), data.count(st.at)
        if check.kind == "trials":
            need = int(check.need)
            sp, sc = max(0, need - cp), max(0, need - cc)
            if (room_p is not None and sp > room_p) or (room_c is not None and sc > room_c) or sp + sc > limit:
                return None
            return sp + sc
        top = limit if room_p is None or room_c is None else min(limit, room_p + room_c)
        m = 1
        while m <= top:
            xp, xc = self.alloc(cp, cc, m, room_p, room_c)
            z, need = self.projected(check, data, post, st, pure, xp, xc, hopeful)
            if z >= need:
                return m
            m += 1 if m < 200 else max(1, m // 50)
        return None

    # ---------------------------------------------------------------------------------------------------------
    # the answers: a trial of the pair, or the end

    def confirm(self, data: SearchData, post: ChangePosterior, st: Step, check: OpenCheck, ctx: Located) -> Measure | Done:
        """A trial of the pair for an open check — only while one within the budget can still settle it, even on a
        hopeful reading; else `inconclusive` with the best answer and the price of settling it (the budget spent:
        ``Endings.exhausted``; budget left that cannot do it: ``futile``)."""
        r = self.range
        pure = pure_error(data)
        left = r.left(data)
        room_p = max(0, min(left, r.cap - data.count(st.parent)))
        room_c = max(0, min(left, r.cap - data.count(st.at)))
        where = self.where(check, data, st)
        price = self.settles_in(check, data, post, st, pure, PRICE_LIMIT)
        commit, step_pct = r.commits[st.at], pct(st.step)
        if left <= 0 or room_p + room_c == 0:
            return self.endings.exhausted(
                data, post, Reason("check_open", {"commit": commit, "step_pct": step_pct, "what": check.what,
                                                  "where": where}),
                top_key=ctx.key, top_p=ctx.p, ends=ctx.ends, ruled_out=ctx.ruled_out, price=price, price_of="pair")
        if self.settles_in(check, data, post, st, pure, left, room_p, room_c, hopeful=True) is None:
            return self.futile(data, post, ctx, check.what, where, left, price, step_pct,
                               hopeful=check.kind != "trials")
        side = st.parent if data.count(st.parent) <= data.count(st.at) else st.at
        if (room_p if side == st.parent else room_c) == 0:
            side = st.at if side == st.parent else st.parent
        return Measure(
            r.commits[side],
            Reason("confirm.pair", {"commit": commit, "step_pct": step_pct, "what": check.what, "where": where,
                                    "price": price, "left": left, "counting": check.kind == "trials"}),
            "confirming",
            p_none=post.p_none,
            needs=(price if check.kind != "trials" else
                   sum(max(0, math.ceil(check.need) - data.count(b)) for b in (st.parent, st.at)) or None),
        )

    def futile(self, data: SearchData, post: ChangePosterior, ctx: Located, what: Reason, where: Reason, left: int,
               price: int | None, step_pct: float | None = None, hopeful: bool = True) -> Done:
        """`inconclusive` now: no trial within the budget can carry this check (``what``, standing at ``where``)
        across its threshold — even on a hopeful reading, for a z check — so spending the rest would not change the
        verdict. ``price``: the trials it would take at the difference and noise measured so far."""
        r = self.range
        return self.endings.done(
            Verdict.INCONCLUSIVE, data, Reason("futile.confirm", {
                "best": r.sets(ctx.key, data), "step_pct": step_pct, "top_p": ctx.p, "what": what, "where": where,
                "left": left, "max_total": r.max_total, "max_per_commit": r.max_per_commit, "hopeful": hopeful,
                "luck": round(1 / self.futility_sigma_q), "price": price, "price_limit": PRICE_LIMIT}),
            post=post, endpoint_cmp=ctx.ends, ruled_out=ctx.ruled_out, top_key=ctx.key, probability=ctx.p,
            best=ctx.key, more_trials=price,
        )

    def confirm_end(self, data: SearchData, post: ChangePosterior, end: int, ctx: Located, n_each: int) -> Measure | Done:
        """A trial of an endpoint that carries fewer than ``n_each`` (a small step's verdict rests on both), or
        `inconclusive` with the price when the budget cannot give both endpoints theirs."""
        r = self.range
        short = sum(max(0, n_each - data.count(e)) for e in (0, r.n - 1))
        left = r.left(data)
        where = Reason("end_count", {"side": "good" if end == 0 else "bad", "count": data.count(end), "n": n_each})
        what = Reason("ends_before_naming", {"n": n_each})
        fits = all(data.count(e) + max(0, n_each - data.count(e)) <= r.cap for e in (0, r.n - 1))
        if r.budget_left(data, end) and short <= left and fits:
            return Measure(r.commits[end],
                           Reason("confirm.endpoint", {"best": r.named(ctx.key, data), "where": where, "n": n_each}),
                           "confirming", p_none=post.p_none, needs=short)
        if not r.budget_left(data, end):
            return self.endings.exhausted(data, post, Reason("check_open", {"commit": None, "what": what, "where": where}),
                                          top_key=ctx.key, top_p=ctx.p, ends=ctx.ends, ruled_out=ctx.ruled_out,
                                          price=short, price_of="ends")
        return self.futile(data, post, ctx, what, where, left, short, hopeful=False)


@dataclass(frozen=True)
class SecondChange:
    """Whether a second level step beside a single located change would show yet (module docstring)."""

    range: Range
    z: float  # stats.second_change_z (0: the check is off)
    floor_pct: float  # tuning.second_change_pct
    floor_sigmas: float  # tuning.second_change_sigmas
    share: float  # tuning.second_change_share
    residual_gap_z: float
    residual_probe_z: float
    suspected_change_z: float
    doubt: float  # tuning.second_change_doubt
    confirm_z: float  # tuning.residual_confirm_z
    confirm_max: int  # tuning.residual_confirm_max
    confirm_hidden: int  # tuning.residual_confirm_hidden

    def probe_for(self, data: SearchData, post: ChangePosterior, st: Step,
                  gaps: list[tuple[float, tuple[int, int]]] | None = None) -> tuple[int | None, int | None]:
        """(a commit to measure so that a second step on either side of the change could show, or None; the trials
        a side still needs when the budget has none of its commits left, or None).

        For every split point inside a side segment, the trials on its two sides give an effective count
        n_a·n_b/(n_a + n_b); the weakest split must reach the count that shows the step at ``z`` standard errors
        under the current noise."""
        need = self.need(post, st, gaps)
        if need is None:
            return None, None
        n = self.range.n
        cnt = np.array([data.count(i) for i in range(n)], dtype=float)
        best: tuple[float, int] | None = None
        short: int | None = None
        for lo, hi in ((0, st.at), (st.at, n)):
            idx = np.array([j for j in range(lo, hi) if j not in data.untestable])
            if len(idx) < 2:
                continue
            c = cnt[idx]
            worst = weakest_split(c)
            if worst >= need:
                continue
            lifted = weakest_split_lifted(c)
            ok = np.array([self.range.budget_left(data, int(j)) for j in idx])
            if not ok.any():
                # no commit of this side has budget left: the check stays open (what it would take, as the probe
                # would spend it, without the budget)
                short = (short or 0) + trials_to_show(c, need)
                continue
            lifted = np.where(ok, lifted, -1.0)
            k = int(np.argmax(lifted))
            cand = (-(need - worst), int(idx[k]))
            if best is None or cand < best:
                best = cand
        return (None, short) if best is None else (best[1], None)

    def need(self, post: ChangePosterior, st: Step, gaps: list[tuple[float, tuple[int, int]]]) -> float | None:
        """The effective trial count the weakest split of a side must reach for a second step to show at ``z``
        standard errors (more where a residual gap or a suspected change says look harder), or None when the
        check is off."""
        z = self.z
        if z <= 0:
            return None
        floor, step = self.sizes(post, st)
        gap, _ = residual_gap(gaps, st)
        if self.residual_gap_z > 0 and gap >= self.residual_gap_z:
            # an endpoint differs from the commit next to the change on its side: look harder, same size
            z = max(z, self.residual_probe_z)
        if self.suspected_change_z > 0 and post.p_two >= self.doubt:
            # a second change is suspected: look for one as small as the floor, with more power
            z, step = max(z, self.suspected_change_z), floor
        return (z * post.sigma_top / step) ** 2

    def trials(self, data: SearchData, post: ChangePosterior, st: Step,
               gaps: list[tuple[float, tuple[int, int]]]) -> int | None:
        """About how many more trials, on both sides of the change, before a second step there would show (for the
        status line; the probe spends them one decision at a time)."""
        need = self.need(post, st, gaps)
        if need is None:
            return None
        cnt = np.array([data.count(i) for i in range(self.range.n)], dtype=float)
        total = 0
        for lo, hi in ((0, st.at), (st.at, self.range.n)):
            idx = [j for j in range(lo, hi) if j not in data.untestable]
            if len(idx) >= 2:
                total += trials_to_show(cnt[idx].copy(), need)
        return total

    def sizes(self, post: ChangePosterior, st: Step) -> tuple[float, float]:
        """(floor, step), log: the smallest second step worth ruling out — max(floor_pct, floor_sigmas·σ) — and the
        one the probe looks for beside the change at ``st``, at least ``share`` of it."""
        floor = max(log_of_pct(self.floor_pct), self.floor_sigmas * post.sigma_top)
        return floor, max(floor, self.share * abs(st.step))

    def gap_pairs(self, data: SearchData, gaps: list[tuple[float, tuple[int, int]]]):
        """(gap in se, its pair, the pair's commit with fewer trials) of each residual gap (``side_gaps``, the larger
        first) the re-measure rule looks at: between ``confirm_z`` and ``residual_gap_z``, at least
        ``confirm_hidden`` unmeasured commits between the pair, and fewer than ``confirm_max`` trials on the commit
        with fewer."""
        if self.z <= 0 or self.confirm_z <= 0:
            return
        for gap, pair in sorted(gaps, reverse=True):
            if not self.confirm_z <= gap < self.residual_gap_z:
                continue
            hidden = sum(1 for j in range(pair[0] + 1, pair[1]) if not data.count(j) and j not in data.untestable)
            few = min(pair, key=lambda i: (data.count(i), i))
            if hidden >= self.confirm_hidden and data.count(few) < self.confirm_max:
                yield gap, pair, few

    def gap_recheck(self, data: SearchData, gaps: list[tuple[float, tuple[int, int]]]) -> tuple[int, float] | None:
        """(commit, gap in se) to measure again before one change is accepted, or None: the first pair of
        ``gap_pairs`` whose commit with fewer trials the budget still allows."""
        for gap, _pair, few in self.gap_pairs(data, gaps):
            if self.range.budget_left(data, few):
                return few, gap
        return None

    def gap_recheck_blocked(self, data: SearchData, gaps: list[tuple[float, tuple[int, int]]]) -> tuple[float, int] | None:
        """(gap in se, trials it would take) of a residual gap ``gap_recheck`` would measure again but for the
        budget: the re-measure is owed before one change is accepted, so the budget's end leaves it open."""
        for gap, pair, few in self.gap_pairs(data, gaps):
            if not self.range.budget_left(data, few):
                return gap, sum(max(0, self.confirm_max - data.count(i)) for i in pair)
        return None


def side_gaps(data: SearchData, post: ChangePosterior, st: Step) -> list[tuple[float, tuple[int, int]]]:
    """Per side of the located change, |difference| in standard errors between its endpoint and the commit beside
    the change on that side (good endpoint vs the parent, culprit vs the bad endpoint), with that pair; a side that
    is one commit, or whose pair lacks a trial, has none."""
    out = []
    for a, b in ((0, st.parent), (st.at, len(data.values) - 1)):
        va, vb = data.values[a], data.values[b]
        if a == b or not va or not vb:
            continue
        out.append((abs(z_between(va, vb, post.sigma_top)), (a, b)))
    return out


def residual_gap(gaps: list[tuple[float, tuple[int, int]]], st: Step) -> tuple[float, tuple[int, int]]:
    """The larger of the two sides' gaps and its pair; 0 and the good side's pair when neither side has one."""
    return max(gaps, default=(0.0, (0, st.parent)))


def trials_at_change(post: ChangePosterior, st: Step, change_trials_z: float, least: int, most: int) -> int:
    """Trials each of a named change's commit and parent carry: ``least``, more when the step is small against the
    noise (each trial then tells little, and a few sessions that happened to fall on one side of the noise can carry
    a posterior), at most ``most``."""
    ratio = change_trials_z * post.sigma_top / max(abs(st.step), 1e-9)
    return int(min(most, max(least, math.ceil(ratio * ratio))))


def step_z(data: SearchData, st: Step, sigma: float) -> float:
    """The step between the commit's own trials and its parent's in standard errors at ``sigma`` per trial, signed
    along the step (0 when either has no trial)."""
    vc, vp = data.values[st.at], data.values[st.parent]
    if not vc or not vp:
        return 0.0
    z = z_between(vc, vp, sigma)
    return z if st.step > 0 else -z


def z_between(a: Sequence[float], b: Sequence[float], sigma: float) -> float:
    """mean(a) − mean(b) in standard errors, at ``sigma`` per trial."""
    se = sigma * math.sqrt(1.0 / len(a) + 1.0 / len(b))
    return float(np.mean(a) - np.mean(b)) / max(se, 1e-12)


def weakest_split(c: np.ndarray) -> float:
    """Smallest effective count n_a·n_b/(n_a + n_b) over the split points of a run of commits."""
    left = np.cumsum(c)[:-1]
    right = c.sum() - left
    tot = np.maximum(left + right, 1e-9)
    return float((left * right / tot).min())


def weakest_split_lifted(c: np.ndarray) -> np.ndarray:
    """``weakest_split(c + e_k)`` for every k at once, in O(len(c)) (the same numbers, bit for bit).

    One more trial at k adds 1 to the left count of every split at or after k and to the right count of every
    split before it, so the weakest split is the smaller of a prefix minimum and a suffix minimum."""
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


def trials_to_show(c: np.ndarray, need: float) -> int:
    """Trials added one at a time where they lift the weakest split most, until it reaches ``need`` (at most
    PRICE_LIMIT): what a side of a change still needs for a second step on it to show. ``c`` is changed."""
    k = 0
    while weakest_split(c) < need and k < PRICE_LIMIT:
        c[int(np.argmax(weakest_split_lifted(c)))] += 1.0
        k += 1
    return k


__all__ = ["Located", "OpenCheck", "PairConfirm", "SecondChange", "side_gaps", "trials_at_change"]
