"""The report of a set of trials rather than a search: a comparison (A vs B, ``comparison_view``) or a
calibration (N sessions each of two builds, interleaved: ``trials_view``), as plain JSON-able values.

Read from the results database and from what the target repository says of the two commits
(``model.RepoFacts``, gathered by the use case: the report itself never runs git).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..metrics import DECODE, Metric, describe_workload, stored_or_described
from ..errors import UsageError
from ..model import Comparison, RepoFacts, TrialResult, median
from .trial_tables import environment, failures, iso_time, layouts, placements, speculative_rows, state_samples, trial_point
from .verdict_text import builds_note, fmt_value, metric_unit
from ..metrics import trials_text
from .view_rows import comparison_row, commit_row, gpu_hours_of, serves


def trials_view(store: Any, title: str, kind: str, trials: Sequence[TrialResult], *, comparison: Comparison | None = None,
                a: str | None = None, b: str | None = None, lines: Sequence[str] = (), config: Any = None,
                record_id: int | None = None, reproduce: Sequence[str] = (), db_path: Path | None = None,
                metric: Metric | None = None, facts: RepoFacts | None = None) -> dict[str, Any]:
    """The report of a comparison (A vs B) or a calibration (N sessions each of two builds, interleaved);
    ``metric``: the description stored with it (default: what ``config`` describes); ``facts``: what the
    target repository says of the commits (``git.commit_facts.commit_facts``; none: subjects unknown)."""
    shas = list(dict.fromkeys([s for s in (a, b) if s] + [t.identity.commit for t in trials]))
    info = (facts or RepoFacts()).commits
    points = [trial_point(t, info, {}) for t in trials]
    for p in points:
        p["side"] = "A" if p["sha"] == a else "B" if p["sha"] == b else "between"
    gpu_hours, gpu_label = gpu_hours_of(trials)
    mode = trials[0].identity.mode if trials else ""
    workload = getattr(config, "workload", None)  # one mode: its own unit, never a ratio of two
    described = metric or (describe_workload(workload) if workload is not None else DECODE)
    unit, what = metric_unit(mode, described)
    if comparison is not None:
        va = median(p["value"] for p in points if p["sha"] == a)
        vb = median(p["value"] for p in points if p["sha"] == b)
        absolute = f" ({fmt_value(va, unit)} → {fmt_value(vb, unit, like=va)})" if va and vb else ""
        cls = comparison.verdict.value
        sentence = (
            f"{(b or '')[:10]} vs {(a or '')[:10]}: {what} {comparison.effect_pct:+.1f}%{absolute}, interval "
            f"[{comparison.ci_low_pct:+.1f}%, {comparison.ci_high_pct:+.1f}%] against noise {comparison.sigma_b_pct:.1f}% "
            f"per trial ({comparison.sigma_source}); {comparison.n_a}+{comparison.n_b} trials, {gpu_hours:.2f} {gpu_label}."
        )
        verdict = {"cls": cls if cls in ("regressed", "improved", "same") else "inconclusive",
                   "headline": comparison.verdict.value.upper(), "sentence": sentence}
    else:
        verdict = {"cls": "same", "headline": "NOISE CALIBRATION",
                   "sentence": (lines[0] if lines else f"{len(trials)} trials") + f"; {len(trials)} trials, {gpu_hours:.2f} {gpu_label}."}
    order = [s[:10] for s in shas]
    return {
        "kind": kind, "id": record_id, "title": title, "trials_text": trials_text(len(trials)), "good": a, "bad": b,
        "started": iso_time(min((t.started_at for t in trials), default=None)),
        "finished": iso_time(max((t.finished_at for t in trials), default=None)), "metric": mode, "modes": [mode], "unit": unit, "what": what,
        "higher_is_better": described.higher_is_better,
        "verdict": verdict, "culprit": None, "culprit_set": [], "extra_changes": [], "improvements": [],
        "explanation": (comparison.explanation if comparison else ""), "lines": list(lines),
        "excluded": [f"trial #{p['trial']}: {p['excluded']}" for p in points if p["excluded"]],
        "gpu_hours": gpu_hours, "gpu_label": gpu_label,
        "commits": [commit_row(s, info.get(s, {}), [t for t in trials if t.identity.commit == s],
                                "A" if s == a else ("B" if s == b else ""), True, "") for s in shas],
        "order": order, "points": points, "levels": {}, "culprit_short": None, "culprit_set_short": [],
        "drift_lines": [], "serves": serves(trials, config),
        "samples": state_samples(store, trials), "reasoning": None,
        "speculative": speculative_rows(trials, shas),
        "comparisons": [c for c in (comparison_row("B vs A", comparison),) if c],
        "builds_reused": 0, "builds": len({t.identity.build_hash for t in trials}),
        "builds_note": builds_note(trials, len({t.identity.build_hash for t in trials}), 0),
        "failures": failures(trials), "placements": placements(trials), "layouts": layouts(trials),
        "environment": environment(trials, config),
        "reproduce": list(reproduce), "db": str(db_path or store.path), "outcome": {}, "drift_note": None,
    }


def comparison_view(store: Any, comparison_id: int, config: Any = None, db_path: Path | None = None, *,
                    facts: RepoFacts | None = None) -> dict[str, Any]:
    """The report of one stored comparison; ``facts``: what the target repository says of its two commits
    (``git.commit_facts.comparison_facts``)."""
    record = next((c for c in store.comparisons(1 << 30) if c.id == comparison_id), None)
    if record is None:
        raise UsageError(
            f"No comparison c{comparison_id} in {store.path}. List the stored ones with `perfbisect log`."
        )
    by_id = {}
    for sha in (record.a, record.b):
        for t in store.trials(commit=sha, mode=record.mode, status=None):
            by_id[t.id] = t
    wanted = list(record.trial_ids_a) + list(record.trial_ids_b)
    trials = sorted((by_id[i] for i in wanted if i in by_id), key=lambda t: t.started_at)
    db = str(db_path or store.path)
    cfg = f" -c {config.path}" if getattr(config, "path", None) else ""
    return trials_view(
        store, f"perfbisect comparison c{comparison_id}: {record.b[:10]} vs {record.a[:10]} [{record.mode}]", "comparison",
        trials, comparison=record.comparison, a=record.a, b=record.b, config=config, record_id=comparison_id,
        metric=stored_or_described(record.metric_info, config),
        reproduce=[f"perfbisect compare {record.a} {record.b} --mode {record.mode}{cfg} --db {db}",
                   f"perfbisect report c{comparison_id} --db {db}"], db_path=db_path, facts=facts,
    )
