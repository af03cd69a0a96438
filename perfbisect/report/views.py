"""A bisection's report view: everything the HTML report of one bisection shows, as plain JSON-able values.

The store, what the target repository says of the range's commits (``model.RepoFacts``, gathered by
the use case that renders the report: the report itself never runs git) and a replay of the search
policy over the stored observations are read here; ``perfbisect.report.report`` only renders what
this module returns, so a report can be rebuilt at any time without rerunning anything.

This module assembles a bisection's view; the per-trial rows live in ``trial_tables``, the search
replay in ``replay``, the verdict's sentences in ``verdict_text`` and the rows every view shares
in ``view_rows``. A comparison's or a calibration's view is ``comparison_views``'s, the static site's
index ``site_index``'s.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..metrics import stored_or_described
from ..errors import PerfbisectError
from ..model import BisectOutcome, RepoFacts, TrialResult
from ..engine.cost import pauses
from ..metrics import trials_text
from ..engine.search_start import stats_config
from .replay import REPLAY_WORK, engine_fit, replay
from .trial_tables import (
    environment,
    failures,
    iso_time,
    layouts,
    placements,
    speculative_rows,
    state_samples,
    trial_point,
)
from .verdict_text import builds_note, metric_unit, verdict_view, which_path_view
from .view_rows import commit_row, commit_url, comparison_row, gpu_hours_of, metric_modes, serves


# Sides a trial can be on, in legend order (report.SIDE_COLORS gives each a fixed colour).
SIDES = ("before the culprit", "the culprit and after", "good end", "between", "bad end", "A", "B")


def side_of(sha: str, pos: Mapping[str, int], culprit: str | None, good: str, bad: str) -> str:
    """The side of the answer a trial of ``sha`` is on: before the culprit or from it on; without a
    culprit, the good end, the bad end or a commit between them."""
    if culprit and culprit in pos and sha in pos:
        return "before the culprit" if pos[sha] < pos[culprit] else "the culprit and after"
    return "good end" if sha == good else "bad end" if sha == bad else "between"


def bisection_view(store: Any, bisection_id: int, config: Any = None, db_path: Path | None = None,
                   replay_work: int = REPLAY_WORK, *, facts: RepoFacts | None = None) -> dict[str, Any]:
    """Everything the report of one bisection shows (the search replayed within ``replay_work`` units);
    ``facts``: what the target repository says of the range's commits (``git.commit_facts.bisection_facts``;
    none: the stored candidates, subjects unknown)."""
    facts = facts or RepoFacts()
    record = store.bisection(bisection_id)
    out: BisectOutcome | None = record.outcome
    full = list(facts.range) or list(record.commits)
    info = facts.commits
    trials = store.trials(bisection_id=bisection_id, status=None)
    observations = store.observations(bisection_id)
    excluded = {tid: o.flag for o in observations if o.flag for tid in o.trial_ids}
    modes = metric_modes(record.metric)
    described = stored_or_described(record.metric_info, config)
    unit, what = metric_unit(record.metric, described)
    higher = described.higher_is_better
    settings = stats_config(record.settings)
    culprit = out.named_culprit if out else None  # None when the answer is a set: no one commit is blamed
    located = out.culprit if out else None  # where the change was located (the set's last commit)
    culprit_set = set(out.culprit_set) if out else set()

    points = [trial_point(t, info, excluded) for t in trials]
    pos = {s: i for i, s in enumerate(full)}
    # Which side of the answer each trial is on: the chart colours them so a step reads apart from drift.
    for p in points:
        p["side"] = side_of(p["sha"], pos, located, record.good, record.bad)
    builds, reused = _builds_reused(trials)
    reasoning, final_post = _replayed_search(record, observations, higher, replay_work)
    levels, drift_lines = _levels(record, trials, observations, excluded, modes, full, higher, final_post)
    gpu_hours, gpu_label = gpu_hours_of(trials)
    verdict = verdict_view(out, record.status, info, levels, unit, what, out.trials_used if out else len(observations),
                           gpu_hours, gpu_label, settings.alpha, settings.min_effect_pct, total=len(trials))
    db = str(db_path or store.path)
    return {
        "kind": "bisection",
        "id": bisection_id,
        "title": f"perfbisect bisection #{bisection_id}: {record.good[:10]}..{record.bad[:10]} [{record.metric}]",
        "metric": record.metric, "modes": list(modes), "unit": unit, "what": what,
        "higher_is_better": higher,
        "good": record.good, "bad": record.bad, "target": record.target, "status": record.status,
        "started": iso_time(record.started_at), "finished": iso_time(record.finished_at),
        "verdict": verdict,
        **_answer_cards(out, info, facts),
        "explanation": out.explanation if out else "", "lines": [],
        "drift_note": out.drift_note if out else None,
        "excluded": list(out.excluded) if out else [],
        "outcome": _outcome_figures(out, observations),
        "trials_total": len(trials),
        "trials_text": trials_text(len(trials), out.trials_used if out else len(observations)),
        "gpu_hours": gpu_hours, "gpu_label": gpu_label,
        "commits": _commit_table(record, full, info, facts, trials, observations),
        "order": [s[:10] for s in full],
        "gaps": interruptions(trials),
        "points": points, "levels": levels, "culprit_short": culprit[:10] if culprit else None,
        "culprit_set_short": [c[:10] for c in culprit_set], "drift_lines": drift_lines,
        "serves": serves(trials, config),
        "samples": state_samples(store, trials),
        "reasoning": reasoning,
        "speculative": speculative_rows(trials, full),
        "which_path": which_path_view(out.regressed_path if out else None),
        "comparisons": _comparisons(store, bisection_id, out),
        "builds_reused": reused, "builds": builds, "builds_note": builds_note(trials, builds, reused),
        "failures": failures(trials),
        "placements": placements(trials),
        "layouts": layouts(trials),
        "environment": environment(trials, config),
        "reproduce": _reproduce(record, bisection_id, config, db, culprit, modes[-1]),
        "db": db,
    }


def interruptions(trials: Sequence[TrialResult]) -> list[dict[str, Any]]:
    """When the bisection stood still between trials (interrupted and resumed later: ``cost.pauses``), for
    the timeline's labelled band: its ends, its middle and "interrupted 2 h 10 min"."""
    return [{"from": iso_time(a), "to": iso_time(b), "mid": iso_time((a + b) / 2),
             "label": f"interrupted {duration_words(b - a)}"} for a, b in pauses(trials)]


