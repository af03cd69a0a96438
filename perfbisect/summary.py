"""Turn a bisection's outcome into terminal lines and a JSON object (format_* returns, cli prints)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from .model import BisectOutcome, Comparison, Verdict


def _jsonable(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def comparison_line(label: str, cmp: Comparison | None) -> str | None:
    """One line: effect, interval, noise, trials, verdict."""
    if cmp is None:
        return None
    return (
        f"{label}: {cmp.effect_pct:+.1f}% [{cmp.ci_low_pct:+.1f}%, {cmp.ci_high_pct:+.1f}%] "
        f"({cmp.n_a} vs {cmp.n_b} trials, between-session noise {cmp.sigma_b_pct:.1f}%, "
        f"{cmp.sigma_source}) → {cmp.verdict.value}"
    )


def format_outcome(result: Any) -> list[str]:
    """Terminal lines for a finished bisection (``app.BisectResult``)."""
    out: BisectOutcome = result.outcome
    commits = result.commits
    lines = []

    def describe(sha: str) -> str:
        c = commits.get(sha)
        return f"{sha[:10]} {c.subject}" if c else sha[:10]

    head = {
        Verdict.REGRESSED: "REGRESSION",
        Verdict.IMPROVED: "IMPROVEMENT",
        Verdict.SAME: "NO CHANGE beyond noise",
        Verdict.INCONCLUSIVE: "INCONCLUSIVE",
        Verdict.SKIPPED: "UNTESTABLE",
    }[out.verdict]
    lines.append(f"{head}  ({out.good[:10]}..{out.bad[:10]}, bisection #{result.bisection_id})")
    if out.culprit:
        lines.append(f"first bad commit: {describe(out.culprit)}")
    if len(out.culprit_set) > 1:
        lines.append("culprit is one of (untestable neighbours or a merged branch):")
        lines.extend(f"  {describe(s)}" for s in out.culprit_set)
    for sha in out.extra_changes:
        lines.append(f"another change: {describe(sha)}")
    for line in (
        comparison_line("endpoints (bad vs good)", out.endpoint_comparison),
        comparison_line("culprit vs parent", out.culprit_comparison),
    ):
        if line:
            lines.append(line)
    if out.drift_note:
        lines.append(f"drift: {out.drift_note}")
    if out.skipped:
        lines.append(f"skipped (untestable, never blamed): {', '.join(s[:10] for s in out.skipped)}")
    if result.filtered:
        lines.append(f"not measured (only paths that cannot affect throughput): {len(result.filtered)} commits")
    if out.explanation:
        lines.append(out.explanation)
    lines.append(f"trials used: {out.trials_used}; results in {result.db_path}")
    return lines


def outcome_json(result: Any) -> dict[str, Any]:
    """The machine-readable result: verdict, culprit (full sha or null), effect_pct, db, evidence."""
    out: BisectOutcome = result.outcome
    data = _jsonable(out)
    culprit = result.commits.get(out.culprit) if out.culprit else None
    data.update(
        {
            "verdict": out.verdict.value,
            "culprit": out.culprit,
            "culprit_subject": culprit.subject if culprit else None,
            "effect_pct": out.effect_pct,
            "db": str(result.db_path),
            "bisection_id": result.bisection_id,
            "filtered": [c.sha for c in result.filtered],
        }
    )
    return data
