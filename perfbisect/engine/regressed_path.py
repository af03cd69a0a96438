"""Which path a speculative mode's regression came from: the target model or the speculative path.

A bisection that decides on a speculative mode (``stats.metric = "eagle3"``) names the commit that
made EAGLE-3 slower, but not why. Speculative decode throughput is about accept length / verify-cycle
time, and the verify cycle runs the target model: so either the target model got slower (the
baseline, no speculation, loses as well) or the speculative path did (baseline unchanged; the accept
length fell or the verify cycle grew). ``app`` measures the other configured modes at the culprit and
its parent (``stats.mode_trials`` trials each); ``decide`` reads those trials and the bisection's own
trials of the speculative mode and says which, with the break-even accept length (baseline tok/s ×
verify-cycle time: the accept length at which speculation only just pays) before and after.

Pure: values in, a ``model.RegressedPath`` out; no store, no printing.
"""

from __future__ import annotations

import math
from typing import Sequence

from ..model import Comparison, ModeEffect, RegressedPath, TrialResult, Verdict, median
from ..settings import StatsConfig
from .stats import NoiseModel, compare, effect_and_se

# The two answers are two hypotheses about the baseline's change from the parent to the culprit:
# none (the speculative path regressed) or the speculative mode's own change (the target model did:
# it is what both modes run). One is named when the trials favour it by 1 / stats.alpha to one (a
# Bayes factor; 100:1 by default, both equally likely beforehand: 99%); otherwise the answer is
# "unclear", with what to measure. (20:1 named the wrong path 3% of the time at 8% noise:
# benchmarks/which_path.py.)
def path_odds(settings: StatsConfig) -> float:
    """The odds one path must have over the other to be named."""
    return 1.0 / settings.alpha

# The speculative-health columns (trial_tables.speculative_rows) a RegressedPath can mark as moved.
COLUMNS = ("spec_tok_s", "baseline_tok_s", "ratio", "accept_length", "break_even", "cycle_ms")


def _median_value(trials: Sequence[TrialResult]) -> float | None:
    logs = sorted(t.summary for t in trials if t.summary is not None)
    return math.exp(median(logs)) if logs else None


def _run_median(trials: Sequence[TrialResult], what: str) -> float | None:
    values = [getattr(r, what) for t in trials for r in t.usable_runs]
    return median([v for v in values if v])


def _moved(before: float | None, after: float | None, min_effect_pct: float) -> bool:
    if not before or not after:
        return False
    return abs(after / before - 1.0) * 100.0 >= min_effect_pct


def _num(value: float | None, fmt: str) -> str:
    return "n/a" if value is None or not math.isfinite(value) else format(value, fmt)


def decide(
    trials: Sequence[TrialResult],
    *,
    spec_mode: str,
    modes: Sequence[tuple[str, bool]],
    before: str,
    after: str,
    noise: NoiseModel,
    settings: StatsConfig,
    higher_is_better: bool = True,
    decode_tok_s: bool = True,
    measured: int = 0,
) -> RegressedPath:
    """Say which path regressed from OK trials at ``before`` (the parent) and ``after`` (the culprit).

    ``modes``: every configured mode as (name, speculative); the first non-speculative one other than
    ``spec_mode`` is the baseline. ``decode_tok_s``: the metric is decode tok/s, so baseline tok/s ×
    verify cycle is a break-even accept length (for another metric it is not computed).
    """
    at = {(sha, m): [t for t in trials if t.identity.commit == sha and t.identity.mode == m and t.summary is not None]
          for sha in (before, after) for m, _ in modes}
    effects = []
    for name, speculative in modes:
        a, b = at[(before, name)], at[(after, name)]
        cmp = compare([t.summary for t in a], [t.summary for t in b], noise, settings, higher_is_better) if a and b else None
        effects.append(ModeEffect(name, speculative, _median_value(a), _median_value(b), cmp))
    by_mode = {e.mode: e for e in effects}
    spec = by_mode.get(spec_mode)
    baseline = next((m for m, s in modes if not s and m != spec_mode), None)
    base = by_mode.get(baseline) if baseline else None

    spec_before, spec_after = at.get((before, spec_mode), []), at.get((after, spec_mode), [])
    accept = (_run_median(spec_before, "spec_accept_length"), _run_median(spec_after, "spec_accept_length"))
    cycle = (_run_median(spec_before, "cycle_time_ms"), _run_median(spec_after, "cycle_time_ms"))
    base_values = (base.before, base.after) if base else (None, None)
    break_even = tuple(
        (v * c / 1000.0) if decode_tok_s and v and c else None for v, c in zip(base_values, cycle)
    )
    ratio = tuple((s / v) if s and v else None for s, v in zip((spec.before, spec.after) if spec else (None, None), base_values))

    moved = []
    significant = (Verdict.REGRESSED, Verdict.IMPROVED)
    if spec and spec.comparison and spec.comparison.verdict in significant:
        moved.append("spec_tok_s")
    if base and base.comparison and base.comparison.verdict in significant:
        moved.append("baseline_tok_s")
    for column, pair in (("ratio", ratio), ("accept_length", accept), ("break_even", break_even), ("cycle_ms", cycle)):
        if _moved(*pair, settings.min_effect_pct):
            moved.append(column)

    odds = None
    if spec and base and spec.comparison and base.comparison:
        s_eff, s_se = effect_and_se([t.summary for t in spec_before], [t.summary for t in spec_after], noise)
        b_eff, b_se = effect_and_se([t.summary for t in at[(before, baseline)]], [t.summary for t in at[(after, baseline)]], noise)
        odds = log_odds_speculative(b_eff, b_se, s_eff, s_se)
    path, summary = _verdict(spec, base, spec_mode, baseline, accept, cycle, odds, path_odds(settings), before, after)
    return RegressedPath(
        path=path, summary=summary, mode=spec_mode, baseline=baseline, before=before, after=after,
        effects=tuple(effects), accept_before=accept[0], accept_after=accept[1],
        cycle_before_ms=cycle[0], cycle_after_ms=cycle[1],
        break_even_before=break_even[0], break_even_after=break_even[1],
        moved=tuple(c for c in COLUMNS if c in moved), trials=measured,
    )


