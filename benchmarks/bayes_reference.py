"""Bayesian bisections told one change exists: the references perfbisect's cost is measured against (issue #35).

Model. Commits 0..n-1; exactly one change, at the first bad commit k ∈ {1..n-1}, uniform prior. Every trial of
a commit before k is y ~ N(μ_g, σ²), of a commit from k on y ~ N(μ_b, σ²). The levels μ_g and μ_b have the
conjugate normal prior in its uninformative limit (flat): both endpoints are measured once first, so under every
k each side holds at least one trial and the flat prior's constant is the same for every hypothesis.

- ``told_sigma``: σ is known. Integrating each level out,
      log p(D | k) = −½ log n_g(k) − ½ log n_b(k) − SSW(k) / (2σ²) + const,
  SSW(k) the within-side sum of squares.
- ``learner``: σ² is unknown too, with the conjugate scaled-inverse-χ²(ν0, s0²) prior (= inverse-gamma with
  a0 = ν0/2, b0 = ν0·s0²/2): perfbisect's own prior (5% with 1 dof) by default. Integrating σ² out as well,
      log p(D | k) = −½ log n_g(k) − ½ log n_b(k) − (a0 + (N − 2)/2) · log(b0 + SSW(k)/2) + const.

The next commit is the one whose next trial has the largest expected information gain about k (mutual
information of k and y, the predictive of y under k being the normal — or, σ unknown, Student-t — of its side's
level); the search stops when one answer holds ≥ ``confidence`` of the posterior (an answer is a testable commit
with the untestable commits right before it: no trial can tell those apart), or at ``budget`` trials with
nothing named. No confirmation step, no second-change search, no drift, outlier or layout model: each of those
is an assumption of this model that a real range can break.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import special

# The information gain is integrated (trapezoid) on the union of one grid per predictive component: these
# points, in units of the component's sd, around its mean.
GRID = np.linspace(-10.0, 10.0, 41)


@dataclass
class CommitSums:
    """The trials so far as sufficient statistics per commit 0..n-1: count, sum and sum of squares."""

    n: int
    cnt: np.ndarray = field(init=False)
    s1: np.ndarray = field(init=False)
    s2: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.cnt = np.zeros(self.n)
        self.s1 = np.zeros(self.n)
        self.s2 = np.zeros(self.n)

    def add(self, j: int, y: float) -> None:
        self.cnt[j] += 1
        self.s1[j] += y
        self.s2[j] += y * y

    @property
    def trials(self) -> int:
        return int(self.cnt.sum())


@dataclass
class BayesBisection(CommitSums):
    """The posterior over the change's position from the trials so far, and the commit to measure next."""

    sigma: float | None = None  # known σ (told_sigma); None: learned with the prior below
    nu0: float = 1.0  # the σ prior's dof
    s0: float = math.log1p(0.05)  # ... and its scale (log)
    untestable: set[int] = field(default_factory=set)

    def _sides(self) -> tuple[np.ndarray, ...]:
        """Per hypothesis k = 1..n-1: trials, sum and sum of squares of each side."""
        c, s, q = (np.cumsum(a)[:-1] for a in (self.cnt, self.s1, self.s2))  # commits < k, k = 1..n-1
        ct, st, qt = self.cnt.sum(), self.s1.sum(), self.s2.sum()
        return c, s, q, ct - c, st - s, qt - q

    @staticmethod
    def _within(ng, sg, qg, nb, sb, qb) -> np.ndarray:
        """SSW(k): the sum of squares of every trial about its side's mean, per hypothesis."""
        return np.maximum((qg - sg * sg / ng) + (qb - sb * sb / nb), 0.0)

    # -- posterior ---------------------------------------------------------------------------
    def log_likelihood(self) -> np.ndarray:
        """log p(D | k) up to a constant common to every k, for k = 1..n-1 (index k-1)."""
        sides = self._sides()
        ng, nb = sides[0], sides[3]
        if (ng < 1).any() or (nb < 1).any():
            raise ValueError("both endpoints need a trial before the flat level priors give a posterior")
        ssw = self._within(*sides)
        base = -0.5 * np.log(ng) - 0.5 * np.log(nb)
        if self.sigma is not None:
            return base - ssw / (2 * self.sigma ** 2)
        a0, b0 = self.nu0 / 2, self.nu0 * self.s0 ** 2 / 2
        return base - (a0 + (self.trials - 2) / 2) * np.log(b0 + ssw / 2)

    def posterior(self) -> np.ndarray:
        """p(k | D) for k = 1..n-1 (index k-1), uniform prior over k."""
        ll = self.log_likelihood()
        return np.exp(ll - special.logsumexp(ll))

    def answers(self, post: np.ndarray | None = None) -> list[tuple[int, float]]:
        """(testable commit, mass) per answer: a testable k with the untestable commits right before it."""
        post = self.posterior() if post is None else post
        out, acc = [], 0.0
        for k in range(1, self.n):
            acc += post[k - 1]
            if k not in self.untestable:
                out.append((k, acc))
                acc = 0.0
        return out

    def best(self, post: np.ndarray | None = None) -> tuple[int, float]:
        return max(self.answers(post), key=lambda a: a[1])

    # -- the next trial ----------------------------------------------------------------------
    def _side_predictives(self) -> tuple[np.ndarray, ...]:
        """Per hypothesis, the predictive of one more trial on each side: means, scales, dof (None: normal)."""
        sides = self._sides()
        ng, sg, _, nb, sb, _ = sides
        if self.sigma is not None:
            return sg / ng, sb / nb, self.sigma * np.sqrt(1 + 1 / ng), self.sigma * np.sqrt(1 + 1 / nb), None
        ssw = self._within(*sides)
        a_n = self.nu0 / 2 + (self.trials - 2) / 2
        var = (self.nu0 * self.s0 ** 2 / 2 + ssw / 2) / a_n
        return sg / ng, sb / nb, np.sqrt(var * (1 + 1 / ng)), np.sqrt(var * (1 + 1 / nb)), 2 * a_n

    def information_gains(self, post: np.ndarray | None = None) -> np.ndarray:
        """I(k; y) in nats of one more trial, for every commit j = 0..n-1.

        A trial of j follows, under hypothesis k, the bad side's predictive B_k if k ≤ j and the good side's G_k
        otherwise, so I_j = H(Σ_k w_k p_kj) − Σ_k w_k H(p_kj): mixtures and entropies are prefix sums over k.
        """
        w = self.posterior() if post is None else post
        mg, mb, sg, sb, dof = self._side_predictives()
        # every component gets its own ±10 sd of grid, so no step is too large or σ too small to resolve
        y = np.unique(np.concatenate([mg, mb])[:, None] + np.concatenate([sg, sb])[:, None] * GRID[None, :])

        def logpdf(mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
            z = (y[None, :] - mean[:, None]) / scale[:, None]
            if dof is None:
                core = -0.5 * z * z - 0.5 * math.log(2 * math.pi)
            else:
                core = (special.gammaln((dof + 1) / 2) - special.gammaln(dof / 2) - 0.5 * math.log(dof * math.pi)
                        - (dof + 1) / 2 * np.log1p(z * z / dof))
            return core - np.log(scale)[:, None]

        lg, lb = logpdf(mg, sg), logpdf(mb, sb)
        pg, pb = np.exp(lg), np.exp(lb)
        hg = -np.trapezoid(pg * lg, y, axis=1)  # each component's entropy on the grid the mixture's is taken on
        hb = -np.trapezoid(pb * lb, y, axis=1)
        wb = np.cumsum(w[:, None] * pb, axis=0)  # Σ_{k ≤ j} w_k B_k, j = 1..n-1
        wg = np.cumsum((w[:, None] * pg)[::-1], axis=0)[::-1]  # Σ_{k ≥ m} w_k G_k, m = 1..n-1
        zero = np.zeros((1, len(y)))
        below = np.vstack([zero, wb])  # index j: Σ_{k ≤ j} (j = 0: none)
        above = np.vstack([wg, zero])  # index j: Σ_{k > j} = Σ_{k ≥ j+1} (k index j)
        mix = below + above  # (n, Y)
        with np.errstate(divide="ignore", invalid="ignore"):
            hmix = -np.trapezoid(np.where(mix > 0, mix * np.log(mix), 0.0), y, axis=1)
        hb_c = np.concatenate([[0.0], np.cumsum(w * hb)])
        hg_c = np.concatenate([np.cumsum((w * hg)[::-1])[::-1], [0.0]])
        return hmix - hb_c - hg_c

    def next_commit(self, post: np.ndarray | None = None) -> int:
        gains = self.information_gains(post)
        gains[list(self.untestable)] = -np.inf
        return int(np.argmax(gains))


def run(t, sigma: float | None, confidence: float = 0.99, budget: int = 120, min_at_change: int = 0) -> dict:
    """One bisection of a simulated target (``strategies.Target``): what it names and what it spent.

    Sees what perfbisect sees: trial summaries as the runner returns them (flagged trials re-run), no
    recorded state. ``sigma`` is the σ it is told (None: learned). ``min_at_change`` > 0 adds DESIGN.md's
    floor ("never decide on fewer than two trials per side", the culprit measured against its parent): an
    answer is named only once its commit and the testable commit before it carry that many trials each; until
    then the one with fewer is measured (the commit first on a tie) and the posterior looked at again.
    """
    n = t.scn.n
    if len(t.changes) > 1:
        raise ValueError("the Bayesian references model exactly one change: single-change scenarios only")
    b = BayesBisection(n, sigma=sigma)
    for j in (0, n - 1):
        b.add(j, t.measure(j).value)
    while True:
        post = b.posterior()  # once per step: the answer and the next commit both read it
        k, p = b.best(post)
        if p >= confidence:
            cset = tuple(sorted(_untestable_run(b, k))) + (k,)
            short = _short_of_floor(b, cset, min_at_change)
            if short is None:
                return {"changes": (k,), "set": cset, "verdict": "regressed", "answer_probability": p,
                        "budget_exhausted": False}
            if b.trials < budget:
                b.add(short, t.measure(short).value)
                continue
            # the budget ended short of the floor: nothing is named (below), as with any check left open
        if b.trials >= budget:
            return {"changes": (), "set": (), "verdict": "inconclusive", "answer_probability": p,
                    "budget_exhausted": True}
        j = b.next_commit(post)
        if not t.try_build(j):
            b.untestable.add(j)
            continue
        b.add(j, t.measure(j).value)


def _short_of_floor(b: BayesBisection, cset: tuple[int, ...], floor: int) -> int | None:
    """The commit of the answer or its parent (the testable commit before the answer's set) still under ``floor``
    trials, the one with fewer (the answer's own on a tie); None when both have enough."""
    k, parent = cset[-1], cset[0] - 1
    short = [j for j in (k, parent) if b.cnt[j] < floor]
    return min(short, key=lambda j: b.cnt[j]) if short else None


def _untestable_run(b: BayesBisection, k: int) -> list[int]:
    """The untestable commits right before k (they and k are one answer)."""
    out, j = [], k - 1
    while j >= 1 and j in b.untestable:
        out.append(j)
        j -= 1
    return out
