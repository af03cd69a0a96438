"""The change-point posterior as a value: the evidence it is fitted on, and what it answers.

``changepoint.posterior`` computes it (the model and how it is scored are described there); this module holds
what the policy, the look-ahead and the report read from it: ``Evidence`` (the usable trials regrouped for the
model), ``ChangePosterior`` (its best answer and probability, the masses of none / one / two changes, each
hypothesis's predictive distribution of a new trial with the drift kriged forward, the drift path) with the
per-drift-scale fits it keeps (``RhoFit``), and ``level_step``, the one place a step between two levels and
its standard error are computed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Evidence:
    """Usable trials regrouped for the model: commit index, run-order position and log value each."""

    commit: np.ndarray  # int, per trial
    time: np.ndarray  # float, run-order position per trial (gaps where trials were excluded)
    value: np.ndarray  # float, log summaries
    n: int  # number of commits in the range
    next_testable: np.ndarray  # per commit index, the next testable commit at or after it
    host: np.ndarray | None = None  # int, per trial, the node that measured it; None = one host
    scale: np.ndarray | None = None  # float ≥ 1, per trial, its noise variance as a multiple of σ²; None = all 1

    @property
    def several_hosts(self) -> bool:
        """Whether more than one node measured these trials (only then is a host offset modelled)."""
        return self.host is not None and len(np.unique(self.host)) > 1

    @property
    def trials(self) -> int:
        return len(self.value)


@dataclass
class RhoFit:
    """Per drift scale: the whitened design, data and prefix sums every hypothesis reads from."""

    rho: float
    host_ratio: float  # prior variance of a host's level offset, as a multiple of σ² (0 = not modelled)
    logdet_v: float
    L: np.ndarray
    W: np.ndarray  # L⁻¹ Z
    u: np.ndarray  # L⁻¹ (y − m0)
    q: float  # uᵀu
    CM: np.ndarray  # 2-D prefix sums of WᵀW, (m+1)×(m+1)
    Cv: np.ndarray  # prefix sums of Wᵀu, m+1
    # The commit index of each column of W (sparse posterior: the measured commits and the endpoints);
    # None: one column per commit of the range (m = n).
    cols: np.ndarray | None = None

    def column(self, b):
        """Columns of W before boundary ``b`` (commit indices, scalar or array): the prefix-sum index."""
        return b if self.cols is None else np.searchsorted(self.cols, b)


@dataclass
class ChangePosterior:
    """Posterior over (hypothesis, drift scale) pairs, with what the look-ahead and reports need."""

    b1: np.ndarray  # first boundary; == n means no change
    b2: np.ndarray  # second boundary; == n means at most one change
    rho_index: np.ndarray
    logw: np.ndarray
    w: np.ndarray  # normalised over every (hypothesis, ρ) pair
    beta: np.ndarray  # (H, 3) segment levels, posterior means (log scale, absolute)
    cov: np.ndarray  # (H, 3, 3) posterior covariance of the levels divided by s2
    s2: np.ndarray  # (H,) posterior noise variance estimate
    dof: float  # ν0 + N: the Student-t degrees of freedom of every predictive
    keys: list[tuple[int, ...]]  # per hypothesis, its reportable answer (skip sets merged; () = none)
    groups: dict[tuple[int, ...], float]
    p_none: float
    rho_weights: tuple[float, ...]  # posterior of each drift scale
    fits: list[RhoFit]
    m0: float
    times: np.ndarray
    n: int
    hosts: np.ndarray | None = None  # per trial, its host index, when host offsets are modelled
    host_ratio: float = 0.0  # prior variance of a host offset / σ² (0 = one host, nothing modelled)
    evidence: Evidence | None = None  # what it was fitted on (drift_path, outlier_scale read it)
    # Sparse posterior only (None otherwise): the commits bins end at (the look-ahead's candidates), and
    # per hypothesis the boundaries each of b1, b2 stands for, (lo, hi] (b1 and b2 are representatives)
    # and how many (b1, b2) of the full model it stands for.
    edges: np.ndarray | None = None
    span1: np.ndarray | None = None  # (H, 2)
    span2: np.ndarray | None = None  # (H, 2)
    mult: np.ndarray | None = None

    @property
    def sparse(self) -> bool:
        """Whether hypotheses are bins of boundaries (a long range) rather than single commits."""
        return self.edges is not None

    @property
    def p_one(self) -> float:
        """Posterior of "exactly one change"."""
        return sum(p for k, p in self.groups.items() if len(k) == 1)

    @property
    def p_two(self) -> float:
        """Posterior of "two changes"."""
        return sum(p for k, p in self.groups.items() if len(k) == 2)

    def change_mass(self) -> list[float]:
        """Per commit, the posterior mass of every answer that names it as a change point."""
        if self.sparse:
            return self._spread_mass().tolist()
        mass = [0.0] * self.n
        for key, p in self.groups.items():
            for b in key:
                mass[b] += p
        return mass

    def _spread_mass(self) -> np.ndarray:
        """Sparse posterior: per commit, the mass of the answers naming it, each bin's mass spread evenly
        over the boundaries it stands for (their likelihoods are equal) and moved to the next testable commit."""
        n = self.n
        per_b = self._boundary_mass()
        nt = self.evidence.next_testable
        mass = np.zeros(n)
        np.add.at(mass, nt[1:n], per_b[1:n])
        return mass

    def _boundary_mass(self) -> np.ndarray:
        """Sparse posterior: per boundary 0..n − 1, the mass of hypotheses with a change there (either one)."""
        n = self.n
        per_b = np.zeros(n + 2)
        inner = (self.b2 < n) & (self.span1[:, 0] == self.span2[:, 0])  # both changes in one bin
        for span, on in ((self.span1, (self.b1 < n) & ~inner), (self.span2, (self.b2 < n) & ~inner)):
            lo, hi, w = span[on, 0], span[on, 1], self.w[on]
            share = w / np.maximum(hi - lo, 1)
            np.add.at(per_b, lo + 1, share)
            np.add.at(per_b, hi + 1, -share)
        per_b = np.cumsum(per_b)[:n]
        if inner.any():
            # pairs lo < b1 < b2 ≤ hi: b1 = x has hi − x partners, b2 = y has y − lo − 1
            lows, at = np.unique(self.span1[inner, 0], return_inverse=True)
            mass = np.bincount(at, weights=self.w[inner])
            his = np.zeros(len(lows), dtype=int)
            his[at] = self.span1[inner, 1]
            for lo, hi, m in zip(lows.tolist(), his.tolist(), mass.tolist()):
                x = np.arange(lo + 1, hi + 1)
                pairs = (hi - lo) * (hi - lo - 1) / 2
                per_b[x] += m * ((hi - x) + (x - lo - 1)) / pairs
        return per_b

    def answer(self) -> tuple[tuple[int, ...], float]:
        """The best answer and how sure the posterior is of it, given that something changed.

        With one change likelier than two, the answer is the commit most probably a change point,
        scored by the mass of every hypothesis containing it (a possible small second change
        elsewhere does not make this one less certain). Once two changes are likelier, both must
        be located: the answer is the best pair and its own mass.
        """
        p_two, p_one = self.p_two, self.p_one
        some = max(p_one + p_two, 1e-300)
        if p_two < p_one:
            if self.sparse:
                mass = self._spread_mass()
                # the first of equal masses, as below (a bin's commits share its mass up to rounding)
                b = int(np.flatnonzero(mass >= mass.max() * (1.0 - 1e-9))[0])
                return (b,), min(float(mass[b]) / some, 1.0)
            b, p = max(enumerate(self.change_mass()), key=lambda kv: (kv[1], -kv[0]))
            return (b,), min(p / some, 1.0)
        if self.sparse:
            # a bin pair's mass is shared evenly by the pairs of commits it stands for: the answer is one of them
            pairs: dict[tuple[int, ...], float] = {}
            for k, wi in zip(self.keys, (self.w / self.mult).tolist()):
                if len(k) == 2:
                    pairs[k] = pairs.get(k, 0.0) + wi
            key, p = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
            return key, min(p / max(p_two, 1e-300), 1.0)
        pairs = {k: p for k, p in self.groups.items() if len(k) == 2}
        key, p = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        return key, min(p / max(p_two, 1e-300), 1.0)

    def endpoint_step(self) -> float:
        """Posterior mean of the bad endpoint's level minus the good one's (log), over every hypothesis: "no change"
        counts as 0, each change hypothesis its own step. What the next trials of the endpoints are expected to
        differ by (the difference measured so far is that plus noise)."""
        last = self.n - 1
        seg = (last >= self.b1).astype(int) + (last >= self.b2).astype(int)
        step = np.take_along_axis(self.beta, seg[:, None], axis=1)[:, 0] - self.beta[:, 0]
        return float(self.w @ step)

    def top(self, key: tuple[int, ...] | None = None) -> int:
        """Index of the most probable (hypothesis, ρ) pair, optionally among those with answer ``key``."""
        if key is None:
            return int(np.argmax(self.logw))
        mask = np.array([k == key for k in self.keys])
        if self.sparse and not mask.any():
            # the answer is a commit inside a bin: the hypotheses whose bins hold it
            mask = (self.span1[:, 0] < key[0]) & (key[0] <= self.span1[:, 1])
            mask &= (self.b2 == self.n) if len(key) == 1 else (self.span2[:, 0] < key[1]) & (key[1] <= self.span2[:, 1])
        return int(np.argmax(np.where(mask, self.logw, -np.inf)))

    @property
    def sigma_top(self) -> float:
        """Posterior noise σ (log) under the most probable change hypothesis."""
        none = self.b1 == self.n
        i = int(np.argmax(np.where(none, -np.inf, self.logw))) if (~none).any() else self.top()
        return float(math.sqrt(self.s2[i]))

    def drift_path(self, ev: Evidence) -> np.ndarray | None:
        """The drift fitted at each trial of ``ev`` (log, the trials' order) under the most probable
        pair, or None when that pair has no drift (ρ = 0). ``ev`` must be the evidence it was fitted on."""
        h = self.top()
        fit = self.fits[int(self.rho_index[h])]
        if fit.rho == 0.0:
            return None
        seg = np.searchsorted(np.asarray([int(self.b1[h]), int(self.b2[h])]), ev.commit, side="right")
        resid = ev.value - self.beta[h][seg]
        K = np.minimum(ev.time[:, None], ev.time[None, :])
        alpha = np.linalg.solve(fit.L.T, np.linalg.solve(fit.L, resid))
        return fit.rho * K @ alpha

    def predict(self, idx: np.ndarray, commits: np.ndarray, t_new: float,
                host: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Predictive location and scale of one new trial of each commit at time ``t_new``, per hypothesis.

        Returns (loc, scale), each (len(idx), len(commits)): a Student-t with ``dof`` degrees of
        freedom. The drift at ``t_new`` is predicted from the residuals (kriging under the random
        walk); its uncertainty and the levels' uncertainty widen the scale. When host offsets are
        modelled, ``host`` is the node the trial would run on (its offset is predicted from its
        trials so far; None or a node with no trials yet: an unknown offset, the prior's width).
        """
        if self.host_ratio > 0.0:
            return self._predict_hosts(idx, commits, t_new, host)
        b1, b2 = self.b1[idx], self.b2[idx]
        seg = (commits[None, :] >= b1[:, None]).astype(int) + (commits[None, :] >= b2[:, None]).astype(int)
        beta = self.beta[idx]
        loc = np.take_along_axis(beta, seg, axis=1)
        cov = self.cov[idx]
        lvar = np.take_along_axis(cov.reshape(len(idx), 9), seg * 4, axis=1)  # diagonal entries (s, s)
        extra_mean = np.zeros(len(idx))
        extra_var = np.zeros(len(idx))
        rho_i = self.rho_index[idx]
        for r, fit in enumerate(self.fits):
            sel = rho_i == r
            if not sel.any() or fit.rho == 0.0:
                continue
            k = np.minimum(self.times, t_new)
            wk = np.linalg.solve(fit.L, k)
            a = float(wk @ fit.u)
            gvec = fit.W.T @ wk  # n
            Cg = np.concatenate([[0.0], np.cumsum(gvec)])
            bounds = fit.column(np.stack([np.zeros_like(b1[sel]), b1[sel], b2[sel], np.full_like(b1[sel], self.n)], axis=1))
            segsum = Cg[bounds[:, 1:]] - Cg[bounds[:, :-1]]  # (h, 3)
            centred = beta[sel] - self.m0
            extra_mean[sel] = fit.rho * (a - (segsum * centred).sum(axis=1))
            extra_var[sel] = max(fit.rho * t_new - fit.rho**2 * float(wk @ wk), 0.0)
        loc = loc + extra_mean[:, None]
        scale = np.sqrt(self.s2[idx][:, None] * (1.0 + extra_var[:, None] + lvar))
        return loc, scale

    def _predict_hosts(self, idx: np.ndarray, commits: np.ndarray, t_new: float,
                       host: int | None) -> tuple[np.ndarray, np.ndarray]:
        """``predict`` when host offsets are modelled: the new trial's covariance with the stored
        ones is the drift's ρ·min(t, t_new) plus the host offset's λ for trials of the same node."""
        b1, b2 = self.b1[idx], self.b2[idx]
        seg = (commits[None, :] >= b1[:, None]).astype(int) + (commits[None, :] >= b2[:, None]).astype(int)
        beta = self.beta[idx]
        loc = np.take_along_axis(beta, seg, axis=1)
        cov = self.cov[idx]
        lvar = np.take_along_axis(cov.reshape(len(idx), 9), seg * 4, axis=1)
        extra_mean = np.zeros(len(idx))
        extra_var = np.zeros(len(idx))
        rho_i = self.rho_index[idx]
        same = (self.hosts == host).astype(float) if host is not None else np.zeros(len(self.times))
        for r, fit in enumerate(self.fits):
            sel = rho_i == r
            if not sel.any():
                continue
            k = fit.rho * np.minimum(self.times, t_new) + self.host_ratio * same
            c_new = fit.rho * t_new + self.host_ratio
            wk = np.linalg.solve(fit.L, k)
            a = float(wk @ fit.u)
            gvec = fit.W.T @ wk
            Cg = np.concatenate([[0.0], np.cumsum(gvec)])
            bounds = fit.column(np.stack([np.zeros_like(b1[sel]), b1[sel], b2[sel], np.full_like(b1[sel], self.n)], axis=1))
            segsum = Cg[bounds[:, 1:]] - Cg[bounds[:, :-1]]
            centred = beta[sel] - self.m0
            extra_mean[sel] = a - (segsum * centred).sum(axis=1)
            extra_var[sel] = max(c_new - float(wk @ wk), 0.0)
        loc = loc + extra_mean[:, None]
        scale = np.sqrt(self.s2[idx][:, None] * (1.0 + extra_var[:, None] + lvar))
        return loc, scale


def level_step(beta: np.ndarray, cov: np.ndarray, s2: np.ndarray | float, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """Step from level ``a`` to level ``b`` (log) and its standard error.

    ``beta`` (…, k) levels, ``cov`` (…, k, k) their covariance divided by ``s2`` (…): one hypothesis,
    or every hypothesis at once along the leading axes. The upper triangle's ``cov[a, b]`` is read
    (a < b), so every caller gets the same bits from a covariance that inversion left not quite
    symmetric.
    """
    d = beta[..., b] - beta[..., a]
    se = np.sqrt(s2 * np.maximum(cov[..., a, a] + cov[..., b, b] - 2 * cov[..., a, b], 1e-300))
    return d, se


__all__ = ["ChangePosterior", "Evidence", "RhoFit", "level_step"]
