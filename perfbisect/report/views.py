"""Everything an HTML report shows, loaded from the results database into plain JSON-able values.

The store, the target repository (when it is still where the bisection ran) and a replay of the
search policy over the stored observations are read here; ``perfbisect.report.report`` only renders what
this module returns, so a report can be rebuilt at any time without rerunning anything.

This module assembles the views (a bisection, a comparison or calibration, the index) and reads the
repository; the per-trial rows live in ``trial_tables`` and the search replay in ``search_replay``.
"""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..metrics import DECODE, Metric, describe_workload, level_text, pct_text, short_probability, signed, stored_or_described
from ..measure.build import NO_BUILD_STEPS_HASH
from ..errors import PerfbisectError, UsageError
from ..model import BisectOutcome, Comparison, TrialResult, TrialStatus, Verdict, median
from ..engine.outcomes import settles
from ..engine.search_replay import REPLAY_WORK, engine_fit, replay, stats_config
from ..engine.regressed_path import lines as regressed_path_lines
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

_FORGES = {
    "github.com": "https://github.com/{path}/commit/{sha}",
    "gitlab.com": "https://gitlab.com/{path}/-/commit/{sha}",
    "codeberg.org": "https://codeberg.org/{path}/commit/{sha}",
    "bitbucket.org": "https://bitbucket.org/{path}/commits/{sha}",
}
_REMOTE = re.compile(r"^(?:https://|ssh://git@|git@)([A-Za-z0-9.-]+)[:/]([A-Za-z0-9._-]+/[A-Za-z0-9._-]+?)(?:\.git)?/?$")


def commit_url(remote: str | None, sha: str) -> str | None:
    """A link to ``sha`` on a known forge, from the remote URL; None for anything else."""
    m = _REMOTE.match((remote or "").strip())
    if not m or m.group(1) not in _FORGES or not re.fullmatch(r"[0-9a-f]{7,40}", sha):
        return None
    return _FORGES[m.group(1)].format(path=m.group(2), sha=sha)


# ------------------------------------------------------------------------------------------------
# Repository facts (optional: the target may have moved since the bisection ran)


class _Repo:
    """Commit details from the target repository through ``gitrepo.TargetRepo``, or nothing."""

    def __init__(self, path: str | None):
        self.repo = None
        self.remote = None
        if not path or not Path(path).is_dir():
            return
        try:
            from ..git.gitrepo import TargetRepo

            self.repo = TargetRepo(path)
            code, out, _ = self.repo.run("remote", "get-url", "origin")
            self.remote = out.strip() if code == 0 else None
        except (PerfbisectError, OSError):
            self.repo = None

    def commits(self, shas: Sequence[str]) -> dict[str, dict[str, Any]]:
        if self.repo is None or not shas:
            return {}
        out: dict[str, dict[str, Any]] = {}
        try:
            text = self.repo.git("show", "-s", "--format=%H%x1f%an%x1f%ae%x1f%aI%x1f%s%x1e", *dict.fromkeys(shas))
        except (PerfbisectError, OSError):
            return {}
        for record in text.split("\x1e"):
            parts = record.strip().split("\x1f")
            if len(parts) == 5:
                sha, name, email, date, subject = parts
                out[sha] = {"author": name, "email": email, "date": date, "subject": subject}
        return out

    def files(self, sha: str) -> list[str]:
        if self.repo is None:
            return []
        try:
            return list(self.repo.changed_paths(sha))
        except (PerfbisectError, OSError):
            return []

    def range(self, good: str, bad: str) -> list[str]:
        """Every first-parent commit of good..bad, oldest first (filtered ones included)."""
        if self.repo is None:
            return []
        try:
            return [c.sha for c in self.repo.first_parent_range(good, bad)]
        except (PerfbisectError, OSError):
            return []


