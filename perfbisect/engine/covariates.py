"""System-state attribution: how trial summaries of identical builds track the state a trial recorded.

Each trial records the state of the machine it ran on (clocks, temperatures, power, utilisation, other
processes' load: measure/sysstate). ``attribute`` regresses the spread *within* builds on one such variable,
so a code change can never be explained away as a clock effect; ``covariate_notes`` is what the search and
the report read: summaries adjusted for exogenous state where the fit earns it (EXOGENOUS_COVARIATES — state
the code under test cannot cause — only, plausible in sign and stable), and a sentence for each state that
tracks the summaries, mediators (state the code itself moves) shown and never adjusted for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .stats import pct, t_cdf

_COVARIATE_WORDS = {
    "sm_clock_mean_mhz": "mean SM clock",
    "temperature_mean_c": "mean GPU temperature",
    "throttled_fraction": "throttled time",
    "power_mean_w": "mean power",
    "utilization_pct": "GPU utilisation",
    "clock_cap_mhz": "the external clock cap",
    "start_temperature_c": "the temperature the trial started at",
    "other_load": "the CPU load when the trial started",
}

# A state is fitted only when at least this many trials read other than its commonest value (round 8: a load
# average quantised to 0.01 "explained" the two last trials of an A/A range at p = 0.006).
COVARIATE_MIN_OFF_MODE = 3

_COVARIATE_UNITS = {
    "sm_clock_mean_mhz": " MHz", "clock_cap_mhz": " MHz", "temperature_mean_c": " °C", "start_temperature_c": " °C",
    "power_mean_w": " W", "utilization_pct": " points", "other_load": " of load average",
}


def _covariate_amount(x: float) -> str:
    """A state's spread, to the digits it needs (0.063, 4.2, 45)."""
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}" if x >= 1 else f"{x:.2g}"


# State the code under test cannot cause: it may adjust trial summaries across commits. The CPU
# load when a trial starts ("other_load") is the machine's: this trial's own load has not begun.
EXOGENOUS_COVARIATES = ("clock_cap_mhz", "start_temperature_c", "other_load")
# State the code itself moves (a slower kernel draws less power, heats less, reaches another
# clock): adjusting for it explains the code change away, so it is only ever shown.
MEDIATOR_COVARIATES = ("sm_clock_mean_mhz", "power_mean_w", "utilization_pct", "temperature_mean_c", "throttled_fraction")
# Which way each exogenous state slows code down (+1: more of it; −1: less of it), and how to say so. A fit whose
# slope says the slowing direction makes trials *faster* is not physics but a few sessions lining up (seven trials
# of a round-9 run: more load, faster; applied, the adjusted trials ruled out 4.8% at 1.4% noise): never applied.
EXOGENOUS_SLOWER = {"other_load": 1.0, "start_temperature_c": 1.0, "clock_cap_mhz": -1.0}
_SLOWER_WORDS = {"other_load": "more CPU load from other processes", "start_temperature_c": "a hotter start",
                 "clock_cap_mhz": "a lower clock cap"}


@dataclass(frozen=True)
class Attribution:
    """How trial summaries of identical builds track one recorded state variable."""

    covariate: str
    slope: float  # log-metric change per unit of the covariate
    r: float
    p_value: float
    n_trials: int
    dof: int
    sigma_before: float  # residual sd within builds, log scale
    sigma_after: float  # after regressing on the covariate (one more dof spent)
    reference: float  # covariate value the adjusted summaries are moved to (its mean)
    adjusted: bool
    sentence: str


def _within_slope(y: np.ndarray, x: np.ndarray, gid: np.ndarray) -> float | None:
    """Slope of the within-build regression of ``y`` on ``x`` (each build's means removed); None when x does not
    vary within builds."""
    counts = np.bincount(gid)
    safe = np.maximum(counts, 1)
    ry = y - (np.bincount(gid, y, minlength=len(counts)) / safe)[gid]
    rx = x - (np.bincount(gid, x, minlength=len(counts)) / safe)[gid]
    sxx = float((rx**2).sum())
    return float((rx * ry).sum()) / sxx if sxx > 0 else None


