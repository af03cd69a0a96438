"""`--format markdown`: the result of `run`, `compare` and `check` as a short Markdown summary, fit for a
CI job summary (`>> "$GITHUB_STEP_SUMMARY"`) or a pull-request comment.

Repository text (commit subjects, paths, explanations) is escaped: Markdown and HTML syntax in it is
shown, never rendered — a subject cannot open a link, an image, a table cell or an HTML tag.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .console import inert

_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~=:&\"'])")


def md(text: Any) -> str:
    """Repository text as inert Markdown: one line, control characters shown, syntax escaped."""
    one = " ".join(inert(str(text)).split())
    return _SPECIAL.sub(r"\\\1", one)


def code(text: Any) -> str:
    """A sha or path in a code span (backticks in it cannot close the span)."""
    one = " ".join(inert(str(text)).split()).replace("`", "'")
    return f"`{one}`"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1f}%"


_ICON = {"regressed": "🔴", "improved": "🟢", "same": "⚪", "inconclusive": "🟡", "error": "⚠️"}


def bisection_markdown(result: Any, report: Path | None, spent: dict | None) -> str:
    """A finished bisection (``app.BisectResult``)."""
    from .cost import format_duration

    out = result.outcome
    verdict = out.verdict.value
    ids = result.bisection_id
    commits = result.commits
    lines = [f"### {_ICON.get(verdict, '')} perfbisect: {verdict.upper()} (bisection #{ids})", ""]
    lines.append("| | |")
    lines.append("| --- | --- |")
    if out.named_culprit:
        c = commits.get(out.named_culprit)
        subject = md(c.subject) if c else ""
        lines.append(f"| first bad commit | {code(out.named_culprit[:10])} {subject} |")
    elif out.culprit_is_set:
        lines.append(f"| first bad commit | one of {', '.join(code(s[:10]) for s in out.culprit_set[:20])} "
                     f"(untestable neighbours or a merged branch) |")
    lines.append(f"| effect | {_pct(out.effect_pct)} |")
    lines.append(f"| trials | {out.trials_used} |")
    if spent is not None:
        lines.append(f"| spent | {format_duration(spent['wall_s'])} wall, {spent['gpu_hours']:.2f} "
                     f"{spent.get('hours_unit', 'GPU-hours')} |")
    if result.filtered:
        lines.append(f"| not measured | {len(result.filtered)} commits (only paths the filters ignore) |")
    if report is not None:
        lines.append(f"| report | {code(report)} |")
    lines.append("")
    if out.explanation:
        lines.append(md(out.explanation))
        lines.append("")
    return "\n".join(lines) + "\n"


def comparison_markdown(result: Any, report: Path | None) -> str:
    """`perfbisect compare A B` (``app.CompareResult``): A first, as given."""
    cmp = result.comparison
    verdict = cmp.verdict.value
    lines = [
        f"### {_ICON.get(verdict, '')} perfbisect compare: {verdict.upper()}",
        "",
        "| | |",
        "| --- | --- |",
        f"| A | {code(result.a.short)} {md(result.a.subject)} |",
        f"| B | {code(result.b.short)} {md(result.b.subject)} |",
        f"| mode | {code(result.mode)} |",
        f"| effect (B vs A) | {_pct(cmp.effect_pct)} [{_pct(cmp.ci_low_pct)}, {_pct(cmp.ci_high_pct)}] |",
        f"| trials | {len(result.trials_a)} + {len(result.trials_b)} |",
    ]
    if report is not None:
        lines.append(f"| report | {code(report)} |")
    lines.append("")
    if cmp.explanation:
        lines += [md(cmp.explanation), ""]
    return "\n".join(lines) + "\n"


def check_markdown(result: dict, line: str) -> str:
    """`perfbisect check OLD NEW` (``check.run_check``'s dict)."""
    verdict = str(result.get("verdict"))
    lines = [
        f"### {_ICON.get(verdict, '')} perfbisect check: {verdict.upper()}",
        "",
        "| | |",
        "| --- | --- |",
        f"| range | {code(str(result.get('old', ''))[:10])}..{code(str(result.get('new', ''))[:10])} |",
    ]
    for mode, c in (result.get("comparisons") or {}).items():
        lines.append(
            f"| {md(mode)} | {md(c['verdict'])} {_pct(c.get('effect_pct'))} "
            f"[{_pct(c.get('ci_low_pct'))}, {_pct(c.get('ci_high_pct'))}] |"
        )
    if result.get("culprit"):
        lines.append(f"| first bad commit | {code(result['culprit'][:10])} {md(result.get('culprit_subject') or '')} |")
    if result.get("report"):
        lines.append(f"| report | {code(result['report'])} |")
    lines += ["", md(line), ""]
    return "\n".join(lines) + "\n"
