"""The report's sentences: the verdict in one sentence a colleague can repeat (``verdict_view``), an
inconclusive search's best answer, what a speculative culprit's path says, the note under the commit
table, and the metric's unit and wording they are written in.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..metrics import Metric, level_text, pct_text, readable, short_probability
from ..measure.build import NO_BUILD_STEPS_HASH
from ..model import BisectOutcome, Comparison, TrialResult, Verdict
from ..metrics import trials_text
from .words import settles
from ..engine.regressed_path import lines as regressed_path_lines


def metric_unit(metric: str, described: Metric) -> tuple[str, str]:
    """(unit, what it measures) of a bisection metric from its one description
    (``metrics.stored_or_described``); "" for a metric whose key states no unit."""
    if described.unit == "×":
        return "×", f"{described.label} ({described.direction})"
    if metric.startswith("ratio:"):
        return "×", f"{metric[6:]} ratio of {described.label} ({described.direction})"
    return described.unit, f"{metric} {described.label} ({described.direction})"


def fmt_value(v: float | None, unit: str, like: float | None = None) -> str:
    """A level in readable units ("45.2 ms", not "0.04518 s"; ``metrics.readable``); ``like``: the other
    level of a before → after pair, so both are written in one unit."""
    if v is None:
        return "?"
    if unit == "×":
        return f"{v:.3f}×"
    return readable(v, unit, like=like)


def builds_note(trials: Sequence[TrialResult], builds: int, reused: int) -> str:
    """The sentence under the commit table: what was built and what reused, or that nothing was built."""
    if trials and all(t.identity.build_hash in (NO_BUILD_STEPS_HASH, "none") for t in trials):
        return ("No build steps ([build] steps is empty): each trial ran its commit's checkout, patched, as it is; "
                "nothing was built or reused.")
    return (f"{plural(builds, 'distinct build')}; {plural(reused, 'trial')} reused a build an earlier trial had made "
            f"(same content hash).")


def plural(n: int, word: str) -> str:
    """"1 trial", "2 trials"."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def best_answer_text(best: Sequence[str]) -> str:
    """An inconclusive search's best answer: "no change", "abc", or "two changes, at a and at b" (one answer)."""
    if not best:
        return "no change"
    if len(best) == 1:
        return best[0][:10]
    return f"two changes, at {' and at '.join(s[:10] for s in best)}"


