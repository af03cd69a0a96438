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

Long ranges (more than SPARSE_ABOVE commits) are scored on bins instead of commits (a sparse
posterior, ``_sparse_posterior``): every hypothesis whose boundaries fall between the same two
measured commits has the same marginal likelihood, so a bin of commits with no trial inside is one
hypothesis weighted by how many commits (or pairs of commits) it stands for. The bins' edges are the
measured commits, quantiles of the change's location and a coarse grid, so the posterior holds
O(edges²) pairs however long the range is, the masses of "no change", "one change" and "two changes"
are those of the full model, and the commits a trial is chosen among are the edges (``edges``),
where the look-ahead's expected gains are exact. Memory and time per decision are bounded by the
number of trials, not by the range.

The value ``posterior`` returns — ``ChangePosterior``, what it answers, and the ``Evidence`` it is fitted on —
is change_posterior.py's; this module scores the hypotheses (``posterior``: ``_dense_posterior`` up to
SPARSE_ABOVE commits, ``_sparse_posterior`` beyond) and down-weights wild sessions (``outlier_scale``).
"""

from __future__ import annotations

import math

import numpy as np

from .change_posterior import ChangePosterior, Evidence, RhoFit, level_step
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
# Ranges longer than this many commits get the sparse posterior (bins between edges, see the module
# docstring); up to it every commit and every pair of commits is its own hypothesis. The full model's
# n² pairs cost ~1 s per decision at 300 commits on a busy 2-core machine, 0.5 GB at 500, 4 GB at 2,000.
SPARSE_ABOVE = 200
# Sparse posterior: edges at this many quantiles of the change's location (where the mass is, the bins
# shrink to one commit) and at this many evenly spaced commits (so a second change anywhere has a bin).
EDGE_QUANTILES = 48
EDGE_GRID = 32


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


def _answers(hb1: np.ndarray, hb2: np.ndarray, copies: int, w: np.ndarray, nt: list[int],
             n: int) -> tuple[list[tuple[int, ...]], dict[tuple[int, ...], float]]:
    """Each hypothesis's reportable answer (skip sets merged) and each answer's mass.

    The hypotheses are ``hb1``/``hb2`` repeated ``copies`` times (once per drift scale); masses are summed
    in the hypotheses' order (bincount adds one by one, as a loop would), answers in order of first sight.
    """
    ids = np.empty(len(hb1), dtype=int)
    index: dict[tuple[int, ...], int] = {}
    for h, (x1, x2) in enumerate(zip(hb1.tolist(), hb2.tolist())):
        if x1 == n:
            key: tuple[int, ...] = ()
        else:
            k1 = nt[x1]
            key = (k1,) if x2 == n or nt[x2] == k1 else (k1, nt[x2])
        ids[h] = index.setdefault(key, len(index))
    answers = list(index)
    sums = np.bincount(np.tile(ids, copies), weights=w, minlength=len(answers))
    return [answers[i] for i in ids] * copies, dict(zip(answers, sums.tolist()))


def _fit_rho(ev: Evidence, y: np.ndarray, rho: float, host_ratio: float = 0.0,
             cols: np.ndarray | None = None) -> RhoFit:
    """Whitened design and prefix sums for drift scale ``rho``; ``cols``: the commits that get a column
    (sorted; None = every commit of the range: O(n²) prefix sums)."""
    N = ev.trials
    n = ev.n if cols is None else len(cols)
    Z = np.zeros((N, n))
    Z[np.arange(N), ev.commit if cols is None else np.searchsorted(cols, ev.commit)] = 1.0
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
    return RhoFit(rho, host_ratio, logdet, L, W, u, float(u @ u), CM, Cv, cols)


def _score(fit: RhoFit, lo: np.ndarray, hi: np.ndarray, none: np.ndarray, two: np.ndarray, *, g: float,
           dof0: float, N: int, a_k: np.ndarray, log_k: np.ndarray, min_step: float):
    """Log marginal likelihood (min_step truncation included), levels, their covariance / s2 and s2 of
    each hypothesis, given its segments' (lo, hi) prefix-sum indices, (H, 3) each."""
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
    return logml, beta_c, cov, s2


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
    extra_edges: tuple[int, ...] = (),
) -> ChangePosterior:
    """Score every (hypothesis, drift scale) pair by its marginal likelihood times its prior.

    ``extra_edges``: commits a long range's bins must also end at (trials in flight, whose predictions
    the look-ahead reads); ignored up to SPARSE_ABOVE commits, where every commit is resolved.

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
    n = ev.n
    m0 = float(ev.value.mean())
    y = ev.value - m0
    g = level_ratio
    if n > SPARSE_ABOVE:
        return _sparse_posterior(
            ev, y, m0, lam, g=g, sigma0=sigma0, dof0=dof0, min_step=min_step, no_change_prior=no_change_prior,
            two_change_prior=two_change_prior, rho_grid=rho_grid, rho_prior=rho_prior, sigma_scales=sigma_scales,
            extra_edges=extra_edges,
        )
    return _dense_posterior(
        ev, y, m0, lam, g=g, sigma0=sigma0, dof0=dof0, min_step=min_step, no_change_prior=no_change_prior,
        two_change_prior=two_change_prior, rho_grid=rho_grid, rho_prior=rho_prior, sigma_scales=sigma_scales,
    )


def _dense_posterior(ev: Evidence, y: np.ndarray, m0: float, lam: float, *, g: float, sigma0: float, dof0: float,
                     min_step: float, no_change_prior: float, two_change_prior: float,
                     rho_grid: tuple[float, ...], rho_prior: tuple[float, ...],
                     sigma_scales: tuple[tuple[float, float], ...] | None) -> ChangePosterior:
    """``posterior`` for a range of up to SPARSE_ABOVE commits: every commit and every pair of commits is its own
    hypothesis, scored once per drift scale."""
    n, N = ev.n, ev.trials
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
        logml, beta_c, cov, s2 = _score(fit, lo, hi, none, two, g=g, dof0=dof0, N=N, a_k=a_k, log_k=log_k,
                                        min_step=min_step)
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
    keys, groups = _answers(hb1, hb2, len(fits), w, ev.next_testable.tolist(), n)
    rho_w = tuple(float(w[rho_index == r].sum()) for r in range(len(fits)))
    return ChangePosterior(
        b1=b1, b2=b2, rho_index=rho_index, logw=logw, w=w, beta=np.concatenate(all_beta),
        cov=np.concatenate(all_cov), s2=np.concatenate(all_s2), dof=dof0 + N, keys=keys, groups=groups,
        p_none=groups.get((), 0.0), rho_weights=rho_w, fits=fits, m0=m0, times=ev.time.astype(float), n=n,
        hosts=ev.host if lam > 0.0 else None, host_ratio=lam, evidence=ev,
    )


def _bins(n: int, edges: np.ndarray, two: bool) -> tuple[np.ndarray, ...]:
    """Hypotheses over the bins (e_k, e_k+1] between sorted ``edges`` (0 and n − 1 among them), in the
    full model's order (one change, two changes, none): representative b1, b2, the spans (lo, hi] each
    stands for and how many of the full model's hypotheses each is. A pair inside one bin (its middle
    segment holds no edge) is represented by (e_k+1 − 1, e_k+1)."""
    lo_e, hi_e = edges[:-1], edges[1:]
    width = (hi_e - lo_e).astype(float)
    none_span = np.array([[n, n]])
    b1, b2, sp1, sp2, mult = [hi_e], [np.full(len(hi_e), n)], [np.stack([lo_e, hi_e], axis=1)], \
        [np.repeat(none_span, len(hi_e), axis=0)], [width]
    if two and n >= 3:
        k, l = np.triu_indices(len(hi_e), k=1)
        b1.append(hi_e[k])
        b2.append(hi_e[l])
        sp1.append(np.stack([lo_e[k], hi_e[k]], axis=1))
        sp2.append(np.stack([lo_e[l], hi_e[l]], axis=1))
        mult.append(width[k] * width[l])
        inner = np.flatnonzero(width >= 2)
        b1.append(hi_e[inner] - 1)
        b2.append(hi_e[inner])
        span = np.stack([lo_e[inner], hi_e[inner]], axis=1)
        sp1.append(span)
        sp2.append(span)
        mult.append(width[inner] * (width[inner] - 1) / 2)
    b1.append(np.array([n]))
    b2.append(np.array([n]))
    sp1.append(none_span)
    sp2.append(none_span)
    mult.append(np.ones(1))
    return (np.concatenate(b1), np.concatenate(b2), np.concatenate(sp1), np.concatenate(sp2),
            np.concatenate(mult))


def _sparse_posterior(ev: Evidence, y: np.ndarray, m0: float, lam: float, *, g: float, sigma0: float, dof0: float,
                      min_step: float, no_change_prior: float, two_change_prior: float,
                      rho_grid: tuple[float, ...], rho_prior: tuple[float, ...],
                      sigma_scales: tuple[tuple[float, float], ...] | None,
                      extra_edges: tuple[int, ...] = ()) -> ChangePosterior:
    """``posterior`` for a long range: hypotheses are bins of boundaries (module docstring).

    First the bins between measured commits only (every boundary in a bin has the same likelihood, so
    this is the full model's posterior, coarsely resolved); then the bins are split at quantiles of
    where the change lies under it and on a coarse grid, and scored again: where the mass is, bins are
    one commit wide, and the look-ahead can choose among the new edges.
    """
    n, N = ev.n, ev.trials
    cols = np.union1d(ev.commit, [0, n - 1]).astype(int)
    sigma_scales = SIGMA_SCALES if sigma_scales is None else sigma_scales
    a_k = np.asarray([dof0 * (sigma0 * m) ** 2 for m, _ in sigma_scales])
    log_k = np.log([wk for _, wk in sigma_scales]) + 0.5 * dof0 * np.log(a_k)
    fits = [(_fit_rho(ev, y, rho, lam, cols), prior_r) for rho, prior_r in zip(rho_grid, rho_prior)
            if not (rho > 0 and N < 3)]
    score = dict(g=g, dof0=dof0, N=N, a_k=a_k, log_k=log_k, min_step=min_step)
    coarse = _score_bins(ev, fits, cols, m0, lam, score, no_change_prior, two_change_prior)
    per_b = coarse._boundary_mass()[1:n]
    cdf = np.cumsum(per_b)
    edges = [cols, np.round(np.linspace(0, n - 1, EDGE_GRID + 1)).astype(int),
             np.clip(np.asarray(extra_edges, dtype=int), 0, n - 1)]
    if cdf[-1] > 0:
        levels = (np.arange(EDGE_QUANTILES) + 0.5) / EDGE_QUANTILES * cdf[-1]
        edges.append(np.minimum(np.searchsorted(cdf, levels) + 1, n - 1))
    return _score_bins(ev, fits, np.unique(np.concatenate(edges)), m0, lam, score, no_change_prior,
                       two_change_prior)


def _score_bins(ev: Evidence, fits: list[tuple[RhoFit, float]], edges: np.ndarray, m0: float, lam: float,
                score: dict, no_change_prior: float, two_change_prior: float) -> ChangePosterior:
    """The sparse posterior over the bins between ``edges`` (which hold every measured commit)."""
    n, N = ev.n, ev.trials
    hb1, hb2, span1, span2, mult = _bins(n, edges, two_change_prior > 0)
    H = len(hb1)
    none = hb1 == n
    single = (hb2 == n) & ~none
    two = ~(single | none)
    p_change = 1.0 - no_change_prior
    tp = two_change_prior if n >= 3 else 0.0
    n_pairs = max((n - 1) * (n - 2) // 2, 1)
    with np.errstate(divide="ignore"):
        logprior_h = np.where(
            none, math.log(no_change_prior),
            np.where(single, math.log(p_change * (1 - tp)) - math.log(n - 1),
                     np.log(p_change * tp) - math.log(n_pairs)),
        ) + np.log(mult)
    all_logw, all_beta, all_cov, all_s2 = [], [], [], []
    for r, (fit, prior_r) in enumerate(fits):
        bounds = fit.column(np.stack([np.zeros(H, dtype=int), hb1, hb2, np.full(H, n)], axis=1))
        logml, beta_c, cov, s2 = _score(fit, bounds[:, :-1], bounds[:, 1:], none, two, **score)
        all_logw.append(logml + logprior_h + math.log(prior_r))
        all_beta.append(beta_c + m0)
        all_cov.append(cov)
        all_s2.append(s2)
    R = len(fits)
    rho_index = np.repeat(np.arange(R), H)
    logw = np.concatenate(all_logw)
    logw = logw - logw.max()
    w = np.exp(logw)
    w /= w.sum()
    b1, b2 = np.tile(hb1, R), np.tile(hb2, R)
    keys, groups = _answers(hb1, hb2, R, w, ev.next_testable.tolist(), n)
    rho_w = tuple(float(w[rho_index == r].sum()) for r in range(R))
    return ChangePosterior(
        b1=b1, b2=b2, rho_index=rho_index, logw=logw, w=w, beta=np.concatenate(all_beta),
        cov=np.concatenate(all_cov), s2=np.concatenate(all_s2), dof=score["dof0"] + N, keys=keys, groups=groups,
        p_none=groups.get((), 0.0), rho_weights=rho_w, fits=[f for f, _ in fits], m0=m0,
        times=ev.time.astype(float), n=n, hosts=ev.host if lam > 0.0 else None, host_ratio=lam, evidence=ev,
        edges=edges, span1=np.tile(span1, (R, 1)), span2=np.tile(span2, (R, 1)), mult=np.tile(mult, R),
    )


# Bytes a sparse posterior holds per (hypothesis, drift scale), its scoring's temporaries included
# (the largest seen with tracemalloc over one decision of 10,000-commit searches after 20–80 trials: 650–1,600).
SPARSE_BYTES_PER_HYPOTHESIS = 1600


def sparse_footprint(n: int, trials: int) -> tuple[int, int, int]:
    """What the search over ``n`` commits holds at most after ``trials`` trials: (bin edges, hypotheses,
    bytes). Short ranges (n ≤ SPARSE_ABOVE) score every commit and pair of commits."""
    if n <= SPARSE_ABOVE:
        edges = n
        hypotheses = len(RHO_GRID) * (n * (n - 1) // 2 + 1)
    else:
        edges = min(n, trials + 2 + EDGE_QUANTILES + EDGE_GRID + 1)
        hypotheses = len(RHO_GRID) * (edges * (edges - 1) // 2 + edges)
    return edges, hypotheses, hypotheses * SPARSE_BYTES_PER_HYPOTHESIS


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
    if post.sparse:
        # a long range's bins: (hypotheses × trials) in slices, so memory stays bounded whatever the budget
        fitted = np.zeros(ev.trials)
        for a in range(0, len(post.w), 4096):
            part = slice(a, a + 4096)
            seg = ((ev.commit[None, :] >= post.b1[part, None]).astype(int)
                   + (ev.commit[None, :] >= post.b2[part, None]).astype(int))
            fitted += post.w[part] @ np.take_along_axis(post.beta[part], seg, axis=1)
    else:
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


__all__ = ["EDGE_GRID", "EDGE_QUANTILES", "RHO_GRID", "RHO_PRIOR", "SIGMA_SCALES", "SPARSE_ABOVE", "outlier_scale", "posterior",
           "sparse_footprint"]