def duration_words(seconds: float) -> str:
    """"2 h 10 min", "14 min", "50 s": a pause's length as a reader says it."""
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    if h >= 24:
        return f"{h // 24} d {h % 24} h"
    if h:
        return f"{h} h {m} min" if m else f"{h} h"
    return f"{m} min" if m else f"{s} s"


def _commit_table(record: Any, full: Sequence[str], info: Mapping[str, Mapping[str, Any]], facts: RepoFacts,
                  trials: Sequence[TrialResult], observations: Sequence[Any]) -> list[dict[str, Any]]:
    """The commit table: every commit of the range, oldest first, with its role in the answer (good,
    bad, culprit, culprit set, skipped, filtered), its trials and the patch variants that applied."""
    out: BisectOutcome | None = record.outcome
    cand_set = set(record.commits)
    skipped = set(out.skipped) if out else {o.commit for o in observations if o.value is None}
    measured = {t.identity.commit for t in trials}
    culprit = out.named_culprit if out else None
    culprit_set = set(out.culprit_set) if out else set()
    variants = facts.variants
    commit_rows = []
    for sha in full:
        c = info.get(sha, {})
        ts = [t for t in trials if t.identity.commit == sha]
        role = []
        if sha == record.good:
            role.append("good")
        if sha == record.bad:
            role.append("bad")
        if sha == culprit:
            role.append("culprit")
        elif sha in culprit_set:
            role.append("culprit set")
        if sha in skipped:
            role.append("skipped")
        if sha not in cand_set:
            role.append("filtered")
        commit_rows.append(commit_row(sha, c, ts, ", ".join(role), sha in measured, variants.get(sha, "")))
    return commit_rows


def _builds_reused(trials: Sequence[TrialResult]) -> tuple[int, int]:
    """How many distinct builds the trials ran, and how many trials reused one: a trial whose build hash
    an earlier trial already built (build cache or worktree reuse)."""
    seen: set[str] = set()
    reused = 0
    for t in sorted(trials, key=lambda t: t.started_at):
        if t.identity.build_hash in seen:
            reused += 1
        seen.add(t.identity.build_hash)
    return len(seen), reused


