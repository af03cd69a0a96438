"""The one-step look-ahead: which commit's next trial is expected to tell the most about the answer.

Pure numpy over a ``change_posterior.ChangePosterior`` (no I/O, no state): for each candidate commit, the
posterior's predictive distribution of one more trial (drift included) is laid on a grid; the
expected entropy of the answer after that trial, subtracted from its entropy now, is the trial's
expected information gain. ``bisect.SearchPolicy`` measures the commit with the largest gain.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from .change_posterior import ChangePosterior

# Hypotheses kept for the look-ahead once sorted by posterior mass (the rest hold < 1e-6 of it).
MAX_HYPOTHESES = 160
# Points over which a candidate's next trial is integrated, on its own span (_grid). Between the modes of
# an unmeasured commit's predictive (before or after a change) the answer's posterior turns over within
# a fraction of σ: at 32 points its gains were off by up to 0.3 bit, at 128 by < 0.05 (against 512).
LOOKAHEAD_GRID = 128
# Joint outcomes of the pending trials over which a batch member's gain is averaged, and their
# fixed standard normal draws (up to 16 pending trials; more draw from a seeded generator).
PENDING_SAMPLES = 16
PENDING_HYPOTHESES = 96
_PENDING_Z = np.random.default_rng(20261201).standard_normal((PENDING_SAMPLES, 16))
# Floats one block of a batch member's answer-given-outcome table may hold (8 MiB each array): at 128 grid
# points a long range's table (16 samples × 96 answers × 256 candidates × 128) would be 400 MB at once.
CHUNK_FLOATS = 1 << 20


def best_trial(post: ChangePosterior, candidates: Sequence[int], t_new: float, host: int | None = None,
               pending: Sequence[tuple[int, float, int | None]] = (),
               groups: "Callable[[ChangePosterior, np.ndarray], list[np.ndarray]] | None" = None) -> tuple[int, float]:
    """The candidate commit whose trial at run-order position ``t_new`` removes the most uncertainty.

    Returns (commit index, expected gain in bits). ``candidates`` must not be empty. ``host``: the
    node the trial runs on, when host offsets are modelled. ``pending``: trials already started
    whose results are not in yet, as (commit index, run-order position, host); the gain is then the
    one *given* their results, averaged over their joint predictive (``conditional_gain``), so a
    batch does not spend two nodes on what one of them will already tell. ``groups``: what the gain is
    information about (``answer_groups``, the default), for a variant look-ahead to replace.
    """
    order = np.argsort(-post.w, kind="stable")
    csum = np.cumsum(post.w[order])
    keep = order[: max(1, min(MAX_HYPOTHESES, int(np.searchsorted(csum, 1 - 1e-6)) + 1))]
    w = post.w[keep] / post.w[keep].sum()
    J = np.asarray(candidates)
    # Every candidate is scored, settled ones too: re-measuring a commit whose segment is certain pins
    # that segment's level (or the drift), which is what makes the uncertain commits' trials decisive.
    loc, scale = post.predict(keep, J, t_new, host) if host is not None else post.predict(keep, J, t_new)
    onehots = (groups or answer_groups)(post, keep)
    if pending:
        # the hypotheses holding all but 1e-4 of the mass (at most PENDING_HYPOTHESES) carry it
        few = max(1, min(PENDING_HYPOTHESES, int(np.searchsorted(np.cumsum(w), 1 - 1e-4)) + 1, len(keep)))
        wf = w[:few] / w[:few].sum()
        gain = conditional_gain(post, keep[:few], wf, loc[:few], scale[:few], [oh[:few] for oh in onehots], pending)
        best = int(np.argmax(gain))
        return int(J[best]), float(gain[best] / math.log(2))
    gain = _gain(post.dof, w, loc, scale, onehots)
    best = int(np.argmax(gain))
    return int(J[best]), float(gain[best] / math.log(2))


def _gain(nu: float, w: np.ndarray, loc: np.ndarray, scale: np.ndarray, onehots: list[np.ndarray]) -> np.ndarray:
    """Expected information gain (nats) of one trial of each candidate: H(answer) − E_y H(answer | y).

    With A_k(y) = Σ_{h in answer k} w_h f_h(y) and m(y) = Σ_k A_k(y), E_y H(answer | y) on the grid is
    Σ_y [m log m − Σ_k A_k log A_k] / Σ_y m: each answer's mass is a sum of its hypotheses' rows, not an
    einsum over a (H, J, G) posterior, and no per-point posterior is divided out.
    """
    H, Jn = loc.shape
    G = LOOKAHEAD_GRID
    wf = _grid_density(nu, loc, scale).reshape(H, Jn * G)
    wf *= w[:, None]
    marg = None
    ent = np.zeros(Jn * G)
    for oh in onehots:
        a = _group_sums(wf, oh)  # (answers, J·G)
        if marg is None:
            marg = a.sum(axis=0)
            mlogm = marg * np.log(np.maximum(marg, 1e-300))
        ent += mlogm - (a * np.log(np.maximum(a, 1e-300))).sum(axis=0)
    m = marg.reshape(Jn, G)
    expected = ent.reshape(Jn, G).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-300)
    return float(_entropy(w, onehots)) - expected


def _grid(loc: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The outcomes (J, LOOKAHEAD_GRID) over which each candidate's next trial is integrated: its own span
    (±4.5 predictive scales around every hypothesis' mean for *that* commit). One grid shared by all
    candidates spanned the whole range's levels, so a commit whose hypotheses disagree by less than its
    spacing was integrated on a handful of points: gains off by up to 0.3 bit, negative ones among them, and a
    well-measured commit re-measured for its spurious gain (S1 seed 74: one commit 18 times running)."""
    lo = (loc - 4.5 * scale).min(axis=0)
    hi = (loc + 4.5 * scale).max(axis=0)
    return lo[:, None] + (hi - lo)[:, None] * np.linspace(0.0, 1.0, LOOKAHEAD_GRID)[None, :]


