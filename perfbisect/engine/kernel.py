"""The statistical kernel: observations in, a change-point posterior out — pure functions, no decisions.

``regroup`` turns the stored observations into ``SearchData`` (usable trials by commit, their run order, nodes and
layouts; flagged trials left out and untestable commits set aside). ``fit`` is the posterior the search decides on
(docs/model.md, "The likelihood" and "The priors"): the change-point model of changepoint.py over "no change",
"one change at k" and "two changes", the levels, σ and the machine's drift integrated out, refitted once with wild
sessions down-weighted (``Fit.robust_min_trials``) and once more with each side of the best answer weighed by its
own spread of repeats when the sides spread differently beyond chance (``Fit.side_scale_alpha``). The gates
(gates.py) read the posterior; nothing here knows about budgets, checks or words.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np

from .change_posterior import ChangePosterior, Evidence
from .changepoint import RHO_GRID, RHO_PRIOR, outlier_scale, posterior
from .covariates import covariate_notes
from .observations import SearchData
from .stats import PRIOR_DOF_CAP, NoiseModel, log_of_pct, pooled_squares, variance_ratio_test
from ..errors import UsageError
from ..model import Observation


@dataclass(frozen=True)
class Fit:
    """The kernel's parameters: the noise prior, the model's priors and its robustness switches."""

    sigma0: float  # prior σ per trial (log), the noise model's
    dof0: float  # its pseudo-trials (capped at PRIOR_DOF_CAP)
    min_step: float  # the smallest step that counts as a change (log of stats.min_effect_pct)
    no_change_prior: float
    two_change_prior: float  # 0 for a range of two commits
    drift: bool  # stats.drift_check: drift integrated out, else trials i.i.d. given their commit
    host_ratio: float  # prior variance of a node's offset, in σ² units
    robust_min_trials: int  # trials before wild sessions are looked for
    side_scale_alpha: float  # the F test's level for "the sides spread differently" (0: one spread)
    side_scale_max: float  # the most one side's variance is scaled by

    @classmethod
    def of(cls, noise: NoiseModel, settings, tuning, n: int) -> "Fit":
        return cls(
            sigma0=noise.sigma_b, dof0=min(noise.dof, PRIOR_DOF_CAP), min_step=log_of_pct(settings.min_effect_pct),
            no_change_prior=tuning.no_change_prior, two_change_prior=tuning.two_change_prior if n >= 3 else 0.0,
            drift=settings.drift_check, host_ratio=(log_of_pct(tuning.host_offset_prior_pct) / noise.sigma_b) ** 2,
            robust_min_trials=tuning.robust_min_trials, side_scale_alpha=tuning.side_scale_alpha,
            side_scale_max=tuning.side_scale_max,
        )


def regroup(observations: Sequence[Observation], index: Mapping[str, int], *, alpha: float,
            higher_is_better: bool) -> SearchData:
    """The observations by commit index, in completion order (``seq``), flagged trials excluded (and said), a commit
    that failed once untestable with every value it had, and the exogenous state adjusted for where the data earn it
    (covariates.py)."""
    n = len(index)
    ordered = sorted(enumerate(observations), key=lambda io: (io[1].seq, io[0]))
    values: list[list[float]] = [[] for _ in range(n)]
    times: list[list[int]] = [[] for _ in range(n)]
    untestable: set[int] = set()
    excluded: list[str] = []
    rows = []
    for pos, (_, o) in enumerate(ordered):
        i = index.get(o.commit)
        if i is None:
            raise UsageError(
                f"Observation for commit {o.commit[:10]} which is not in this bisection's range. "
                f"Resume the bisection with the same good/bad revisions it was started with."
            )
        if o.value is None or not math.isfinite(o.value):
            untestable.add(i)
            continue
        if o.flag:
            excluded.append(f"{o.commit[:10]}: {o.flag}")
            continue
        rows.append((i, pos, float(o.value), o.covariates, o.host or "", o.layout))
    # A commit that failed once is untestable: its earlier values (if any) are kept out too, since a build that
    # sometimes fails is not one identity to compare.
    rows = [r for r in rows if r[0] not in untestable]
    adjusted, notes = covariate_notes(
        [r[2] for r in rows], [r[3] for r in rows], [r[0] for r in rows], alpha=alpha,
        higher_is_better=higher_is_better,
    )
    hosts: list[list[str]] = [[] for _ in range(n)]
    layouts: list[list[str | None]] = [[] for _ in range(n)]
    for (i, pos, _, _, h, lay), v in zip(rows, adjusted):
        values[i].append(v)
        times[i].append(pos)
        hosts[i].append(h)
        layouts[i].append(lay)
    return SearchData(values, times, untestable, len(rows), len(rows) + len(excluded), excluded, notes, hosts,
                      layouts=layouts)


def level_prior_ratio(data: SearchData, sigma0: float) -> float:
    """Prior variance of segment levels as a multiple of σ²: wide enough for the endpoints' gap."""
    a, b = data.values[0], data.values[-1]
    gap = abs(float(np.mean(b)) - float(np.mean(a))) if a and b else 0.0
    return max(4.0, 2.0 * (gap / sigma0) ** 2)