def _replayed_search(record: Any, observations: Sequence[Any], higher: bool, replay_work: int) -> tuple[dict[str, Any], Any]:
    """The search policy replayed over the stored observations (``replay.replay``: the report's
    reasoning), and the final posterior it ended on (None when the replay failed: the reasoning says why)."""
    try:
        with warnings.catch_warnings():  # early prefixes (one endpoint measured) make numpy warn on empty means
            warnings.simplefilter("ignore", RuntimeWarning)
            reasoning = replay(record, observations, higher_is_better=higher, work=replay_work)
    except PerfbisectError as exc:
        reasoning = {"steps": [], "cells": [], "sampled": False, "noise": "", "opening": "", "error": str(exc),
                     "note": "", "compared": 0, "mismatches": 0, "cpu_capped": False, "history": 0}
    final_post = reasoning.pop("_final", None)
    return reasoning, final_post


def _levels(record: Any, trials: Sequence[TrialResult], observations: Sequence[Any], excluded: Mapping[int, str],
            modes: Sequence[str], full: Sequence[str], higher: bool, final_post: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Levels in the metric's own unit (single-mode metrics): the endpoints' trial means, and the segment
    levels, steps and drift the engine fitted (replay.engine_fit: changepoint.level_step); and the
    fitted drift path per side, for the chart (empty when the engine found no drift)."""
    out: BisectOutcome | None = record.outcome
    located = out.culprit if out else None  # where the change was located (the set's last commit)
    pos = {s: i for i, s in enumerate(full)}
    levels: dict[str, Any] = {}
    drift_lines: list[dict[str, Any]] = []
    metric_trials = [t for t in trials if t.identity.mode == modes[-1] and t.summary is not None
                     and not excluded.get(t.id or -1)]
    if not (len(modes) == 1 and metric_trials):
        return levels, drift_lines

    def mean_level(sel: list[TrialResult]) -> float | None:
        logs = [t.summary for t in sel]
        return math.exp(sum(logs) / len(logs)) if logs else None
    levels["good"] = mean_level([t for t in metric_trials if t.identity.commit == record.good])
    levels["bad"] = mean_level([t for t in metric_trials if t.identity.commit == record.bad])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            fitted = engine_fit(record, observations, out, higher, post=final_post)
    except (PerfbisectError, ValueError, FloatingPointError, ArithmeticError):
        fitted = {"segments": [], "steps": [], "drift": None}
    segs = fitted["segments"]
    culprit_pos = pos.get(located, -1) if located else -1
    _label_segments(segs, pos, culprit_pos)
    if segs:
        segs[0]["from"] = full[0][:10]
        segs[-1]["to"] = full[-1][:10]
        levels["segments"] = segs
        levels["steps"] = fitted["steps"]
        levels["level_pct"] = fitted.get("level_pct")
    if located and len(segs) >= 2:
        levels["before"], levels["after"] = segs[0]["value"], segs[1]["value"]
    drift = fitted["drift"]
    if drift:
        drift_lines = _drift_lines(drift, trials, observations, modes[-1], pos, culprit_pos)
        levels["drift_span_pct"] = drift["span_pct"]
        levels["p_drift"] = drift["p_drift"]
    return levels, drift_lines


def _label_segments(segs: list[dict[str, Any]], pos: Mapping[str, int], culprit_pos: int) -> None:
    """Name each fitted segment by its side of the answer, and shorten its ends to the table's shas."""
    for seg in segs:
        first = pos.get(seg["from"], 0)
        seg["label"] = ("before the culprit" if culprit_pos >= 0 and first < culprit_pos
                        else "the culprit and after" if culprit_pos >= 0 and first == culprit_pos
                        else "all commits" if len(segs) == 1 else f"from {seg['from'][:10]} on")
        # a segment spans every commit of the range between its first and last candidate, filtered ones too
        seg["from"], seg["to"] = seg["from"][:10], seg["to"][:10]
        seg.pop("log", None)


def _drift_lines(drift: Mapping[str, Any], trials: Sequence[TrialResult], observations: Sequence[Any], mode: str,
                 pos: Mapping[str, int], culprit_pos: int) -> list[dict[str, Any]]:
    """The fitted drift path of each side, one point per observation at the time its last trial started."""
    by_id = {t.id: t for t in trials}
    when: dict[int, str | None] = {}
    for o in observations:
        ts = [by_id[i] for i in o.trial_ids if i in by_id and by_id[i].identity.mode == mode]
        if ts:
            when[o.seq] = iso_time(ts[-1].started_at)
    names = {}
    for seg in drift["segments"]:
        first = pos.get(seg["from"], 0)
        names[seg["index"]] = ("before the culprit" if culprit_pos >= 0 and first < culprit_pos
                               else "the culprit and after" if culprit_pos >= 0
                               else "all commits" if len(drift["segments"]) == 1 else f"from {seg['from'][:10]} on")
    drift_lines: list[dict[str, Any]] = []
    for row in drift["rows"]:
        if when.get(row["seq"]) is None:
            continue
        for idx, name in names.items():
            drift_lines.append({"t": when[row["seq"]], "value": row["levels"][idx], "side": name,
                                "line": f"fitted: {name}", "drift_pct": row["drift_pct"]})
    return drift_lines


def _commit_card(sha: str, info: Mapping[str, Mapping[str, Any]], facts: RepoFacts) -> dict[str, Any]:
    """One commit the answer names: its subject, author, the files it changed and its forge link."""
    c = info.get(sha, {})
    return {"sha": sha, "short": sha[:10], "subject": c.get("subject", ""), "author": c.get("author", ""),
            "email": c.get("email", ""), "date": c.get("date", ""), "files": list(facts.files.get(sha, ())),
            "url": commit_url(facts.remote, sha)}


def _answer_cards(out: BisectOutcome | None, info: Mapping[str, Mapping[str, Any]], facts: RepoFacts) -> dict[str, Any]:
    """The commits the answer names, as cards: the culprit (none when the answer is a set), the rest of
    its set, further changes and improvements, and the level of the interval the answer is sized with."""
    culprit = out.named_culprit if out else None
    return {
        "culprit": _commit_card(culprit, info, facts) if culprit else None,
        "culprit_set": [_commit_card(s, info, facts) for s in (out.culprit_set if out else ()) if s != culprit],
        "culprit_is_set": bool(out and out.culprit_is_set),
        "level_pct": (out.culprit_comparison or out.endpoint_comparison).level_pct
        if out and (out.culprit_comparison or out.endpoint_comparison) else None,
        "extra_changes": [_commit_card(s, info, facts) for s in (out.extra_changes if out else ())],
        "improvements": [_commit_card(s, info, facts) for s in (out.improvements if out else ())],
    }


def _outcome_figures(out: BisectOutcome | None, observations: Sequence[Any]) -> dict[str, Any]:
    """The outcome's figures the report prints (an unfinished bisection: its observations so far)."""
    return {
        "trials_used": out.trials_used if out else len(observations),
        "ruled_out_pct": out.ruled_out_pct if out else None,
        "budget_exhausted": out.budget_exhausted if out else False,
        "answer_probability": out.answer_probability if out else None,
        "best_answer": [s[:10] for s in out.best_answer] if out else [],
        "noise_sigma_pct": out.noise_sigma_pct if out else None,
        "drift_pct": out.drift_pct if out else None,
    }


def _comparisons(store: Any, bisection_id: int, out: BisectOutcome | None) -> list[dict[str, Any]]:
    """The bisection's own comparisons (endpoints, culprit), then every stored `perfbisect compare` of it."""
    comparisons = [c for c in (
        comparison_row("endpoints: bad vs good (evidence, not a second verdict)", out.endpoint_comparison if out else None),
        comparison_row("from the culprit on vs before it", out.culprit_comparison if out else None),
    ) if c]
    for c in store.comparisons(1000, bisection_id=bisection_id):
        row = comparison_row(f"comparison c{c.id}: {c.b[:10]} vs {c.a[:10]} [{c.mode}]", c.comparison)
        if row:
            comparisons.append(row)
    return comparisons


def _reproduce(record: Any, bisection_id: int, config: Any, db: str, culprit: str | None, mode: str) -> list[str]:
    """The commands that run this bisection again, render its report, and look at the culprit."""
    config_path = getattr(config, "path", None)
    cfg = f" -c {config_path}" if config_path else ""
    reproduce = [
        f"perfbisect run good={record.good} bad={record.bad}{cfg} --db {db}",
        f"perfbisect report {bisection_id} --db {db}",
    ]
    if culprit:
        reproduce.append(f"git -C {record.target} show --stat {culprit}")
        reproduce.append(f"perfbisect compare {culprit}~1 {culprit} --mode {mode}{cfg} --db {db}")
    return reproduce