def log_odds_speculative(b: float, b_se: float, s: float, s_se: float) -> float:
    """log Bayes factor of "the baseline did not change" over "it changed as the speculative mode did",
    from the baseline's change ``b`` and the speculative mode's ``s`` (log scale) with their standard
    errors: under the second, b − s has both errors; under the first, b has its own only."""
    if b_se <= 0:
        return math.inf if b == 0 else -math.inf
    var_target = b_se**2 + s_se**2
    return 0.5 * ((b - s) ** 2 / var_target - b**2 / b_se**2) + 0.5 * math.log(var_target / b_se**2)


def _verdict(spec: ModeEffect | None, base: ModeEffect | None, spec_mode: str, baseline: str | None,
             accept: tuple[float | None, float | None], cycle: tuple[float | None, float | None],
             odds: float | None, needed: float, before: str, after: str) -> tuple[str, str]:
    """("target" | "speculative" | "unclear", the sentence that says so)."""
    path_detail = (f"accept length {_num(accept[0], '.2f')} → {_num(accept[1], '.2f')}, "
                   f"verify cycle {_num(cycle[0], '.2f')} → {_num(cycle[1], '.2f')} ms")
    if spec is None or spec.comparison is None or not math.isfinite(spec.comparison.effect_pct):
        return "unclear", f"could not tell which path regressed: no trials of {spec_mode} at both {before[:10]} and {after[:10]}"
    if base is None:
        return "unclear", (f"could not tell which path regressed: no non-speculative mode is configured to compare "
                           f"{spec_mode} with (add [modes.baseline] without speculative arguments); {path_detail}")
    cmp: Comparison | None = base.comparison
    if cmp is None or not math.isfinite(cmp.effect_pct):
        return "unclear", f"could not tell which path regressed: {baseline} has no usable trials at both {before[:10]} and {after[:10]}"
    effect = f"{cmp.effect_pct:+.1f}%"
    interval = f"[{cmp.ci_low_pct:+.1f}%, {cmp.ci_high_pct:+.1f}%]"
    threshold = math.log(needed)
    if odds is not None and odds <= -threshold:
        return "target", f"target model regressed ({baseline} {effect} {interval}, {spec_mode} {spec.comparison.effect_pct:+.1f}%)"
    if odds is not None and odds >= threshold:
        unchanged = "unchanged" if cmp.verdict not in (Verdict.REGRESSED, Verdict.IMPROVED) else f"{effect}, far less"
        return "speculative", f"speculative path regressed ({baseline} {unchanged}; {path_detail})"
    return "unclear", (
        f"could not tell which path regressed: {baseline} {effect} {interval} over {cmp.n_a} vs {cmp.n_b} trials "
        f"against {spec.comparison.effect_pct:+.1f}% on {spec_mode}, neither favoured {needed:g}:1; {path_detail}; more trials: "
        f"perfbisect compare {before[:10]} {after[:10]} --mode {baseline}"
    )


def lines(rp: RegressedPath) -> list[str]:
    """Terminal lines: the sentence, break-even before and after, and each mode's change."""
    out = [f"which path: {rp.summary}"]
    if rp.break_even_before is not None and rp.break_even_after is not None:
        out.append(
            f"  break-even accept length {rp.break_even_before:.2f} → {rp.break_even_after:.2f} "
            f"(measured {_num(rp.accept_before, '.2f')} → {_num(rp.accept_after, '.2f')}; baseline tok/s × verify cycle)"
        )
    for e in rp.effects:
        if e.comparison is None or not math.isfinite(e.comparison.effect_pct):
            continue
        c = e.comparison
        out.append(
            f"  [{e.mode}] {rp.before[:10]} → {rp.after[:10]}: {c.effect_pct:+.1f}% "
            f"[{c.ci_low_pct:+.1f}%, {c.ci_high_pct:+.1f}%] ({c.n_a} vs {c.n_b} trials)"
        )
    return out