def verdict_view(out: BisectOutcome | None, status: str, commits: Mapping[str, dict], levels: dict[str, Any],
                 unit: str, what: str, trials: int, gpu_hours: float, gpu_label: str, alpha: float,
                 min_effect: float, total: int | None = None) -> dict[str, Any]:
    """The verdict in one sentence a colleague can repeat, plus its headline and class; ``trials``: the
    observations the search used, ``total``: every trial run (which-path, failed and re-run ones too)."""
    def name(sha: str) -> str:
        return f"{sha[:10]} “{commits.get(sha, {}).get('subject', '')}”" if commits.get(sha, {}).get("subject") else sha[:10]

    cost = f"{trials_text(total, trials) if total is not None else plural(trials, 'trial')}, {gpu_hours:.2f} {gpu_label}"
    level_pct = 100 * (1 - 2 * alpha)  # the bisection's own comparisons: one-sided 1 − alpha bounds

    def interval(cmp: Comparison) -> str:
        return (f"{level_text(cmp.level_pct if cmp.level_pct is not None else level_pct)} interval "
                f"[{pct_text(cmp.ci_low_pct)}, {pct_text(cmp.ci_high_pct)}]")
    if out is None:
        return {"cls": "inconclusive", "headline": "UNFINISHED",
                "sentence": f"This bisection has not finished ({status}); {cost} so far. Continue it with `perfbisect resume`."}
    before, after = levels.get("before"), levels.get("after")
    noise = f"noise {out.noise_sigma_pct:.1f}% per trial" if out.noise_sigma_pct else None
    if out.verdict is Verdict.REGRESSED and out.culprit:
        cmp = out.culprit_comparison or out.endpoint_comparison
        eff = out.effect_pct or 0.0
        delta = (after - before) if before is not None and after is not None else None
        absolute = (f" ({readable(delta, unit, sign=True)}: {fmt_value(before, unit)} → {fmt_value(after, unit, like=before)})"
                    if delta is not None else "")
        ci = f", {interval(cmp)}" if cmp else ""
        sigma = f" against {noise}" if noise else (f" against noise {cmp.sigma_b_pct:.1f}% per trial" if cmp else "")
        who = (name(out.culprit) if not out.culprit_is_set else
               f"{name(out.culprit)}, a merge of {len(out.culprit_set) - 1} commits (one of them or the merge itself)"
               if out.culprit_merge else
               f"One of {len(out.culprit_set)} commits ({', '.join(s[:10] for s in out.culprit_set)}; untestable "
               f"neighbours or a merged branch, so none is blamed alone)")
        sentence = f"{who} changed {what} by {pct_text(eff)}{absolute}{ci}{sigma}; {cost}."
        return {"cls": "regressed", "headline": "REGRESSION", "sentence": sentence}
    if out.verdict is Verdict.INCONCLUSIVE:
        best = best_answer_text(out.best_answer)
        prob = (f" (probability {short_probability(out.answer_probability)}, given that something changed)"
                if out.answer_probability is not None and out.best_answer else "")
        why = ("the trial budget ran out" if out.budget_exhausted else
               "stopped early: the rest of the budget could not have settled it" if (out.stopped_by or "").startswith("futility")
               else "the evidence did not settle it")
        bound = f" No regression ≥ {out.ruled_out_pct:.1f}% is ruled out." if out.ruled_out_pct is not None else ""
        per_trial = gpu_hours / trials if trials else 0.0
        stop = f" ({out.stopped_by})" if out.stopped_by else ""
        what = settles(out)
        if out.more_trials and trials and (out.tolerance_pct or not what.startswith("ruling")):
            on = "" if what.startswith("settling the check") else " of the endpoints"
            more = (f" {what[0].upper()}{what[1:]} would take about {out.more_trials} more trials{on} (about "
                    f"{out.more_trials * per_trial:.2f} {gpu_label}) "
                    + ("at the noise measured so far, the next trials differing by what the posterior expects."
                       if what.startswith("ruling") else "at the difference and noise measured so far."))
        else:
            more = (f" Each further trial costs about {per_trial:.3g} {gpu_label}; raise stats.max_trials_total "
                    f"or narrow the range.") if trials else ""
        layout = (f" Layout-sensitive, not blamed: {', '.join(name(x) for x in out.layout_sensitive)}."
                  if out.layout_sensitive else "")
        return {"cls": "inconclusive", "headline": "INCONCLUSIVE",
                "sentence": f"Inconclusive after {cost}: {why}{stop}. Best answer: {best}{prob}.{bound}{layout}{more}"}
    ends = out.endpoint_comparison
    eff = f" The endpoints differ by {pct_text(ends.effect_pct)} ({interval(ends)})" if ends else ""
    abs_part = f" ({fmt_value(levels.get('good'), unit)} → {fmt_value(levels.get('bad'), unit, like=levels.get('good'))})" if levels.get("good") else ""
    sigma = f", {noise}" if noise else ""
    if out.verdict is Verdict.IMPROVED:
        return {"cls": "improved", "headline": "NO REGRESSION (faster)",
                "sentence": f"No regression in {what}: the bad end is faster.{eff}{abs_part}{sigma}; {cost}."}
    ruled = f"No regression ≥ {out.ruled_out_pct:.1f}%" if out.ruled_out_pct is not None else f"No change ≥ {min_effect:g}%"
    if out.tolerance_pct and out.ruled_out_pct is not None:
        ruled += f" (one-sided, inside the {out.tolerance_pct:g}% tolerance)"
    return {"cls": "same", "headline": "NO REGRESSION beyond noise",
            "sentence": f"{ruled} in {what} between {out.good[:10]} and {out.bad[:10]}.{eff}{abs_part}{sigma}; {cost}."}


def which_path_view(rp: Any) -> dict[str, Any] | None:
    """What the report says of a speculative culprit: target model or speculative path, and which
    speculative-health columns moved between the parent and the culprit (highlighted there)."""
    if rp is None:
        return None
    return {"path": rp.path, "summary": rp.summary, "lines": regressed_path_lines(rp)[1:],
            "moved": list(rp.moved), "rows": [rp.before[:10], rp.after[:10]],
            "before": rp.before[:10], "after": rp.after[:10]}

