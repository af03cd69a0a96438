"""The change-point posterior under machine drift: numpy only (the normal CDF comes from stats), no I/O.

Model of one trial summary (log scale) of commit ``c`` run at position ``t`` of the run order::

    y = level(segment of c) + drift(t) + e,     e ~ N(0, σ²),   drift ~ random walk, var ρ·σ² per trial

A hypothesis is a set of change points: none, one (the first bad commit ``b1``), or two (``b1 < b2``),
splitting the commits into at most three segments with their own levels. The levels (Normal prior,
``g``·σ² wide), the drift path (Gaussian) and σ² (scaled-inverse-χ², the noise model as its prior)
are integrated out in closed form; the drift scale ρ is marginalised over a small grid with a prior
that favours "no drift". Every hypothesis is scored by its marginal likelihood, so:

- with ρ = 0 this is the i.i.d. model (segments pooled, σ learned from every residual);
- σ's prior is a mixture over scales of the stated σ (``SIGMA_SCALES``): a stored or calibrated
  figure is a prior with bounded weight, and when this bisection's own spread disagrees with it the
  marginal likelihood moves to the scale the data support instead of trusting the figure;
- a trial may carry a variance multiplier (``Evidence.scale``): ``outlier_scale`` down-weights a
  session that sits far from every fitted level (a two-component outlier mixture, one EM step), so
  one slow session is neither a verdict nor a reason to inflate σ for every trial;
- when trials of one commit taken at different times disagree beyond σ, larger ρ wins and
  comparisons between trials far apart in time lose weight, while contrasts between trials run
  next to each other keep theirs: the commit a trial measured is no longer confounded with *when*
  it was measured.

Generalised least squares with the sufficient statistics of all hypotheses at once: with
V = I + ρK (K_ij = min(t_i, t_j)), Cholesky V = LLᵀ, W = L⁻¹Z (Z: trial → commit incidence) and
u = L⁻¹y, every segment's block of ZᵀV⁻¹Z is a difference of 2-D prefix sums of M = WᵀW, so each
hypothesis costs O(1) after O(N²n) per ρ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .stats import normal_cdf

# Drift scales (random-walk variance per trial, as a multiple of σ²) and their prior weights:
# most bisections run on a steady machine; the rest drift slowly, moderately or jump.
RHO_GRID = (0.0, 0.03, 0.15, 0.6)
RHO_PRIOR = (0.85, 0.05, 0.05, 0.05)
# Scales of the stated σ and their prior weights: the figure a bisection starts from (a prior, a
# calibration, an earlier bisection) may be too small by 2–4× (back-to-back sessions, another day)
# or too large; the data pick the scale, the figure only leans. (1.0,) with weight 1 = trust it.
SIGMA_SCALES = ((0.5, 0.15), (1.0, 0.45), (2.0, 0.25), (4.0, 0.15))
# Outlier sessions (outlier_scale): prior share of wild sessions and their variance, as a multiple of σ².
OUTLIER_SHARE = 0.03
OUTLIER_VARIANCE = 9.0


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
class _RhoFit:
    """Per drift scale: the whitened design, data and prefix sums every hypothesis reads from."""

    rho: float
    host_ratio: float  # prior variance of a host's level offset, as a multiple of σ² (0 = not modelled)
    logdet_v: float
    L: np.ndarray
    W: np.ndarray  # L⁻¹ Z
    u: np.ndarray  # L⁻¹ (y − m0)
    q: float  # uᵀu
    CM: np.ndarray  # 2-D prefix sums of WᵀW, (n+1)×(n+1)
    Cv: np.ndarray  # prefix sums of Wᵀu, n+1


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
    fits: list[_RhoFit]
    m0: float
    times: np.ndarray
    n: int
    hosts: np.ndarray | None = None  # per trial, its host index, when host offsets are modelled
    host_ratio: float = 0.0  # prior variance of a host offset / σ² (0 = one host, nothing modelled)
    evidence: Evidence | None = None  # what it was fitted on (drift_path, outlier_scale read it)

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
        mass = [0.0] * self.n
        for key, p in self.groups.items():
            for b in key:
                mass[b] += p
        return mass

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
            b, p = max(enumerate(self.change_mass()), key=lambda kv: (kv[1], -kv[0]))
            return (b,), min(p / some, 1.0)
        pairs = {k: p for k, p in self.groups.items() if len(k) == 2}
        key, p = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        return key, min(p / max(p_two, 1e-300), 1.0)

    def top(self, key: tuple[int, ...] | None = None) -> int:
        """Index of the most probable (hypothesis, ρ) pair, optionally among those with answer ``key``."""
        if key is None:
            return int(np.argmax(self.logw))
        mask = np.array([k == key for k in self.keys])
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
            bounds = np.stack([np.zeros_like(b1[sel]), b1[sel], b2[sel], np.full_like(b1[sel], self.n)], axis=1)
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
            bounds = np.stack([np.zeros_like(b1[sel]), b1[sel], b2[sel], np.full_like(b1[sel], self.n)], axis=1)
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


def _hypotheses(n: int, two: bool) -> tuple[np.ndarray, np.ndarray]:
    ks = np.arange(1, n)
    b1 = [ks]
    b2 = [np.full(len(ks), n)]
    if two and n >= 3:
        i1, i2 = np.triu_indices(n - 1, k=1)
        b1.append(i1 + 1)
        b2.append(i2 + 1)
    b1.append(np.array([n]))
    b2.append(np.array([n]))
    return np.concatenate(b1), np.concatenate(b2)


def _fit_rho(ev: Evidence, y: np.ndarray, rho: float, host_ratio: float = 0.0) -> _RhoFit:
    N, n = ev.trials, ev.n
    Z = np.zeros((N, n))
    Z[np.arange(N), ev.commit] = 1.0
    if rho == 0.0 and host_ratio == 0.0:
        if ev.scale is None:
            L = np.eye(N)
            W, u, logdet = Z, y.copy(), 0.0
        else:
            root = np.sqrt(ev.scale)
            L = np.diag(root)
            W, u, logdet = Z / root[:, None], y / root, float(np.log(ev.scale).sum())
    else:
        t = ev.time
        V = np.diag(ev.scale if ev.scale is not None else np.ones(N)) + rho * np.minimum(t[:, None], t[None, :])
        if host_ratio > 0.0:
            # each node's level offset ~ N(0, host_ratio·σ²), shared by every trial it ran: integrated out
            V = V + host_ratio * (ev.host[:, None] == ev.host[None, :])
        L = np.linalg.cholesky(V)
        W = np.linalg.solve(L, Z)
        u = np.linalg.solve(L, y)
        logdet = 2.0 * float(np.log(np.diag(L)).sum())
    M = W.T @ W
    CM = np.zeros((n + 1, n + 1))
    CM[1:, 1:] = M.cumsum(axis=0).cumsum(axis=1)
    Cv = np.concatenate([[0.0], np.cumsum(W.T @ u)])
    return _RhoFit(rho, host_ratio, logdet, L, W, u, float(u @ u), CM, Cv)


def posterior(
    ev: Evidence,
    *,
    sigma0: float,
    dof0: float,
    level_ratio: float,
    min_step: float,
    no_change_prior: float,
    two_change_prior: float,
    rho_grid: tuple[float, ...] = RHO_GRID,
    rho_prior: tuple[float, ...] = RHO_PRIOR,
    host_ratio: float = 0.0,
    sigma_scales: tuple[tuple[float, float], ...] | None = None,
) -> ChangePosterior:
    """Score every (hypothesis, drift scale) pair by its marginal likelihood times its prior.

    ``min_step`` (log): a change smaller than this is no change to the user, so each hypothesis is
    weighed by the posterior probability that each of its steps is at least that big (a truncated
    prior on step sizes); without it, splits of one level into two equal ones keep mass no trial
    can remove and "no change" could never win.

    ``sigma_scales``: (multiplier of ``sigma0``, prior weight) pairs (default SIGMA_SCALES); σ's prior is their mixture of
    scaled-inverse-χ² laws with ``dof0`` degrees of freedom each, integrated out per hypothesis.

    ``host_ratio`` (λ): when the trials come from more than one node (``ev.host``), each node's level
    offset is a random effect N(0, λ·σ²) integrated out with the rest, so only contrasts within a
    node, and the spread of offsets the prior allows, carry a step. With one node it is ignored.
    """
    lam = host_ratio if ev.several_hosts else 0.0
    n, N = ev.n, ev.trials
    m0 = float(ev.value.mean())
    y = ev.value - m0
    g = level_ratio
    hb1, hb2 = _hypotheses(n, two_change_prior > 0)
    H = len(hb1)
    none = hb1 == n
    single = (hb2 == n) & ~none
    two = ~(single | none)
    n_pairs = max(int(two.sum()), 1)
    p_change = 1.0 - no_change_prior
    tp = two_change_prior if n >= 3 else 0.0
    with np.errstate(divide="ignore"):
        logprior_h = np.where(
            none, math.log(no_change_prior),
            np.where(single, math.log(p_change * (1 - tp)) - math.log(n - 1),
                     np.log(p_change * tp) - math.log(n_pairs)),
        )
    bounds = np.stack([np.zeros(H, dtype=int), hb1, hb2, np.full(H, n)], axis=1)
    lo, hi = bounds[:, :-1], bounds[:, 1:]  # (H, 3) segment ranges
    all_b1, all_b2, all_r, all_logw, all_beta, all_cov, all_s2 = [], [], [], [], [], [], []
    fits = []
    # σ² prior: a mixture over scales; per component ν0·s_k², and the log of its normalising part
    sigma_scales = SIGMA_SCALES if sigma_scales is None else sigma_scales
    a_k = np.asarray([dof0 * (sigma0 * m) ** 2 for m, _ in sigma_scales])
    log_k = np.log([wk for _, wk in sigma_scales]) + 0.5 * dof0 * np.log(a_k)
    for r, (rho, prior_r) in enumerate(zip(rho_grid, rho_prior)):
        if rho > 0 and N < 3:
            continue
        fit = _fit_rho(ev, y, rho, lam)
        fits.append(fit)
        CM, Cv = fit.CM, fit.Cv
        G = (
            CM[hi[:, :, None], hi[:, None, :]] - CM[lo[:, :, None], hi[:, None, :]]
            - CM[hi[:, :, None], lo[:, None, :]] + CM[lo[:, :, None], lo[:, None, :]]
        )  # (H, 3, 3)
        G = G + np.eye(3)[None] / g
        rv = Cv[hi] - Cv[lo]  # (H, 3)
        cov = np.linalg.inv(G)
        beta_c = np.einsum("hij,hj->hi", cov, rv)
        R = np.maximum(fit.q - (rv * beta_c).sum(axis=1), 1e-300)
        _, logdet_g = np.linalg.slogdet(G)
        occam = -0.5 * (3.0 * math.log(g) + logdet_g)
        terms = log_k[None, :] - 0.5 * (dof0 + N) * np.log(a_k[None, :] + R[:, None])  # (H, K)
        top = terms.max(axis=1, keepdims=True)
        pk = np.exp(terms - top)
        total = pk.sum(axis=1)
        logml = -0.5 * fit.logdet_v + occam + top[:, 0] + np.log(total)
        s2 = (pk * (a_k[None, :] + R[:, None])).sum(axis=1) / total / (dof0 + N)
        for a, b, mask in ((0, 1, ~none), (1, 2, two)):
            d, se = level_step(beta_c, cov, s2, a, b)
            big = normal_cdf((-min_step - d) / se) + normal_cdf((d - min_step) / se)
            logml = logml + np.where(mask, np.log(np.maximum(big, 1e-300)), 0.0)
        all_b1.append(hb1)
        all_b2.append(hb2)
        all_r.append(np.full(H, len(fits) - 1))
        all_logw.append(logml + logprior_h + math.log(prior_r))
        all_beta.append(beta_c + m0)
        all_cov.append(cov)
        all_s2.append(s2)
    b1 = np.concatenate(all_b1)
    b2 = np.concatenate(all_b2)
    rho_index = np.concatenate(all_r)
    logw = np.concatenate(all_logw)
    logw = logw - logw.max()
    w = np.exp(logw)
    w /= w.sum()
    nt = ev.next_testable
    keys: list[tuple[int, ...]] = []
    groups: dict[tuple[int, ...], float] = {}
    for x1, x2, wi in zip(b1.tolist(), b2.tolist(), w.tolist()):
        if x1 == n:
            key: tuple[int, ...] = ()
        else:
            k1 = int(nt[x1])
            key = (k1,) if x2 == n or int(nt[x2]) == k1 else (k1, int(nt[x2]))
        keys.append(key)
        groups[key] = groups.get(key, 0.0) + wi
    rho_w = tuple(float(w[rho_index == r].sum()) for r in range(len(fits)))
    return ChangePosterior(
        b1=b1, b2=b2, rho_index=rho_index, logw=logw, w=w, beta=np.concatenate(all_beta),
        cov=np.concatenate(all_cov), s2=np.concatenate(all_s2), dof=dof0 + N, keys=keys, groups=groups,
        p_none=groups.get((), 0.0), rho_weights=rho_w, fits=fits, m0=m0, times=ev.time.astype(float), n=n,
        hosts=ev.host if lam > 0.0 else None, host_ratio=lam, evidence=ev,
    )


def outlier_scale(post: ChangePosterior, share: float = OUTLIER_SHARE, variance: float = OUTLIER_VARIANCE,
                  min_prob: float = 0.1) -> np.ndarray | None:
    """Per-trial variance multipliers that down-weight wild sessions, or None when no trial looks wild.

    Each trial's residual is taken against the levels averaged over every hypothesis (weighted by
    the posterior, so a trial is not judged by one answer it might overturn) plus the fitted drift
    when drift is likelier than not. Under a two-component mixture — a share ``share`` of sessions
    with ``variance``·σ² — the trial's probability π of being wild gives its expected precision
    (1 − π) + π/``variance``; its variance multiplier is the inverse. One EM step: a session far
    beyond σ counts a fraction of a trial instead of moving a level or inflating σ for all.
    """
    ev = post.evidence
    if ev is None or ev.trials < 4:
        return None
    seg = (ev.commit[None, :] >= post.b1[:, None]).astype(int) + (ev.commit[None, :] >= post.b2[:, None]).astype(int)
    fitted = post.w @ np.take_along_axis(post.beta, seg, axis=1)
    if post.rho_weights and post.rho_weights[0] < 0.5:
        path = post.drift_path(ev)
        if path is not None:
            fitted = fitted + path
    resid = ev.value - fitted
    # σ for judging wildness: robust (a wild session inflates the posterior's σ, which would hide it),
    # but never below half the posterior's, so a lucky tight sample does not make ordinary sessions wild
    sigma = max(1.4826 * float(np.median(np.abs(resid - np.median(resid)))), 0.5 * math.sqrt(float(post.w @ post.s2)))
    z2 = (resid / sigma) ** 2
    wild = share * np.exp(-0.5 * z2 / variance) / math.sqrt(variance)
    tame = (1.0 - share) * np.exp(-0.5 * z2)
    pi = wild / np.maximum(wild + tame, 1e-300)
    if pi.max() < min_prob:
        return None
    return 1.0 / ((1.0 - pi) + pi / variance)


__all__ = ["ChangePosterior", "Evidence", "RHO_GRID", "RHO_PRIOR", "SIGMA_SCALES", "level_step", "outlier_scale", "posterior"]
