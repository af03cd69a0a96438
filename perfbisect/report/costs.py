"""What a bisection costs, in words: the engine's cost values (``engine.cost``) written as the lines `plan`,
`run`, `log` and the progress display print. The engine computes the numbers; every sentence about them is here,
so a change of wording is a change of this module only (issue #51). It imports the engine only where a function
needs its constants: `log` and the progress display stay free of numpy.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..metrics import trials_text

if TYPE_CHECKING:
    from ..engine.cost import Effect, Estimate, Forecast, SearchStatus, TrialTime


def format_duration(seconds: float | None) -> str:
    """A duration as the terminal shows it: "7s", "1m02s", "2h05m"; "?" when unknown."""
    if seconds is None:
        return "?"
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m:02d}m"
    if m:
        return f"{m}m{s:02d}s"
    return f"{s}s"


def eta_text(status: SearchStatus) -> str:
    """The best statement the numbers allow, in minutes (a trial's time varies more than seconds): "~4m" (the
    estimate, still ahead), "≥ 12m" (a floor: the trials the open check needs, or the estimate's rest in a phase
    that adds trials), "≤ 2h10m" (a ceiling: the budget left, where no floor reaches a minute), "< 1m"; "?" only
    before any trial's time is known."""
    if status.trial_s is None:
        return "?"
    lower = status.eta_is_lower_bound
    floors = [f for f in (status.eta_s if lower else None,
                          status.needs * status.trial_s if status.needs else None) if f is not None]
    if not lower and status.eta_s is not None:
        eta = max([status.eta_s, *floors])
        return "< 1m" if eta < 60 else "~" + _eta_duration(eta)
    floor = max(floors, default=0.0)
    if floor >= 60:
        return "≥ " + _eta_duration(floor, rounding=math.floor)  # a floor rounded down stays a floor
    ceiling = max(1, status.max_trials - status.trial + 1) * status.trial_s
    return "< 1m" if ceiling < 60 else "≤ " + _eta_duration(ceiling, rounding=math.ceil)  # a ceiling, up