def patch_variants(repo: _Repo, config: Any, shas: Sequence[str]) -> dict[str, str]:
    """Per commit, which patch files of the stack applied where a variant replaced the default one."""
    patches = getattr(config, "patches", None)
    if repo.repo is None or patches is None or not (patches.dir or patches.branch):
        return {}
    from ..git.patches import PatchStack

    out: dict[str, str] = {}
    try:
        stack = PatchStack.load(patches, repo.repo)
    except (PerfbisectError, OSError):
        return {}
    try:
        for sha in shas:
            check = stack.check_at(sha)
            if not check.ok:
                out[sha] = "stack does not apply: " + check.conflict.describe()
            elif check.applied is not None:
                used = [Path(str(f)).name for _, f in check.applied.applied]
                out[sha] = "applied: " + ", ".join(used)
    except (PerfbisectError, OSError):
        pass
    finally:
        stack.cleanup()
    return out


# ------------------------------------------------------------------------------------------------
# Small helpers


def serves(trials: Sequence[TrialResult], config: Any = None) -> bool:
    """Whether the trials launched a server (help about server sessions applies), else a command workload.
    Without the config, trials that recorded server info or the env their server processes had."""
    workload = getattr(config, "workload", None)
    if workload is not None:
        return getattr(workload, "kind", "sglang") != "command"
    return any(t.server_info or t.env_checks for t in trials)


def _gpu_count(host: str) -> int:
    m = re.match(r"^(\d+)x", host or "")
    return int(m.group(1)) if m else 0


def _gpu_hours(trials: Sequence[TrialResult]) -> tuple[float, str]:
    """What the trials cost: hours times the host's GPU count (machine-hours where it has none), and the unit."""
    hours = sum(max(0.0, t.finished_at - t.started_at) for t in trials if t.finished_at) / 3600.0
    gpus = max((_gpu_count(t.identity.host) for t in trials), default=0)
    return hours * (gpus or 1), "GPU-hours" if gpus else "machine-hours (no GPU here)"


def _commit_row(sha: str, info: Mapping[str, Any], trials: Sequence[TrialResult], role: str, measured: bool,
                variants: str) -> dict[str, Any]:
    """One commit of a report's commit table: what it is, its role, and its trials' values and identities."""
    return {
        "sha": sha, "short": sha[:10], "subject": info.get("subject", ""), "author": info.get("author", ""),
        "date": info.get("date", ""), "role": role, "measured": measured,
        "trials": len(trials), "ok": sum(1 for t in trials if t.status is TrialStatus.OK),
        "values": [round(math.exp(t.summary), 2) for t in trials if t.summary is not None],
        "patch_hash": sorted({t.identity.patch_hash for t in trials}),
        "build_hash": sorted({t.identity.build_hash for t in trials}),
        "variants": variants,
    }


def _comparison(label: str, cmp: Comparison | None) -> dict[str, Any] | None:
    if cmp is None:
        return None
    return {
        "label": label, "verdict": cmp.verdict.value, "effect_pct": cmp.effect_pct,
        "ci_low_pct": cmp.ci_low_pct, "ci_high_pct": cmp.ci_high_pct, "sigma_pct": cmp.sigma_b_pct,
        "sigma_source": cmp.sigma_source, "n_a": cmp.n_a, "n_b": cmp.n_b, "explanation": cmp.explanation,
        "level": level_text(cmp.level_pct) if cmp.level_pct is not None else None,
    }


def metric_modes(metric: str) -> tuple[str, ...]:
    """The modes a bisection metric needs (``ratio:SPEC/BASE`` needs two)."""
    if metric.startswith("ratio:"):
        spec, base = metric[len("ratio:"):].split("/", 1)
        return (base, spec)
    return (metric,)


def metric_unit(metric: str, described: Metric) -> tuple[str, str]:
    """(unit, what it measures) of a bisection metric from its one description
    (``metrics.stored_or_described``); "" for a metric whose key states no unit."""
    if described.unit == "×":
        return "×", f"{described.label} ({described.direction})"
    if metric.startswith("ratio:"):
        return "×", f"{metric[6:]} ratio of {described.label} ({described.direction})"
    return described.unit, f"{metric} {described.label} ({described.direction})"


