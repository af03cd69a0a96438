"""A Bayesian bisection told "one change or two": the floor any second-change guard can reach (issue #35).

``bayes_reference`` is told that exactly one change exists, so it never pays to rule out a second one and never
finds one (S5: both changes named 0% of the time). perfbisect pays for both — its guard — and the question the
rule-by-rule pricing left open is whether the guard's price is the engine's or the problem's. This reference
answers it: an honest Bayesian search over one or two changes, whose cost on S2 against its S5 hit rate, as the
prior weight of two changes is varied, is the frontier a guard can reach.

Model. Commits 0..n-1. Hypothesis (k1, k2), 1 ≤ k1 < k2 ≤ n: the level steps at k1 and again at k2 (k2 = n: one
change, at k1). Prior: P(two changes) = ``q``, uniform over positions within each count. Levels: the first
segment's flat; each step δ ~ N(0, g·σ²) (a proper, scale-free prior on the steps: Zellner's g; without one the
two counts' evidence cannot be compared). σ² known (``sigma``) or scaled-inverse-χ²(ν0, s0²) as in
``bayes_reference``. With the design x_j = (1, [j ≥ k1], [j ≥ k2]) for a trial of commit j, the levels integrate
out in closed form,

    A = XᵀX + diag(0, 1/g, 1/g),  S = yᵀy − (Xᵀy)ᵀ A⁻¹ (Xᵀy),
    log p(D | k1, k2) = −½ log|A| − S / (2σ²)                          (σ known)
                      = −½ log|A| − (a0 + (N − 1)/2) · log(b0 + S/2)    (σ learned)

up to a constant common to every hypothesis (the g·σ² scaling makes σ²'s power the same for one and two
changes). k2 = n leaves δ2 with no trial: its prior integrates to one and the value is the one-change model's.

The next commit is the one whose next trial has the largest expected information gain about (k1, k2) (the
predictive under a hypothesis: normal, or Student-t with σ learned, with mean x_jᵀA⁻¹Xᵀy and variance factor
1 + x_jᵀA⁻¹x_j); the search stops when one answer — the set of first-bad testable commits, one or two — holds
≥ ``confidence`` of the posterior, or at ``budget`` trials with nothing named. Like ``bayes_reference``: no
confirmation step, no drift, outlier or layout model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import special, stats

from bayes_reference import CommitSums, _short_of_floor, _untestable_run  # per-commit sums; the floor; the untestable
# commits before an answer

# Points of the common grid the information gain is integrated on, per smallest component sd (2 per sd and ±6 sd
# chose the same 160 commits along 4 S2 searches as 4 per sd and ±10 sd).
GRID_PER_SD = 2.5
# ...spanning every component's mean ± this many of its sd
GRID_SD = 7.0
GRID_MAX = 600
# The lightest hypotheses holding together at most this share of the posterior are left out of the information
# gain and the answers' masses (not the posterior): a mass this small moves neither by more than it.
PRUNE = 1e-7
# P(both steps matter) is integrated over δ1 by Gauss-Legendre on these nodes, per side of ±m
GL_NODES, GL_WEIGHTS = np.polynomial.legendre.leggauss(32)


def _outside(mean, sd, df, m):
    """P(|δ| ≥ m) for δ ~ t_df(mean, sd) (normal: df None)."""
    cdf = special.ndtr if df is None else (lambda x: special.stdtr(df, x))
    return cdf((mean - m) / sd) + cdf((-m - mean) / sd)


@dataclass
class TwoChangeBisection(CommitSums):
    """The posterior over (k1, k2) from the trials so far, and the commit to measure next."""

    q: float = 0.5  # prior probability of two changes (given that something changed)
    # prior probability that nothing changed (perfbisect's no_change_prior is 0.5); 0: not a hypothesis — the range
    # is known to hold one change or two
    p_none: float = 0.0
    g: float = 10.0  # the steps' prior variance, in units of σ²
    sigma: float | None = None  # known σ; None: learned with the prior below
    min_step: float = math.log1p(0.03)  # a step smaller than this does not matter (stats.min_effect_pct)
    # a second step is ruled out only from this size (log); between min_step and it, naming two changes and naming
    # one are both right (``best``). None: min_step. perfbisect's question: its guard rules out a second step of
    # max(second_change_pct, half the located step, 1.5σ), not min_step
    min_second: float | None = None
    # the second step's floor sized per hypothesis from what it measured, as perfbisect must size it: (fixed part
    # (log), share of the hypothesis's larger step, multiple of its σ) — max of the three, each hypothesis's posterior
    # means and σ plugged in. Set, it replaces ``min_second`` (None: the floor is ``min_second``, told)
    own_floor: tuple[float, float, float] | None = None
    nu0: float = 1.0
    s0: float = math.log1p(0.05)
    untestable: set[int] = field(default_factory=set)
    k1: np.ndarray = field(init=False)
    k2: np.ndarray = field(init=False)
    log_prior: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        if self.n < 3 and self.q > 0:
            raise ValueError("two changes need at least 3 commits")
        super().__post_init__()
        pairs = [(a, b) for a in range(1, self.n) for b in range(a + 1, self.n + 1)]
        if self.p_none > 0:
            pairs.append((self.n, self.n))  # no change: one level, both steps unseen (their priors integrate out)
        self.k1 = np.array([p[0] for p in pairs])
        self.k2 = np.array([p[1] for p in pairs])
        none = self.k1 == self.n
        one = (self.k2 == self.n) & ~none
        n_one, n_two = int(one.sum()), int((~one & ~none).sum())
        with np.errstate(divide="ignore"):
            self.log_prior = np.where(one, math.log1p(-self.q) - math.log(n_one) if self.q < 1 else -np.inf,
                                      (math.log(self.q) if self.q > 0 else -np.inf) - math.log(max(n_two, 1)))
            if self.p_none > 0:
                self.log_prior = np.where(none, math.log(self.p_none), self.log_prior + math.log1p(-self.p_none))

    # -- data --------------------------------------------------------------------------------
    def _fit(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per hypothesis: A⁻¹ (P, 3, 3), β̂ = A⁻¹Xᵀy (P, 3), log|A| (P,), S (P,)."""
        c = np.concatenate([[0.0], np.cumsum(self.cnt)])
        t = np.concatenate([[0.0], np.cumsum(self.s1)])
        big_n, total, sq = c[-1], t[-1], self.s2.sum()
        n12, n2 = big_n - c[self.k1], big_n - c[self.k2]  # trials at or after k1, at or after k2
        t12, t2 = total - t[self.k1], total - t[self.k2]
        a = np.empty((len(self.k1), 3, 3))
        a[:, 0, 0] = big_n
        a[:, 0, 1] = a[:, 1, 0] = a[:, 1, 1] = n12
        a[:, 0, 2] = a[:, 2, 0] = a[:, 1, 2] = a[:, 2, 1] = a[:, 2, 2] = n2
        a[:, 1, 1] += 1.0 / self.g
        a[:, 2, 2] += 1.0 / self.g
        b = np.stack([np.full_like(n12, total), t12, t2], axis=1)
        a_inv = np.linalg.inv(a)
        beta = np.einsum("pij,pj->pi", a_inv, b)
        logdet = np.linalg.slogdet(a)[1]
        s = np.maximum(sq - np.einsum("pi,pi->p", b, beta), 0.0)
        return a_inv, beta, logdet, s

    # -- posterior ---------------------------------------------------------------------------
    def log_likelihood(self, fit=None) -> np.ndarray:
        """log p(D | k1, k2) up to a constant common to every hypothesis."""
        _, _, logdet, s = self._fit() if fit is None else fit
        if self.sigma is not None:
            return -0.5 * logdet - s / (2 * self.sigma ** 2)
        a0, b0 = self.nu0 / 2, self.nu0 * self.s0 ** 2 / 2
        return -0.5 * logdet - (a0 + (self.trials - 1) / 2) * np.log(b0 + s / 2)

    def posterior(self, fit=None) -> np.ndarray:
        lp = self.log_likelihood(fit) + self.log_prior
        return np.exp(lp - special.logsumexp(lp))

    def _rep(self, k: np.ndarray) -> np.ndarray:
        """The answer commit of a change at k: the first testable commit at or after it (n: no change)."""
        rep = np.arange(self.n + 1)
        for j in range(self.n - 1, 0, -1):
            if j in self.untestable:
                rep[j] = rep[j + 1]
        return rep[k]

    def _scale2_dof(self, s: np.ndarray) -> tuple[np.ndarray, float | None]:
        """σ²'s stand-in per hypothesis (the posterior scale of the t; σ² itself when known) and the t's dof."""
        if self.sigma is not None:
            return np.full_like(s, self.sigma ** 2), None
        a_n = self.nu0 / 2 + (self.trials - 1) / 2
        return (self.nu0 * self.s0 ** 2 / 2 + s / 2) / a_n, 2 * a_n

    def step_probabilities(self, fit=None, keep: np.ndarray | None = None,
                           both_from: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per hypothesis, the posterior probability that the first step matters (|δ1| ≥ m), the second does, and
        both do — ``m`` the minimum effect (both ≥ ``both_from`` instead, when given). δ | (k1, k2), D is bivariate
        t (normal with σ known); P(both) is one integral over δ1 of the conditional t of δ2 (Gauss-Legendre). A
        one-change hypothesis has no second step, "no change" none."""
        fit = self._fit() if fit is None else fit
        keep = np.ones(len(self.k1), bool) if keep is None else keep
        a_inv, beta, _, s = (f[keep] for f in fit)
        scale2, dof = self._scale2_dof(s)
        m = self.min_step
        mu1, mu2 = beta[:, 1], beta[:, 2]
        c11, c12, c22 = a_inv[:, 1, 1] * scale2, a_inv[:, 1, 2] * scale2, a_inv[:, 2, 2] * scale2
        sd1, sd2 = np.sqrt(c11), np.sqrt(c22)
        p1, p2 = _outside(mu1, sd1, dof, m), _outside(mu2, sd2, dof, m)
        p1 = np.where(self.k1[keep] == self.n, 0.0, p1)  # "no change" (p_none): no step at all
        mb = np.broadcast_to(m if both_from is None else both_from, mu1.shape)  # a floor per hypothesis, or one
        # P(both) = ∫_{|δ1| ≥ mb} p(δ1) P(|δ2| ≥ mb | δ1) dδ1: Gauss-Legendre on each side's part of μ1 ± 8 sd
        lo, hi = mu1 - 8 * sd1, mu1 + 8 * sd1
        p12 = np.zeros_like(mu1)
        for a, b in ((np.maximum(lo, mb), np.maximum(hi, mb)), (np.minimum(lo, -mb), np.minimum(hi, -mb))):
            half = (b - a)[:, None] / 2
            d1 = (a + b)[:, None] / 2 + half * GL_NODES[None, :]  # (P, G)
            z1 = (d1 - mu1[:, None]) / sd1[:, None]
            dens = (stats.norm.pdf(z1) if dof is None else stats.t.pdf(z1, dof)) / sd1[:, None]
            cond_mean = mu2[:, None] + (c12 / c11)[:, None] * (d1 - mu1[:, None])
            cond_var = np.maximum(c22 - c12 * c12 / c11, 1e-300)[:, None]
            if dof is not None:
                cond_var = cond_var * (dof + z1 * z1) / (dof + 1)
            p2_given = _outside(cond_mean, np.sqrt(cond_var), None if dof is None else dof + 1, mb[:, None])
            p12 += half[:, 0] * ((dens * p2_given) @ GL_WEIGHTS)
        one = self.k2[keep] == self.n
        p2 = np.where(one, 0.0, p2)
        p12 = np.clip(np.where(one, 0.0, p12), 0.0, np.minimum(p1, p2))
        return p1, p2, p12

    def answers(self, post: np.ndarray, fit=None) -> dict[tuple[int, ...], float]:
        """Posterior mass per answer: the first-bad testable commits of the steps that matter — none, one or two
        (two steps no testable commit tells apart are one answer).

        With ``min_second`` (perfbisect's question: a second change must be ruled out only from that size), two
        steps that both matter but are not both ≥ ``min_second`` count for the hypothesis's larger step alone (by
        its posterior mean): the mass of "one change is an acceptable answer"."""
        return self._answer_masses(post, fit)[0]

    def _answer_masses(self, post: np.ndarray, fit=None) -> tuple[dict[tuple[int, ...], float], dict[tuple[int, ...], float]]:
        """(``answers``, and the same with every pair of steps that both matter counted as the pair). The two differ
        only with ``min_second``: a second step between ``min_step`` and ``min_second`` is then an indifference
        zone — naming it is right and leaving it unnamed is right."""
        keep = _kept(post)
        fit = self._fit() if fit is None else fit
        p1, p2, p12 = self.step_probabilities(fit, keep)
        floor = self._second_floor(fit, keep)
        if floor is None:
            pb = p12
        else:
            pb = np.minimum(self.step_probabilities(fit, keep, both_from=floor)[2], p12)
            _, beta, _, _ = (f[keep] for f in fit)
            first_larger = (np.abs(beta[:, 1]) >= np.abs(beta[:, 2])).tolist()
        r1, r2 = self._rep(self.k1[keep]), self._rep(self.k2[keep])
        post = post[keep]
        out: dict[tuple[int, ...], float] = {}
        pairs: dict[tuple[int, ...], float] = {}

        for i, (a, b, w, q1, q2, q12, qb) in enumerate(zip(r1.tolist(), r2.tolist(), post.tolist(), p1.tolist(),
                                                            p2.tolist(), p12.tolist(), pb.tolist())):
            both = (a,) if b == a else (a, b)
            # both matter but not both large enough: the larger one alone
            ma, mb = (q12 - qb, 0.0) if floor is not None and first_larger[i] else (0.0, q12 - qb)
            for key, mass in ((both, qb), ((a,), q1 - q12 + ma), ((b,), q2 - q12 + mb), ((), 1 - q1 - q2 + q12)):
                if mass > 0:
                    out[key] = out.get(key, 0.0) + w * mass
            if floor is not None and q12 > 0:
                pairs[both] = pairs.get(both, 0.0) + w * q12
        return out, (pairs if floor is not None else out)

    def _second_floor(self, fit, keep: np.ndarray) -> float | np.ndarray | None:
        """The size from which a second step must be ruled out: ``min_second`` (told), per hypothesis from
        ``own_floor``, or None (``min_step``: no indifference zone)."""
        if self.own_floor is None:
            return self.min_second
        fixed, share, sigmas = self.own_floor
        _, beta, _, s = (f[keep] for f in fit)
        larger = np.maximum(np.abs(beta[:, 1]), np.abs(beta[:, 2]))
        return np.maximum(np.maximum(fixed, share * larger), sigmas * np.sqrt(self._scale2_dof(s)[0]))

    def best(self, post: np.ndarray, fit=None) -> tuple[tuple[int, ...], float]:
        """The answer of the largest mass. With ``min_second``, the mass of an answer is how likely it is
        acceptable: a pair's, that both steps matter (≥ ``min_step``); one change's or none's, that no second step
        of ``min_second`` or more is left (``answers``)."""
        one, two = self._answer_masses(post, fit)
        if self.min_second is None and self.own_floor is None:
            return max(one.items(), key=lambda kv: kv[1])
        cands = [kv for kv in one.items() if len(kv[0]) < 2] + [kv for kv in two.items() if len(kv[0]) == 2]
        return max(cands, key=lambda kv: kv[1])

    def p_two(self, post: np.ndarray, fit=None) -> float:
        """The posterior probability of two steps that matter (both ≥ the second step's floor, when one is set)."""
        keep = _kept(post)
        fit = self._fit() if fit is None else fit
        _, _, p12 = self.step_probabilities(fit, keep, both_from=self._second_floor(fit, keep))
        return float(post[keep] @ p12)

    # -- the next trial ----------------------------------------------------------------------
    def information_gains(self, post: np.ndarray | None = None, fit=None) -> np.ndarray:
        """I((k1, k2); y) in nats of one more trial, for every commit j = 0..n-1."""
        fit = self._fit() if fit is None else fit
        w = self.posterior(fit) if post is None else post
        keep = _kept(w)
        w = w[keep] / w[keep].sum()
        a_inv, beta, _, s = (f[keep] for f in fit)
        k1, k2 = self.k1[keep], self.k2[keep]
        x = np.array([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])  # the three segments' designs
        mean = beta @ x.T  # (P, 3)
        factor = 1.0 + np.einsum("si,pij,sj->ps", x, a_inv, x)
        scale2, dof = self._scale2_dof(s)
        scale = np.sqrt(scale2[:, None] * factor)
        lo, hi = (mean - GRID_SD * scale).min(), (mean + GRID_SD * scale).max()
        step = scale.min() / GRID_PER_SD
        y = np.linspace(lo, hi, int(min(GRID_MAX, max(41, math.ceil((hi - lo) / step)))))
        z = (y[None, None, :] - mean[:, :, None]) / scale[:, :, None]
        if dof is None:
            core = -0.5 * z * z - 0.5 * math.log(2 * math.pi)
        else:
            core = (special.gammaln((dof + 1) / 2) - special.gammaln(dof / 2) - 0.5 * math.log(dof * math.pi)
                    - (dof + 1) / 2 * np.log1p(z * z / dof))
        logp = core - np.log(scale)[:, :, None]  # (P, 3, Y)
        dens = np.exp(logp)
        ent = -np.trapezoid(dens * logp, y, axis=2)  # (P, 3): each component's entropy on the same grid
        j = np.arange(self.n)
        seg = (j[:, None] >= k1[None, :]).astype(int) + (j[:, None] >= k2[None, :])  # (n, P)
        mix = np.zeros((self.n, len(y)))
        cond = np.zeros(self.n)
        for sgm in range(3):
            m = np.where(seg == sgm, w[None, :], 0.0)  # (n, P)
            mix += m @ dens[:, sgm, :]
            cond += m @ ent[:, sgm]
        with np.errstate(divide="ignore", invalid="ignore"):
            hmix = -np.trapezoid(np.where(mix > 0, mix * np.log(mix), 0.0), y, axis=1)
        return hmix - cond

    def next_commit(self, post: np.ndarray | None = None, fit=None) -> int:
        gains = self.information_gains(post, fit)
        gains[list(self.untestable)] = -np.inf
        return int(np.argmax(gains))


def run(t, sigma: float | None, q: float = 0.5, g: float = 10.0, confidence: float = 0.99, budget: int = 120,
        min_step_pct: float = 3.0, min_at_change: int = 0, p_none: float = 0.0,
        min_second_pct: float | None = None, own_floor: tuple[float, float, float] | None = None) -> dict:
    """One bisection of a simulated target (``strategies.Target``) told "one change or two".

    Sees what perfbisect sees: trial summaries as the runner returns them, no recorded state. Names the answer's
    commits (one or two, the first bad first) once it holds ``confidence``; nothing at ``budget``.
    ``min_at_change`` > 0 adds DESIGN.md's floor, as ``bayes_reference.run`` does: an answer is named only once each
    of its commits and the testable commit before each carry that many trials; until then the one with fewer is
    measured and the posterior looked at again. ``p_none`` > 0: "nothing changed" is a hypothesis of that prior, as it
    is perfbisect's (told nothing, a search must rule it out too). ``min_second_pct``: a second step is ruled out only
    from that size, two changes named once both matter (``TwoChangeBisection.min_second``); ``own_floor`` (percent,
    share, σ multiple): that floor sized per hypothesis from its own steps and σ instead (``own_floor``)."""
    n = t.scn.n
    b = TwoChangeBisection(n, q=q, g=g, sigma=sigma, min_step=math.log1p(min_step_pct / 100), p_none=p_none,
                           min_second=None if min_second_pct is None else math.log1p(min_second_pct / 100),
                           own_floor=None if own_floor is None else (math.log1p(own_floor[0] / 100), *own_floor[1:]))
    for j in (0, n - 1):
        b.add(j, t.measure(j).value)
    while True:
        fit = b._fit()
        post = b.posterior(fit)
        answer, p = b.best(post, fit)
        if p >= confidence and not answer:
            return {"changes": (), "set": (), "verdict": "same", "answer_probability": p,
                    "p_two": b.p_two(post, fit), "budget_exhausted": False}
        if p >= confidence:
            sets = [tuple(sorted(_untestable_run(b, k))) + (k,) for k in answer]
            shorts = [j for j in (_short_of_floor(b, cset, min_at_change) for cset in sets) if j is not None]
            if not shorts:
                return {"changes": answer, "set": sets[0], "verdict": "regressed", "answer_probability": p,
                        "p_two": b.p_two(post, fit), "budget_exhausted": False}
            if b.trials < budget:
                short = min(shorts, key=lambda j: b.cnt[j])
                b.add(short, t.measure(short).value)
                continue
            # the budget ended short of the floor: nothing is named (below), as with any check left open
        if b.trials >= budget:
            return {"changes": (), "set": (), "verdict": "inconclusive", "answer_probability": p,
                    "p_two": b.p_two(post, fit), "budget_exhausted": True}
        j = b.next_commit(post, fit)
        if not t.try_build(j):
            b.untestable.add(j)
            continue
        b.add(j, t.measure(j).value)


def _kept(post: np.ndarray) -> np.ndarray:
    """All hypotheses but the lightest, which hold together at most PRUNE of the posterior."""
    order = np.argsort(post)
    light = np.cumsum(post[order]) <= PRUNE
    keep = np.ones(len(post), bool)
    keep[order[light]] = False
    return keep