def _group_sums(x: np.ndarray, onehot: np.ndarray) -> np.ndarray:
    """onehot.T @ x (answers × columns), one row added at a time: at most MAX_HYPOTHESES rows, faster than
    a segment sum, and no BLAS call, whose threads would oversubscribe the cores beside parallel benchmark
    workers or test processes (measured: twice the CPU for the same answers)."""
    out = np.zeros((onehot.shape[1], x.shape[1]))
    for h, k in enumerate(onehot.argmax(axis=1).tolist()):
        out[k] += x[h]
    return out


def _grid_density(nu: float, loc: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """exp(_t_logpdf) on each candidate's _grid, (H, J, G), up to one common factor; computed in place
    (the (H, J, G) block is the look-ahead's largest: ~1.3 M points on a 64-commit range)."""
    y = _grid(loc, scale)
    z = y[None, :, :] - loc[:, :, None]
    z /= scale[:, :, None]
    np.square(z, out=z)
    z /= nu
    np.log1p(z, out=z)
    z *= -0.5 * (nu + 1.0)
    z -= np.log(scale)[:, :, None]
    z -= z.max()
    return np.exp(z, out=z)


def _t_logpdf(y: np.ndarray, loc: np.ndarray, scale: np.ndarray, nu: float) -> np.ndarray:
    z = (y - loc) / scale
    return -0.5 * (nu + 1.0) * np.log1p(z * z / nu) - np.log(scale)


def _entropy(w: np.ndarray, onehots: list[np.ndarray]) -> np.ndarray:
    """Answer entropy (nats) of each row of hypothesis weights ``w`` (…, H)."""
    out = np.zeros(w.shape[:-1])
    for oh in onehots:
        pg = w @ oh
        out += -(pg * np.log(np.maximum(pg, 1e-300))).sum(axis=-1)
    return out


def conditional_gain(post: ChangePosterior, keep: np.ndarray, w: np.ndarray, loc: np.ndarray, scale: np.ndarray,
                     onehots: list[np.ndarray], pending: Sequence[tuple[int, float, int | None]]) -> np.ndarray:
    """Expected gain (nats) of one more trial of each candidate given the pending trials' results.

    I(answer; y | y_pending), averaged over PENDING_SAMPLES joint outcomes of the pending trials:
    a hypothesis is drawn by stratified quantiles of ``w`` and each pending trial's value from its
    predictive under it (fixed standard normal draws: the result is a pure function of the
    posterior and the pending list). Given the hypothesis, trials are taken as independent.
    """
    nu = post.dof
    S = PENDING_SAMPLES
    H = len(keep)
    # each pending trial's predictive under every kept hypothesis: (H, P)
    ploc = np.zeros((H, len(pending)))
    pscale = np.ones((H, len(pending)))
    for p, (c, t, h) in enumerate(pending):
        lc, sc = post.predict(keep, np.asarray([c]), t, h) if h is not None else post.predict(keep, np.asarray([c]), t)
        ploc[:, p], pscale[:, p] = lc[:, 0], sc[:, 0]
    cw = np.cumsum(w)
    hs = np.minimum(np.searchsorted(cw, (np.arange(S) + 0.5) / S * cw[-1]), H - 1)
    z = _PENDING_Z[:S, : len(pending)] if len(pending) <= _PENDING_Z.shape[1] else np.random.default_rng(0).standard_normal((S, len(pending)))
    ys = ploc[hs] + pscale[hs] * z  # (S, P)
    lw = np.log(np.maximum(w, 1e-300))[None, :] + _t_logpdf(ys[:, None, :], ploc[None], pscale[None], nu).sum(axis=2)
    lw -= lw.max(axis=1, keepdims=True)
    ws = np.exp(lw)
    ws /= ws.sum(axis=1, keepdims=True)  # (S, H): the posterior after each sampled pending outcome
    h0 = _entropy(ws, onehots)  # (S,)
    G = LOOKAHEAD_GRID
    f = _grid_density(nu, loc, scale)  # (H, J, G)
    Jn = loc.shape[1]
    fm = f.reshape(H, Jn * G)
    marg = ws @ fm  # (S, J·G): each sample's predictive of the candidate trial, unnormalised
    inv = 1.0 / np.maximum(marg, 1e-300)
    ent = np.zeros((S, Jn * G))
    for oh in onehots:
        K = oh.shape[1]
        # a few samples at a time: (samples × answers) × (candidates × grid) is what takes memory
        step = max(1, int(CHUNK_FLOATS // max(1, K * Jn * G)))
        for a in range(0, S, step):
            b = min(S, a + step)
            num = ((ws[a:b, :, None] * oh[None]).transpose(0, 2, 1).reshape((b - a) * K, H) @ fm).reshape(b - a, K, Jn * G)
            pg = num * inv[a:b, None, :]
            ent[a:b] += -(pg * np.log(np.maximum(pg, 1e-300))).sum(axis=1)
    py = marg.reshape(S, Jn, G)
    py = py / np.maximum(py.sum(axis=2, keepdims=True), 1e-300)
    gain = (h0[:, None] - (py * ent.reshape(S, Jn, G)).sum(axis=2)).sum(axis=0)
    return gain / S


def answer_groups(post: ChangePosterior, keep: np.ndarray) -> list[np.ndarray]:
    """One-hot maps (kept hypotheses × answers) whose entropies sum to the answer's uncertainty.

    While one change is likelier than two, the answer is "where is the first change" and "how many
    changes" apart; once two are likelier, it is the pair itself.
    """
    keys = [post.keys[i] for i in keep.tolist()]
    if post.p_two < post.p_one:
        labels = [[k[0] if k else -1 for k in keys], [len(k) for k in keys]]
    else:
        labels = [keys]
    out = []
    for lab in labels:
        ids: dict = {}
        col = np.array([ids.setdefault(x, len(ids)) for x in lab])
        oh = np.zeros((len(lab), len(ids)))
        oh[np.arange(len(lab)), col] = 1.0
        out.append(oh)
    return out


__all__ = ["LOOKAHEAD_GRID", "MAX_HYPOTHESES", "PENDING_SAMPLES", "answer_groups", "best_trial", "conditional_gain"]