def _unstable_at(y: np.ndarray, x: np.ndarray, gid: np.ndarray, slope: float) -> int | None:
    """The first trial (index) whose leaving out turns the within-build slope's sign around (or leaves nothing
    to fit), else None: a fit one session carries is that session, not the state."""
    keep = np.ones(len(y), dtype=bool)
    for i in range(len(y)):
        keep[i] = False
        other = _within_slope(y[keep], x[keep], np.unique(gid[keep], return_inverse=True)[1])
        keep[i] = True
        if other is None or other * slope <= 0:
            return i
    return None


def attribute(
    summaries: Sequence[float],
    covariates: Sequence[Mapping[str, float]],
    build_ids: Sequence[object],
    alpha: float = 0.01,
    min_reduction: float = 0.2,
    keys: Sequence[str] | None = None,
    higher_is_better: bool | None = True,
) -> Attribution | None:
    """Regress within-build summary residuals on each recorded state variable; keep the best one.

    Only differences *inside* a build are used (each build's mean is removed from both the
    summary and the covariate), so a code change can never be explained away as a clock effect.
    It is marked ``adjusted`` only when the fit is significant at ``alpha``, lowers the residual
    variance by at least ``min_reduction`` after paying for its degree of freedom, is plausible in
    sign — an exogenous state's slowing direction (EXOGENOUS_SLOWER: more load, a hotter start, a lower
    clock cap) never makes trials faster (``higher_is_better`` says which way faster is; None: no sign
    check) — and is stable: its sign holds with any one trial left out.
    """
    y = np.asarray(summaries, dtype=float)
    n = len(y)
    if n < 4 or len(covariates) != n or len(build_ids) != n:
        return None
    common = sorted(set.intersection(*(set(c) for c in covariates))) if covariates else []
    keys = [k for k in common if keys is None or k in keys]
    if not keys:
        return None
    index: dict[object, int] = {}
    gid = np.asarray([index.setdefault(b, len(index)) for b in build_ids])
    counts = np.bincount(gid)
    groups = int((counts > 0).sum())
    dof_before = n - groups
    if dof_before < 3:
        return None
    ry = y - (np.bincount(gid, y) / counts)[gid]
    ss_before = float((ry**2).sum())
    best: Attribution | None = None
    for key in keys:
        x = np.asarray([float(c[key]) for c in covariates])
        cand = _fit_state(key, x, y, gid, counts, ry, ss_before, dof_before, alpha, min_reduction, higher_is_better)
        if cand is not None and (best is None or abs(cand.r) > abs(best.r)):
            best = cand
    return best


def _fit_state(key: str, x: np.ndarray, y: np.ndarray, gid: np.ndarray, counts: np.ndarray, ry: np.ndarray,
               ss_before: float, dof_before: int, alpha: float, min_reduction: float,
               higher_is_better: bool | None) -> Attribution | None:
    """``attribute``'s fit of one state variable ``key`` (its values ``x``) to the summaries ``y``, within builds
    (``gid``: each trial's build, ``counts`` the trials of each; ``ry``: the summaries' residuals around their
    build's mean, ``ss_before`` their squares over ``dof_before``): the Attribution with its sentence, or None when the state does not vary enough
    within builds to be fitted."""
    n = len(y)
    if n - int(np.unique(x, return_counts=True)[1].max()) < COVARIATE_MIN_OFF_MODE:
        # a state that sits at one value in all but a trial or two (a 1-minute load average read 3.68 in
        # eight trials and 3.70 in the last two) marks those trials, it does not vary: fitting it absorbs
        # whatever else happened in them and calls it the state's doing
        return None
    rx = x - (np.bincount(gid, x) / counts)[gid]
    sxx = float((rx**2).sum())
    if sxx <= 0 or ss_before <= 0:
        return None
    sxy = float((rx * ry).sum())
    slope = sxy / sxx
    r = sxy / math.sqrt(sxx * ss_before)
    dof_after = dof_before - 1
    ss_after = max(ss_before - slope * sxy, 0.0)
    s_after = math.sqrt(ss_after / dof_after)
    s_before = math.sqrt(ss_before / dof_before)
    se = s_after / math.sqrt(sxx) if s_after > 0 else 0.0
    p = 2.0 * t_cdf(-abs(slope / se), dof_after) if se > 0 else 0.0
    reduction = 1.0 - (s_after / s_before) ** 2
    adjusted = p < alpha and reduction >= min_reduction
    refused = None
    if adjusted and higher_is_better is not None and key in EXOGENOUS_SLOWER:
        plausible = -EXOGENOUS_SLOWER[key] if higher_is_better else EXOGENOUS_SLOWER[key]
        if slope * plausible < 0:
            refused = f"implausible: {_SLOWER_WORDS[key]} would make trials faster"
    if adjusted and refused is None:
        i = _unstable_at(y, x, gid, slope)
        if i is not None:
            refused = f"unstable: its sign turns with trial {i + 1} of {n} left out"
    adjusted = adjusted and refused is None
    xm = float(x.mean())
    word = _COVARIATE_WORDS.get(key, key)
    if "fraction" in key:
        eff, per = pct(slope * 0.1), "+10 points of it"
    else:
        # per the state's own spread between repeats of one build, in its unit: "per −10% of the mean"
        # extrapolated a load average that moved by 0.05 within builds to "+154% per −10%" (round 8)
        spread = math.sqrt(sxx / dof_before)
        eff = pct(slope * spread)
        per = f"+{_covariate_amount(spread)}{_COVARIATE_UNITS.get(key, '')} (its spread between repeats of one build)"
    tail = (
        "adjusted" if adjusted else f"not adjusted ({refused})" if refused else
        f"not adjusted ({'not significant' if p >= alpha else 'too little noise removed'})"
    )
    sentence = (
        f"trial summaries track {word}: {eff:+.1f}% per {per}, "
        f"r={r:.2f}, p={p:.2g}, within-build noise {pct(s_before):.1f}% → {pct(s_after):.1f}%; {tail}"
    )
    return Attribution(key, slope, r, p, n, dof_after, s_before, s_after, xm, adjusted, sentence)