def _fmt_value(v: float | None, unit: str) -> str:
    if v is None:
        return "?"
    if unit == "×":
        return f"{v:.3f}×"
    return f"{Metric('', '').number(v)} {unit}".rstrip()


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
                 min_effect: float) -> dict[str, Any]:
    """The verdict in one sentence a colleague can repeat, plus its headline and class."""
    def name(sha: str) -> str:
        return f"{sha[:10]} “{commits.get(sha, {}).get('subject', '')}”" if commits.get(sha, {}).get("subject") else sha[:10]

    cost = f"{plural(trials, 'trial')}, {gpu_hours:.2f} {gpu_label}"
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
        absolute = (f" ({signed(delta, unit)}: {_fmt_value(before, unit)} → {_fmt_value(after, unit)})"
                    if delta is not None else "")
        ci = f", {interval(cmp)}" if cmp else ""
        sigma = f" against {noise}" if noise else (f" against noise {cmp.sigma_b_pct:.1f}% per trial" if cmp else "")
        who = (name(out.culprit) if not out.culprit_is_set else
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
                    f"{out.more_trials * per_trial:.2f} {gpu_label}) at the difference and noise measured so far.")
        else:
            more = (f" Each further trial costs about {per_trial:.3g} {gpu_label}; raise stats.max_trials_total "
                    f"or narrow the range.") if trials else ""
        layout = (f" Layout-sensitive, not blamed: {', '.join(name(x) for x in out.layout_sensitive)}."
                  if out.layout_sensitive else "")
        return {"cls": "inconclusive", "headline": "INCONCLUSIVE",
                "sentence": f"Inconclusive after {cost}: {why}{stop}. Best answer: {best}{prob}.{bound}{layout}{more}"}
    ends = out.endpoint_comparison
    eff = f" The endpoints differ by {pct_text(ends.effect_pct)} ({interval(ends)})" if ends else ""
    abs_part = f" ({_fmt_value(levels.get('good'), unit)} → {_fmt_value(levels.get('bad'), unit)})" if levels.get("good") else ""
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


# ------------------------------------------------------------------------------------------------
# A bisection

# Sides a trial can be on, in legend order (report.SIDE_COLORS gives each a fixed colour).
SIDES = ("before the culprit", "the culprit and after", "good end", "between", "bad end", "A", "B")


def side_of(sha: str, pos: Mapping[str, int], culprit: str | None, good: str, bad: str) -> str:
    """The side of the answer a trial of ``sha`` is on: before the culprit or from it on; without a
    culprit, the good end, the bad end or a commit between them."""
    if culprit and culprit in pos and sha in pos:
        return "before the culprit" if pos[sha] < pos[culprit] else "the culprit and after"
    return "good end" if sha == good else "bad end" if sha == bad else "between"