def fit(data: SearchData, params: Fit) -> ChangePosterior:
    """The change-point posterior, with wild sessions down-weighted once there are enough trials to see them, and
    each side of the best answer weighed by its own spread when the sides' spreads differ beyond chance."""
    ev = data.evidence(len(data.values))
    post = _fit(ev, data, params)
    scale = None
    if ev.trials >= params.robust_min_trials:
        scale = outlier_scale(post)
        if scale is not None:
            post = _fit(replace(ev, scale=scale), data, params)
    if params.side_scale_alpha > 0:
        side = _side_scale(data, ev, post, params)
        if side is not None:
            post = _fit(replace(ev, scale=side if scale is None else scale * side), data, params)
    return post


def side_spreads(data: SearchData, key, alpha: float) -> list[tuple[float, float] | None] | None:
    """Per segment of the answer ``key``, its repeat variance and dof (None: fewer than 2 dof), when the segments'
    repeat spreads differ beyond chance (two-sided F test of the noisiest against the quietest at ``alpha``); else
    None: one spread serves the whole range."""
    if not key:
        return None
    bounds = [0, *sorted(key), len(data.values)]
    var: list[tuple[float, float] | None] = []
    for a, b in zip(bounds, bounds[1:]):
        ss, dof = pooled_squares(data.values[a:b])
        var.append((ss / dof, dof) if dof >= 2 and ss > 0 else None)
    known = [v for v in var if v is not None]
    if len(known) < 2:
        return None
    hi, lo = max(known), min(known)
    if variance_ratio_test(math.sqrt(hi[0]), hi[1], math.sqrt(lo[0]), lo[1])[1] >= alpha:
        return None
    return var


def pure_error(data: SearchData) -> tuple[float, float]:
    """Pooled sd of trials of one build around their own commit's mean (log), and its dof: the noise as repeated
    trials show it, whatever the change hypothesis."""
    ss, dof = pooled_squares(data.values)
    return (math.sqrt(ss / dof) if dof else 0.0), float(dof)


def own_dof(post: ChangePosterior, data: SearchData) -> float:
    """Degrees of freedom of this bisection's own trials (the endpoints' two levels spent), at most the posterior's:
    what `same` and `improved` decide with, so a prior's pseudo-trials never count."""
    return min(post.dof, max(data.trials - 2.0, 1.0))


def _side_scale(data: SearchData, ev: Evidence, post: ChangePosterior, params: Fit) -> np.ndarray | None:
    """Per trial, its segment's repeat variance over the quietest segment's (under the best answer), when the
    segments' repeat spreads differ beyond chance (``side_spreads``); else None."""
    key, _ = post.answer()
    var = side_spreads(data, key, params.side_scale_alpha)
    if var is None:
        return None
    known = [v for v in var if v is not None]
    lo = min(known)
    pooled = sum(v * d for v, d in known) / sum(d for _, d in known)
    mult = np.array([(v[0] if v is not None else pooled) for v in var]) / lo[0]
    bounds = [0, *sorted(key), len(data.values)]
    seg = np.searchsorted(np.asarray(bounds[1:-1]), ev.commit, side="right")
    return np.clip(mult[seg], 1.0, params.side_scale_max)


def _fit(ev: Evidence, data: SearchData, params: Fit) -> ChangePosterior:
    return posterior(
        ev,
        sigma0=params.sigma0,
        dof0=params.dof0,
        level_ratio=level_prior_ratio(data, params.sigma0),
        min_step=params.min_step,
        no_change_prior=params.no_change_prior,
        two_change_prior=params.two_change_prior,
        rho_grid=RHO_GRID if params.drift else (0.0,),
        rho_prior=RHO_PRIOR if params.drift else (1.0,),
        host_ratio=params.host_ratio,
        extra_edges=tuple(sorted({i for i, _ in data.pending})),
    )


__all__ = ["Fit", "fit", "level_prior_ratio", "own_dof", "pure_error", "regroup", "side_spreads"]
