"""The one-step look-ahead: which commit's next trial is expected to tell the most about the answer.

Pure numpy over a ``changepoint.ChangePosterior`` (no I/O, no state): for each candidate commit, the
posterior's predictive distribution of one more trial (drift included) is laid on a grid; the
expected entropy of the answer after that trial, subtracted from its entropy now, is the trial's
expected information gain. ``bisect.SearchPolicy`` measures the commit with the largest gain.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .changepoint import ChangePosterior

# Hypotheses kept for the look-ahead once sorted by posterior mass (the rest hold < 1e-6 of it).
MAX_HYPOTHESES = 160
LOOKAHEAD_GRID = 32


def best_trial(post: ChangePosterior, candidates: Sequence[int], t_new: float) -> tuple[int, float]:
    """The candidate commit whose trial at run-order position ``t_new`` removes the most uncertainty.

    Returns (commit index, expected gain in bits). ``candidates`` must not be empty.
    """
    order = np.argsort(-post.w, kind="stable")
    csum = np.cumsum(post.w[order])
    keep = order[: max(1, min(MAX_HYPOTHESES, int(np.searchsorted(csum, 1 - 1e-6)) + 1))]
    w = post.w[keep] / post.w[keep].sum()
    J = np.asarray(candidates)
    b1, b2 = post.b1[keep], post.b2[keep]
    seg = (J[None, :] >= b1[:, None]).astype(int) + (J[None, :] >= b2[:, None]).astype(int)
    # Only commits whose segment is still uncertain can move the posterior much — unless the
    # machine drifts, when re-measuring a settled commit next to the others pays too.
    purity = np.max(np.stack([(w[:, None] * (seg == i)).sum(axis=0) for i in range(3)]), axis=0)
    drifting = post.rho_weights[0] < 0.5 if post.rho_weights else False
    varies = purity < 0.995
    if varies.any() and not drifting:
        J = J[varies]
    loc, scale = post.predict(keep, J, t_new)
    nu = post.dof
    lo_y = float((loc - 4.5 * scale).min())
    hi_y = float((loc + 4.5 * scale).max())
    y = np.linspace(lo_y, hi_y, LOOKAHEAD_GRID)
    z = (y[None, None, :] - loc[:, :, None]) / scale[:, :, None]
    logf = -0.5 * (nu + 1.0) * np.log1p(z * z / nu) - np.log(scale)[:, :, None]
    f = np.exp(logf - logf.max())
    joint = w[:, None, None] * f  # (H, J, G)
    marg = joint.sum(axis=0)  # (J, G)
    postw = joint / np.maximum(marg[None], 1e-300)
    onehots = answer_groups(post, keep)
    ent = np.zeros(postw.shape[1:])
    for oh in onehots:
        pg = np.einsum("hk,hjy->kjy", oh, postw)
        ent += -(pg * np.log(np.maximum(pg, 1e-300))).sum(axis=0)
    py = marg / marg.sum(axis=1, keepdims=True)
    expected = (py * ent).sum(axis=1)
    h0 = 0.0
    for oh in onehots:
        wg = w @ oh
        h0 += float(-(wg * np.log(np.maximum(wg, 1e-300))).sum())
    gain = h0 - expected
    best = int(np.argmax(gain))
    return int(J[best]), float(gain[best] / math.log(2))


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


__all__ = ["LOOKAHEAD_GRID", "MAX_HYPOTHESES", "answer_groups", "best_trial"]