def bisection_view(store: Any, bisection_id: int, config: Any = None, db_path: Path | None = None,
                   replay_work: int = REPLAY_WORK) -> dict[str, Any]:
    """Everything the report of one bisection shows (the search replayed within ``replay_work`` units)."""
    record = store.bisection(bisection_id)
    out: BisectOutcome | None = record.outcome
    repo = _Repo(record.target)
    candidates = list(record.commits)
    full = repo.range(record.good, record.bad) or candidates
    if not set(candidates) <= set(full):
        full = candidates
    extra = list(out.culprit_set) if out else []
    info = repo.commits(list(dict.fromkeys(full + extra)))
    trials = store.trials(bisection_id=bisection_id, status=None)
    observations = store.observations(bisection_id)
    excluded = {tid: o.flag for o in observations if o.flag for tid in o.trial_ids}
    modes = metric_modes(record.metric)
    described = stored_or_described(record.metric_info, config)
    unit, what = metric_unit(record.metric, described)
    higher = described.higher_is_better
    settings = stats_config(record.settings)

    points = [trial_point(t, info, excluded) for t in trials]
    pos = {s: i for i, s in enumerate(full)}
    cand_set = set(candidates)
    skipped = set(out.skipped) if out else {o.commit for o in observations if o.value is None}
    measured = {t.identity.commit for t in trials}
    culprit = out.named_culprit if out else None  # None when the answer is a set: no one commit is blamed
    located = out.culprit if out else None  # where the change was located (the set's last commit)
    culprit_set = set(out.culprit_set) if out else set()
    variants = patch_variants(repo, config, [s for s in full if s in measured])
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
        commit_rows.append(_commit_row(sha, c, ts, ", ".join(role), sha in measured, variants.get(sha, "")))
    # Which side of the answer each trial is on: the chart colours them so a step reads apart from drift.
    for p in points:
        p["side"] = side_of(p["sha"], pos, located, record.good, record.bad)
    # Builds reused: a trial whose build hash an earlier trial already built (build cache or worktree reuse).
    seen: set[str] = set()
    reused = 0
    for t in sorted(trials, key=lambda t: t.started_at):
        if t.identity.build_hash in seen:
            reused += 1
        seen.add(t.identity.build_hash)

    try:
        with warnings.catch_warnings():  # early prefixes (one endpoint measured) make numpy warn on empty means
            warnings.simplefilter("ignore", RuntimeWarning)
            reasoning = replay(record, observations, higher_is_better=higher, work=replay_work)
    except PerfbisectError as exc:
        reasoning = {"steps": [], "cells": [], "sampled": False, "noise": "", "opening": "", "error": str(exc),
                     "note": "", "compared": 0, "mismatches": 0, "cpu_capped": False, "history": 0}
    final_post = reasoning.pop("_final", None)
    # Levels in the metric's own unit (single-mode metrics): the endpoints' trial means, and the segment
    # levels, steps and drift the engine fitted (search_replay.engine_fit: changepoint.level_step).
    levels: dict[str, Any] = {}
    drift_lines: list[dict[str, Any]] = []
    metric_trials = [t for t in trials if t.identity.mode == modes[-1] and t.summary is not None
                     and not excluded.get(t.id or -1)]
    if len(modes) == 1 and metric_trials:
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
        for seg in segs:
            first = pos.get(seg["from"], 0)
            seg["label"] = ("before the culprit" if culprit_pos >= 0 and first < culprit_pos
                            else "the culprit and after" if culprit_pos >= 0 and first == culprit_pos
                            else "all commits" if len(segs) == 1 else f"from {seg['from'][:10]} on")
            # a segment spans every commit of the range between its first and last candidate, filtered ones too
            seg["from"], seg["to"] = seg["from"][:10], seg["to"][:10]
            seg.pop("log", None)
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
            by_id = {t.id: t for t in trials}
            when: dict[int, str | None] = {}
            for o in observations:
                ts = [by_id[i] for i in o.trial_ids if i in by_id and by_id[i].identity.mode == modes[-1]]
                if ts:
                    when[o.seq] = iso_time(ts[-1].started_at)
            names = {}
            for seg in drift["segments"]:
                first = pos.get(seg["from"], 0)
                names[seg["index"]] = ("before the culprit" if culprit_pos >= 0 and first < culprit_pos
                                       else "the culprit and after" if culprit_pos >= 0
                                       else "all commits" if len(drift["segments"]) == 1 else f"from {seg['from'][:10]} on")
            for row in drift["rows"]:
                if when.get(row["seq"]) is None:
                    continue
                for idx, name in names.items():
                    drift_lines.append({"t": when[row["seq"]], "value": row["levels"][idx], "side": name,
                                        "line": f"fitted: {name}", "drift_pct": row["drift_pct"]})
            levels["drift_span_pct"] = drift["span_pct"]
            levels["p_drift"] = drift["p_drift"]

    gpu_hours, gpu_label = _gpu_hours(trials)
    verdict = verdict_view(out, record.status, info, levels, unit, what, out.trials_used if out else len(observations),
                           gpu_hours, gpu_label, settings.alpha, settings.min_effect_pct)

    def commit_card(sha: str) -> dict[str, Any]:
        c = info.get(sha, {})
        return {"sha": sha, "short": sha[:10], "subject": c.get("subject", ""), "author": c.get("author", ""),
                "email": c.get("email", ""), "date": c.get("date", ""), "files": repo.files(sha),
                "url": commit_url(repo.remote, sha)}

    comparisons = [c for c in (
        _comparison("endpoints: bad vs good (evidence, not a second verdict)", out.endpoint_comparison if out else None),
        _comparison("from the culprit on vs before it", out.culprit_comparison if out else None),
    ) if c]
    for c in store.comparisons(1000, bisection_id=bisection_id):
        row = _comparison(f"compare #{c.id}: {c.b[:10]} vs {c.a[:10]} [{c.mode}]", c.comparison)
        if row:
            comparisons.append(row)
    db = str(db_path or store.path)
    config_path = getattr(config, "path", None)
    cfg = f" -c {config_path}" if config_path else ""
    reproduce = [
        f"perfbisect run good={record.good} bad={record.bad}{cfg} --db {db}",
        f"perfbisect report {bisection_id} --db {db}",
    ]
    if culprit:
        reproduce.append(f"git -C {record.target} show --stat {culprit}")
        reproduce.append(f"perfbisect compare {culprit}~1 {culprit} --mode {modes[-1]}{cfg} --db {db}")
    return {
        "kind": "bisection",
        "id": bisection_id,
        "title": f"perfbisect bisection #{bisection_id}: {record.good[:10]}..{record.bad[:10]} [{record.metric}]",
        "metric": record.metric, "modes": list(modes), "unit": unit, "what": what,
        "higher_is_better": higher,
        "good": record.good, "bad": record.bad, "target": record.target, "status": record.status,
        "started": iso_time(record.started_at), "finished": iso_time(record.finished_at),
        "verdict": verdict,
        "culprit": commit_card(culprit) if culprit else None,
        "culprit_set": [commit_card(s) for s in (out.culprit_set if out else ()) if s != culprit],
        "culprit_is_set": bool(out and out.culprit_is_set),
        "level_pct": (out.culprit_comparison or out.endpoint_comparison).level_pct
        if out and (out.culprit_comparison or out.endpoint_comparison) else None,
        "extra_changes": [commit_card(s) for s in (out.extra_changes if out else ())],
        "improvements": [commit_card(s) for s in (out.improvements if out else ())],
        "explanation": out.explanation if out else "", "lines": [],
        "drift_note": out.drift_note if out else None,
        "excluded": list(out.excluded) if out else [],
        "outcome": {
            "trials_used": out.trials_used if out else len(observations),
            "ruled_out_pct": out.ruled_out_pct if out else None,
            "budget_exhausted": out.budget_exhausted if out else False,
            "answer_probability": out.answer_probability if out else None,
            "best_answer": [s[:10] for s in out.best_answer] if out else [],
            "noise_sigma_pct": out.noise_sigma_pct if out else None,
            "drift_pct": out.drift_pct if out else None,
        },
        "gpu_hours": gpu_hours, "gpu_label": gpu_label,
        "commits": commit_rows, "order": [s[:10] for s in full],
        "points": points, "levels": levels, "culprit_short": culprit[:10] if culprit else None,
        "culprit_set_short": [c[:10] for c in culprit_set], "drift_lines": drift_lines,
        "serves": serves(trials, config),
        "samples": state_samples(store, trials),
        "reasoning": reasoning,
        "speculative": speculative_rows(trials, full),
        "which_path": which_path_view(out.regressed_path if out else None),
        "comparisons": comparisons,
        "builds_reused": reused, "builds": len(seen), "builds_note": builds_note(trials, len(seen), reused),
        "failures": failures(trials),
        "placements": placements(trials),
        "layouts": layouts(trials),
        "environment": environment(trials, config),
        "reproduce": reproduce,
        "db": db,
    }


