"""`--format markdown`: the result of `run`, `compare` and `check` as a short Markdown summary, fit for a
CI job summary (`>> "$GITHUB_STEP_SUMMARY"`) or a pull-request comment.

Repository text (commit subjects, paths) is escaped: Markdown and HTML syntax in it is shown, never
rendered — a subject cannot open a link, an image, a table cell or an HTML tag. perfbisect's own prose
(explanations, which name shas and numbers, never subjects) escapes only what could start markup there
(``prose``), so a CI log reads "-41.1% (B vs A)", not "\\-41\\.1% \\(B vs A\\)". A report is named by its
file name, never as a link to a path on the machine that ran it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from .console import inert
from ..metrics import Metric, level_text, pct_text
from ..model import median

_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~=:&\"'])")


def md(text: Any) -> str:
    """Repository text as inert Markdown: one line, control characters shown, syntax escaped."""
    one = " ".join(inert(str(text)).split())
    return _SPECIAL.sub(r"\\\1", one)


# A "[" or "]" opens no link unless "](" or "][" follows: "[-19.2%, -8.7%]" stays as written.
_PROSE = re.compile(r"([\\`*<>|~&])|\](?=[(\[])|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


# A command perfbisect writes in its own sentences (`perfbisect report 3`): kept as a code span. One with
# a '|' in it is escaped as text instead (a pipe would end a table cell, even inside a code span).
_CODE_SPAN = re.compile(r"`([^`|]+)`")


def prose(text: Any) -> str:
    """perfbisect's own text as Markdown: one line; only link, emphasis, code, HTML and table syntax escaped,
    the commands it quotes in backticks kept as code spans (not shown as \\`…\\`)."""
    one = " ".join(inert(str(text)).split())
    out, at = [], 0
    for m in _CODE_SPAN.finditer(one):
        out.append(_PROSE.sub(lambda e: "\\" + e.group(0), one[at:m.start()]))
        out.append(m.group(0))
        at = m.end()
    out.append(_PROSE.sub(lambda e: "\\" + e.group(0), one[at:]))
    return "".join(out)


def plural(n: int, word: str) -> str:
    """"1 commit", "2 commits"."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def _interval(cmp: Any) -> str:
    """"98% [-27.3%, -23.1%]"."""
    if cmp is None:
        return "n/a"
    level = f"{level_text(cmp.level_pct)} " if getattr(cmp, "level_pct", None) is not None else ""
    return f"{level}[{_pct(cmp.ci_low_pct)}, {_pct(cmp.ci_high_pct)}]"


def _report(report: Path | None, where: str = "", command: str | None = None) -> str:
    """The report's file name (its folder is on the machine that ran it, not the reader's), where it is,
    and the command that writes it again (a code span)."""
    how = [prose(where)] if where else []
    if command:
        how.append(f"{code(command)} writes it again")
    said = f" ({'; '.join(how)})" if how else ""
    return f"| report | {code(Path(report).name)}{said} |"


def _metric(data: Any) -> str | None:
    metric = Metric.from_json(data)
    if metric is None:
        return None
    unit = f", {metric.unit}" if metric.unit else ""
    return f"| metric | {code(metric.name)} ({md(metric.label)}{prose(unit)}, {metric.direction}) |"


def code(text: Any) -> str:
    """A sha or path in a code span (backticks in it cannot close the span)."""
    one = " ".join(inert(str(text)).split()).replace("`", "'")
    return f"`{one}`"


def _pct(value: float | None) -> str:
    return pct_text(value)


_ICON = {"regressed": "🔴", "improved": "🟢", "same": "⚪", "inconclusive": "🟡", "error": "⚠️"}


def bisection_markdown(result: Any, report: Path | None, spent: dict | None) -> str:
    """A finished bisection (``app.bisection.BisectResult``)."""
    from .costs import format_duration
    from ..metrics import trials_text

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
    metric = _metric(getattr(result, "metric", None))
    if metric:
        lines.append(metric)
    cmp = out.culprit_comparison or out.endpoint_comparison
    lines.append(f"| effect | {_pct(out.effect_pct)} |")
    rp = out.regressed_path
    if rp is not None:
        lines.append(f"| which path | **{md(rp.path)}**: {md(rp.summary)} |")
        if rp.break_even_before is not None and rp.break_even_after is not None:
            lines.append(f"| break-even accept length | {rp.break_even_before:.2f} → {rp.break_even_after:.2f} |")
    lines.append(f"| interval | {_interval(cmp)} |")
    if spent is not None:
        lines.append(f"| trials | {trials_text(spent['trials'], out.trials_used)} |")
        lines.append(f"| spent | {format_duration(spent['wall_s'])} wall, "
                     f"{spent['gpu_hours']:.2f} {spent.get('hours_unit', 'GPU-hours')} |")
    else:
        lines.append(f"| trials | {plural(out.trials_used, 'observation')} used by the search |")
    if result.filtered:
        lines.append(f"| not measured | {plural(len(result.filtered), 'commit')} (only paths the filters ignore) |")
    if report is not None:
        lines.append(_report(report, "beside the results database", f"perfbisect report {ids}"))
    lines.append("")
    if out.explanation:
        lines.append(prose(out.explanation))
        lines.append("")
    return "\n".join(lines) + "\n"


def comparison_markdown(result: Any, report: Path | None) -> str:
    """`perfbisect compare A B` (``app.measuring.CompareResult``): A first, as given."""
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
        f"| effect (B vs A) | {_pct(cmp.effect_pct)} |",
        f"| interval | {_interval(cmp)} |",
        f"| trials | A {len(result.trials_a)}, B {len(result.trials_b)} |",
    ]
    metric = _metric(getattr(result, "metric", None))
    if metric:
        lines.insert(7, metric)
        m = Metric.from_json(result.metric)
        meds = [median(math.exp(t.summary) for t in ts if t.summary is not None) for ts in (result.trials_a, result.trials_b)]
        if m is not None and all(v is not None for v in meds):
            lines.append(f"| medians | A {prose(m.format(meds[0]))}, B {prose(m.format(meds[1]))} |")
    if report is not None:
        lines.append(_report(report, command=f"perfbisect report c{result.comparison_id}"))
    lines.append("")
    if cmp.explanation:
        lines += [prose(cmp.explanation), ""]
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
    elif result.get("culprit_is_set"):
        lines.append(f"| first bad commit | one of {', '.join(code(s[:10]) for s in result.get('culprit_set') or ())} |")
    if result.get("report"):
        lines.append(_report(result["report"], "beside the results database"))
    lines += ["", prose(line), ""]
    return "\n".join(lines) + "\n"