def _eta_duration(seconds: float, rounding=round) -> str:
    """An ETA to the minute ("4m", "1h05m"): seconds would claim a precision no estimate of trials has. A floor is
    rounded down and a ceiling up (``rounding``), so neither claims more than it knows."""
    minutes = max(1, int(rounding(seconds / 60.0)))
    h, m = divmod(minutes, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m"


def _budget(status: SearchStatus) -> str:
    left = f"trial {status.trial} of at most {status.max_trials}"
    if status.untestable:
        left += f" (+{status.untestable} untestable, not counted)"
    return left


def _best(status: SearchStatus) -> str:
    """The likeliest answer: "no change" where it outweighs the best commit (whose p is given a change)."""
    if status.no_change_likeliest:
        return f"likeliest: no change p={status.p_none:.2f}"
    return f"best: {status.best} p={status.p:.2f}" if status.best and status.p is not None else ""


def _phase(status: SearchStatus) -> str:
    """The phase, what it checks and about how many trials that needs; why it stepped back, when it did."""
    text = status.phase + (" again" if status.again else "")  # why: the "back to …" progress line says
    if status.check:
        more = f", ~{status.needs} more trial{'s' if status.needs != 1 else ''}" if status.needs else ""
        text += f" ({status.check}{more})"
    return text


def search_status_line(status: SearchStatus) -> str:
    """Where a bisection stands, the progress line and heartbeat: "bisection #1: trial 5 of at most 120 (~9
    expected) · locating · abc1234567 · best: … p=0.91 · 2m10s elapsed · ETA ~4m"."""
    best = _best(status)
    best = f" · {best}" if best else ""
    expected = f" (~{status.expected} expected)" if status.ahead else ""
    return (
        f"bisection #{status.bisection_id}: {_budget(status)}{expected}"
        f" · {_phase(status)} · {status.commit}{best} · {format_duration(status.elapsed_s)} elapsed"
        f" · ETA {eta_text(status)}"
    )


def search_status_compact(status: SearchStatus) -> str:
    """The live line's short form, most telling first (a terminal of 80 columns cuts the tail)."""
    best = _best(status)
    best = f" · {best.replace(': ', ' ', 1)}" if best else ""
    of = f"~{status.expected}" if status.ahead else f"≤{status.max_trials}"
    phase = status.phase + (f" ~{status.needs} more" if status.check and status.needs else "")
    return (f"#{status.bisection_id} trial {status.trial}/{of} · {phase} · {status.commit} · "
            f"ETA {eta_text(status)} · {format_duration(status.elapsed_s)}{best}")


def forecast_method(f: Forecast) -> str:
    """How the trial count was made: "median of 11 simulated runs of the search" (at the range's length, or at
    fewer candidates plus the fitted growth), or the fitted formula when no simulation finished in time."""
    if not f.runs:
        from ..engine.cost import SEARCH_COEF, SEARCH_POWER

        return (f"fitted formula 2 + 2 + {SEARCH_COEF} × log2({f.candidates - 1})^{SEARCH_POWER} (no simulation "
                f"finished within {f.budget_s:g} CPU seconds)")
    if f.simulated_at == f.candidates:
        return f"median of {len(f.runs)} simulated runs of the search"
    return (f"median of {len(f.runs)} simulated runs of the search at {f.simulated_at} candidates, "
            f"+{f.extended_by:.1f} for the longer range by the fitted growth")


def effect_source(effect: Effect) -> str:
    """What says how big the simulated regression is: "given: --effect", "the endpoints' stored trials on this host:
    3 good, 3 bad, -21.4%", "assumed: 5 × stats.min_effect_pct; …"."""
    if effect.source == "given":
        return "given: --effect"
    if effect.source == "endpoints":
        return (f"the endpoints' stored trials on this host: {effect.good_trials} good, {effect.bad_trials} bad, "
                f"{effect.gap_pct:+.1f}%")
    if effect.source == "assumed":
        return f"assumed: {effect.factor:g} × stats.min_effect_pct; `plan --effect PCT` if you know it"
    return effect.source


def trial_time_source(timing: TrialTime) -> str:
    """Where a trial's time comes from: "median of 3 stored trials on this host", "[cost] trial_minutes", "unknown"."""
    if timing.source == "stored":
        n = timing.trials
        return f"median of {n} stored trial{'s' if n != 1 else ''} on this host"
    if timing.source == "configured":
        return "[cost] trial_minutes"
    return timing.source


def more_trials_line(cfg, timing: TrialTime, trials: int, what: str) -> str:
    """"settling … would take about N more trials at the noise measured so far: X of the machine, Y GPU-hours (…)":
    what an inconclusive answer would cost to settle (``trials`` steps of one trial per metric mode, at ``timing``)."""
    from ..engine.cost import hours_unit

    trial_s, source = timing.seconds, trial_time_source(timing)
    n = trials * len(cfg.metric_modes)
    head = f"{what} would take about {n} more trial{'s' if n != 1 else ''}"
    if trial_s is None:
        return head + " at the noise measured so far (set [cost] trial_minutes to see the time it costs)"
    hours = n * trial_s / 3600.0
    gpus, unit = hours_unit(cfg)
    per = f"; × {gpus} GPU{'s' if gpus != 1 else ''}, [cost] gpus" if unit == "GPU-hours" else ""
    return (f"{head} at the noise measured so far: {format_duration(n * trial_s)} of the machine, "
            f"{hours * gpus:.1f} {unit} ({format_duration(trial_s)} per trial, {source}{per})")


def spent_line(s: dict, used: int | None = None) -> str:
    """"spent: 17 trials (9 observations used by the search), 1m02s wall, 0.02 GPU-hours (…)": what ``engine.cost.spent``
    counted, its pauses said apart."""
    run = trials_text(s["trials"], used)
    unit = s.get("hours_unit", "GPU-hours")
    per = (f" (trial time × {s['gpus']} GPU{'s' if s['gpus'] != 1 else ''}, [cost] gpus)" if unit == "GPU-hours"
           else " (trial time)")
    return (
        f"spent: {run}, {format_duration(s['wall_s'])} wall, {s['gpu_hours']:.2f} {unit}{per}"
        + (f"; {format_duration(s['paused_s'])} paused, not counted" if s.get("paused_s") else "")
    )


def estimate_lines(est: Estimate) -> list[str]:
    """`plan`'s estimate and `run`'s budget question: trials, their range, wall time and hours, then how it was
    made (simulated or the formula, the regression and the noise it assumed) and what a range with no change costs."""
    lo, hi = est.span
    span = f" ({lo}–{hi} in 80% of simulated runs)" if hi > lo else ""
    head = f"estimate: ~{est.trials} trials{span}" + (f" × {est.modes} modes" if est.modes > 1 else "")
    head += f", at most {est.max_trials} (stats.max_trials_total)"
    if est.trial_s is None:
        head += "; time unknown: no trial stored on this host yet — set [cost] trial_minutes"
    else:
        wall = format_duration(est.wall_s)
        hours = f"{est.gpu_hours:.2f}"
        if hi > lo:
            wall += f" ({format_duration(est.wall(lo))}–{format_duration(est.wall(hi))})"
            hours += f" ({est.hours(lo):.2f}–{est.hours(hi):.2f})"
        per = (f" × {est.gpus} GPU" + ("s" if est.gpus != 1 else "")) if est.unit == "GPU-hours" else ""
        head += (
            f"; {wall} wall, {hours} {est.unit} (at most {est.max_gpu_hours:.2f}) at "
            f"{format_duration(est.trial_s)} per trial ({trial_time_source(est.timing)}){per}"
        )
    out = [head]
    f = est.forecast
    if f is not None and not f.runs:
        out.append(f"  how: {forecast_method(f)}; it counts candidates only, not the regression or the noise")
    elif f is not None:
        out.append(
            f"  how: {forecast_method(f)}, each a {f.effect_pct:.1f}% regression ({effect_source(f.effect)}) under "
            f"{f.noise_pct:.1f}% trial noise ({f.noise_source}); the cost grows as the regression nears the noise"
        )
    if f is not None and f.no_change is not None:
        n = f.no_change
        time_part = f", {format_duration(est.wall(n))} wall" if est.trial_s is not None else ""
        out.append(f"  if nothing changed: ~{n} trial{'s' if n != 1 else ''}{time_part} (the search ends on "
                   f"\"no regression\" once the endpoints rule it out)")
    return out


def estimate_json(est: Estimate) -> dict:
    """The estimate in `plan --json`: its numbers, and where each assumption comes from in the words the text uses."""
    f = est.forecast
    lo, hi = est.span
    return {
        "candidates": est.candidates, "trials": est.trials, "trials_low": lo, "trials_high": hi,
        "range": "10th-90th percentile of simulated runs",
        "max_trials": est.max_trials, "modes": est.modes, "trial_s": est.trial_s, "trial_s_source": trial_time_source(est.timing),
        "gpus": est.gpus, "hours_unit": est.unit, "wall_s": est.wall_s, "gpu_hours": est.gpu_hours,
        "max_gpu_hours": est.max_gpu_hours, "gpu_hours_low": est.hours(lo), "gpu_hours_high": est.hours(hi),
        "method": forecast_method(f) if f else "formula", "simulated_trials": list(f.runs) if f else [],
        "trials_if_no_change": f.no_change if f else None,
        "effect_pct": f.effect_pct if f else None, "effect_source": effect_source(f.effect) if f else None,
        "noise_pct": f.noise_pct if f else None, "noise_source": f.noise_source if f else None,
        "seconds_to_estimate": f.elapsed_s if f else None, "cpu_seconds_to_estimate": f.cpu_s if f else None,
    }