# ------------------------------------------------------------------------------------------------
# A comparison, or a set of trials (calibrate)


def trials_view(store: Any, title: str, kind: str, trials: Sequence[TrialResult], *, comparison: Comparison | None = None,
                a: str | None = None, b: str | None = None, lines: Sequence[str] = (), config: Any = None,
                record_id: int | None = None, reproduce: Sequence[str] = (), db_path: Path | None = None,
                metric: Metric | None = None) -> dict[str, Any]:
    """The report of a comparison (A vs B) or a calibration (N sessions each of two builds, interleaved);
    ``metric``: the description stored with it (default: what ``config`` describes)."""
    target = str(getattr(getattr(config, "target", None), "repo", "") or "")
    repo = _Repo(target)
    shas = list(dict.fromkeys([s for s in (a, b) if s] + [t.identity.commit for t in trials]))
    info = repo.commits(shas)
    points = [trial_point(t, info, {}) for t in trials]
    for p in points:
        p["side"] = "A" if p["sha"] == a else "B" if p["sha"] == b else "between"
    gpu_hours, gpu_label = _gpu_hours(trials)
    mode = trials[0].identity.mode if trials else ""
    workload = getattr(config, "workload", None)  # one mode: its own unit, never a ratio of two
    described = metric or (describe_workload(workload) if workload is not None else DECODE)
    unit, what = metric_unit(mode, described)
    if comparison is not None:
        va = median(p["value"] for p in points if p["sha"] == a)
        vb = median(p["value"] for p in points if p["sha"] == b)
        absolute = f" ({_fmt_value(va, unit)} → {_fmt_value(vb, unit)})" if va and vb else ""
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
        "kind": kind, "id": record_id, "title": title, "good": a, "bad": b,
        "started": iso_time(min((t.started_at for t in trials), default=None)),
        "finished": iso_time(max((t.finished_at for t in trials), default=None)), "metric": mode, "modes": [mode], "unit": unit, "what": what,
        "verdict": verdict, "culprit": None, "culprit_set": [], "extra_changes": [], "improvements": [],
        "explanation": (comparison.explanation if comparison else ""), "lines": list(lines),
        "excluded": [f"trial #{p['trial']}: {p['excluded']}" for p in points if p["excluded"]],
        "gpu_hours": gpu_hours, "gpu_label": gpu_label,
        "commits": [_commit_row(s, info.get(s, {}), [t for t in trials if t.identity.commit == s],
                                "A" if s == a else ("B" if s == b else ""), True, "") for s in shas],
        "order": order, "points": points, "levels": {}, "culprit_short": None, "culprit_set_short": [],
        "drift_lines": [], "serves": serves(trials, config),
        "samples": state_samples(store, trials), "reasoning": None,
        "speculative": speculative_rows(trials, shas),
        "comparisons": [c for c in (_comparison("B vs A", comparison),) if c],
        "builds_reused": 0, "builds": len({t.identity.build_hash for t in trials}),
        "builds_note": builds_note(trials, len({t.identity.build_hash for t in trials}), 0),
        "failures": failures(trials), "placements": placements(trials), "layouts": layouts(trials),
        "environment": environment(trials, config),
        "reproduce": list(reproduce), "db": str(db_path or store.path), "outcome": {}, "drift_note": None,
    }