def adjust(
    summaries: Sequence[float], covariates: Sequence[Mapping[str, float]], attribution: Attribution | None
) -> list[float]:
    """Summaries moved to the covariate's reference value, when the attribution earned it."""
    if attribution is None or not attribution.adjusted:
        return [float(v) for v in summaries]
    out = []
    for v, c in zip(summaries, covariates):
        x = c.get(attribution.covariate)
        out.append(float(v) if x is None else float(v) - attribution.slope * (float(x) - attribution.reference))
    return out


def covariate_notes(
    summaries: Sequence[float],
    covariates: Sequence[Mapping[str, float]],
    build_ids: Sequence[object],
    alpha: float = 0.01,
    min_rows: int = 6,
    higher_is_better: bool = True,
) -> tuple[list[float], list[str]]:
    """Summaries adjusted for exogenous state where the fit earns it, and what state they track.

    Only EXOGENOUS_COVARIATES may move a summary (fitted within builds, then applied across
    them), and only by a fit plausible in sign and stable (``attribute``); a fit that is neither is
    said, "not adjusted" with the reason. A mediator that tracks the summaries is reported with "not
    adjusted": the code change may be what moved it (measured: a −33.8% change reported as −60.3% when
    power was adjusted for).
    """
    values = [float(v) for v in summaries]
    rows = [i for i, c in enumerate(covariates) if c]
    notes: list[str] = []
    if len(rows) < min_rows:
        return values, notes
    ys = [values[i] for i in rows]
    cs = [covariates[i] for i in rows]
    bs = [build_ids[i] for i in rows]
    exo = attribute(ys, cs, bs, alpha=alpha, keys=EXOGENOUS_COVARIATES, higher_is_better=higher_is_better)
    if exo is not None and exo.p_value < alpha:
        notes.append(exo.sentence)
        if exo.adjusted:
            for i, v in zip(rows, adjust(ys, cs, exo)):
                values[i] = v
    med = attribute(ys, cs, bs, alpha=alpha, keys=MEDIATOR_COVARIATES, higher_is_better=None)
    if med is not None and med.p_value < alpha:
        word = _COVARIATE_WORDS.get(med.covariate, med.covariate)
        notes.append(
            f"trial summaries track {word} (r={med.r:.2f}, p={med.p_value:.2g}) — shown, not adjusted for: "
            f"the code under test can move {word} itself"
        )
    return values, notes


__all__ = ["COVARIATE_MIN_OFF_MODE", "EXOGENOUS_COVARIATES", "EXOGENOUS_SLOWER", "MEDIATOR_COVARIATES", "Attribution",
           "adjust", "attribute", "covariate_notes"]
