"""`perfbisect log ID`: one stored bisection in detail — its question, trials per commit, verdict,
effect, what it spent and where its report is. Read from the results database only."""

from __future__ import annotations

import math
import time
from pathlib import Path

from ..engine.cost import hours_unit, spent
from ..layout import FIXED
from ..metrics import stored_or_described
from ..model import median
from .costs import format_duration, spent_line

# Layout ids listed per commit before the rest are counted: a commit measured ten times stays one line.
LAYOUTS_SHOWN = 6


def bisection_detail(store, bisection_id: int, report: Path | None, config=None) -> list[str]:
    """Lines of `perfbisect log ID`: values in the metric described with the bisection (or by ``config``)."""
    b = store.bisection(bisection_id)
    metric = stored_or_described(b.metric_info, config)
    trials = store.trials(bisection_id=bisection_id, status=None)
    by_commit: dict[str, list] = {}
    for t in trials:
        by_commit.setdefault(t.identity.commit, []).append(t)
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(b.started_at))
    out = b.outcome
    culprit_set = out.culprit_set if out is not None and out.culprit_is_set else ()
    lines = [
        f"bisection #{b.id}  {when}  {b.good[:10]}..{b.bad[:10]}  [{b.metric}]  {b.status}",
        f"target: {b.target}",
        f"metric: {metric.name} ({metric.label}{', ' + metric.unit if metric.unit else ''}, {metric.direction})",
        f"verdict: {b.verdict.value if b.verdict else 'not finished'}"
        + (f"  culprit {b.culprit[:10]}" if b.culprit else "")
        + (f"  culprit one of {', '.join(s[:10] for s in culprit_set)}" if culprit_set else "")
        + (f"  effect {out.effect_pct:+.1f}%" if out is not None and out.effect_pct is not None else ""),
        f"trials per commit ({len(b.commits)} candidates, {len(by_commit)} measured):",
    ]
    recorded = {t.layout for t in trials if t.layout is not None}
    per_trial_layouts = bool(recorded) and recorded != {FIXED}
    if recorded == {FIXED}:
        lines.insert(-1, f"layout: {FIXED.id} for every trial (fixed: [layout] randomize = false)")
    for i, sha in enumerate(b.commits):
        ts = by_commit.get(sha, [])
        if not ts:
            continue
        ok = [t for t in ts if t.summary is not None]
        level = median([math.exp(t.summary) for t in ok]) if ok else None
        what = "good endpoint" if i == 0 else "bad endpoint" if i == len(b.commits) - 1 else ""
        mark = ("  ← first bad commit" if b.culprit == sha else
                "  ← first bad commit is one of the set" if sha in culprit_set else "")
        failed = f", {len(ts) - len(ok)} not usable" if len(ts) > len(ok) else ""
        value = f"median {metric.format(level)}" if level is not None else "no value"
        envs = sorted({str((t.versions or {}).get("environment")) for t in ts if (t.versions or {}).get("environment")})
        env = f"  env {','.join(e[:10] for e in envs)}" if envs else ""  # [environment]: which one it ran in
        lines.append(f"  {sha[:10]}  {len(ts)} trial{'s' if len(ts) != 1 else ''}{failed}  {value}{env}  {what}{mark}".rstrip())
        if per_trial_layouts:
            lines.append(f"  {'':10}  {_layouts_text([t.layout.id for t in ts if t.layout is not None])}")
    warm = [t for t in trials if t.detected_warmup_runs]
    if warm:
        n = sum(len(t.detected_warmup_runs) for t in warm)
        lines.append(
            f"warm-up: {n} leading run{'s' if n != 1 else ''} in {len(warm)} trial{'s' if len(warm) != 1 else ''} "
            f"{'was' if n == 1 else 'were'} slower "
            f"than the later runs beyond their spread and counted as warm-up (workload.detect_warmup)"
        )
    if out is not None and out.explanation:
        lines.append(out.explanation)
    if trials:
        if config is not None:
            gpus, unit = hours_unit(config)
        else:  # no config: the hosts say whether the trials held GPUs ("8xH200-..." names them)
            gpus, unit = 1, ("GPU-hours" if any(t.identity.host[:1].isdigit() for t in trials) else "machine-hours")
        lines.append(spent_line(spent(trials, gpus, unit), out.trials_used if out is not None else None))
    if b.finished_at:
        lines.append(f"took {format_duration(b.finished_at - b.started_at)} from start to verdict")
    if report is not None and report.exists():
        lines.append(f"report: {report}")
    else:
        lines.append(f"report: not written yet — `perfbisect report {b.id}` writes it")
    if not b.finished:
        lines.append(f"resume it: perfbisect resume {b.id}")
    return lines


def _layouts_text(ids: list[str]) -> str:
    """"layouts s2-e1733-h40211 s0-e12-h9 … +4 more": each trial's layout, in the order they ran."""
    if not ids:
        return "layouts not recorded"
    more = f" … +{len(ids) - LAYOUTS_SHOWN} more" if len(ids) > LAYOUTS_SHOWN else ""
    return f"layout{'s' if len(ids) != 1 else ''} {' '.join(ids[:LAYOUTS_SHOWN])}{more}"