def comparison_view(store: Any, comparison_id: int, config: Any = None, db_path: Path | None = None) -> dict[str, Any]:
    """The report of one stored comparison."""
    record = next((c for c in store.comparisons(1 << 30) if c.id == comparison_id), None)
    if record is None:
        raise UsageError(
            f"No comparison #{comparison_id} in {store.path}. List the stored ones with `perfbisect log`."
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
        store, f"perfbisect compare #{comparison_id}: {record.b[:10]} vs {record.a[:10]} [{record.mode}]", "comparison",
        trials, comparison=record.comparison, a=record.a, b=record.b, config=config, record_id=comparison_id,
        metric=stored_or_described(record.metric_info, config),
        reproduce=[f"perfbisect compare {record.a} {record.b} --mode {record.mode}{cfg} --db {db}",
                   f"perfbisect report c{comparison_id} --db {db}"], db_path=db_path,
    )


# ------------------------------------------------------------------------------------------------
# The static site's index


def index_entries(views: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """Index rows (newest first, each with its report's file name) and history points per mode.

    A history point is one commit's level in one report (geometric mean of its trial medians) with
    the noise band of that report (±1σ per trial), linked to the report.
    """
    entries: list[dict[str, Any]] = []
    history: dict[str, list[dict[str, Any]]] = {}
    for view in views:
        href = f"{view['kind']}-{view['id']}.html"
        first = min((p["started"] for p in view["points"] if p["started"]), default=None)
        culprit = view.get("culprit") or {}
        label = f"{'bisection' if view['kind'] == 'bisection' else 'compare'} #{view['id']}"
        ends = ((view.get("good") or "")[:10], (view.get("bad") or "")[:10]) if view["kind"] == "bisection" else None
        pair = " vs ".join(c["short"] for c in view["commits"][:2][::-1]) if view["kind"] != "bisection" else ""
        cmp = view["comparisons"][0] if view["comparisons"] else None
        effect = cmp["effect_pct"] if cmp else None
        if view["kind"] == "bisection" and len(view["comparisons"]) > 1:
            effect = view["comparisons"][1]["effect_pct"]
        entries.append({
            "href": href, "label": label, "date": view.get("started") or first or "", "metric": view["metric"],
            "range": f"{ends[0]}..{ends[1]}" if ends else pair, "verdict": view["verdict"]["headline"].lower(),
            "effect_pct": effect, "culprit": culprit.get("short", ""), "culprit_subject": culprit.get("subject", ""),
            "culprit_set": [c["short"] for c in view.get("culprit_set") or ()] if view.get("culprit_is_set") else [],
            "trials": len(view["points"]),
        })
        sigma = (view.get("outcome") or {}).get("noise_sigma_pct") or (cmp["sigma_pct"] if cmp else None)
        roles = {c["short"]: c["role"] for c in view["commits"]}
        subjects = {c["short"]: c["subject"] for c in view["commits"]}
        groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for p in view["points"]:
            if p["value"] and not p["excluded"]:
                groups.setdefault((p["mode"], p["sha"]), []).append(p)
        for (mode, sha), ps in groups.items():
            commit = sha[:10]
            logs = [math.log(p["value"]) for p in ps]
            m = sum(logs) / len(logs)
            s = math.log1p(sigma / 100) if sigma else 0.0
            role = roles.get(commit, "") or "measured"
            history.setdefault(mode, []).append({
                "date": min(p["started"] for p in ps), "value": math.exp(m), "band_low": math.exp(m - s),
                "band_high": math.exp(m + s), "commit": commit, "subject": subjects.get(commit, ""),
                "end": role.split(",")[0] or "measured", "role": history_role(role), "sha": sha,
                "href": href, "label": label, "unit": view["unit"],
                "verdict": view["verdict"]["headline"].lower(),
            })
    entries.sort(key=lambda e: e["date"] or "", reverse=True)
    order = commit_order(views)
    for points in history.values():
        for p in points:
            p["x"] = order.get(p["sha"], len(order))
        points.sort(key=lambda p: (p["x"], p["date"] or ""))
    return entries, history


# Roles a history point can have, in legend order (report.ROLE_COLORS gives each a fixed colour).
HISTORY_ROLES = ("good", "bad", "culprit", "culprit set", "measured", "A", "B")


def history_role(role: str) -> str:
    """The one role a history point is drawn as: culprit before bad, an end before measured."""
    parts = [r.strip() for r in role.split(",") if r.strip()]
    for r in ("culprit", "culprit set", "good", "bad", "A", "B"):
        if r in parts:
            return r
    return "measured"


def commit_order(views: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """One oldest-first order of every commit the views measured, for a per-commit history axis (as asv
    and Bencher plot): each view's range order is kept, and a commit new to the merged order goes right
    after the commit before it in its view; views are merged oldest first."""
    merged: list[str] = []
    for view in sorted(views, key=lambda v: v.get("started") or ""):
        shas = [c["sha"] for c in view["commits"]]
        prev = None
        for sha in shas:
            if sha in merged:
                prev = sha
                continue
            at = merged.index(prev) + 1 if prev is not None else 0
            merged.insert(at, sha)
            prev = sha
    return {sha: i for i, sha in enumerate(merged)}
