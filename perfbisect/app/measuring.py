"""`perfbisect measure` and `compare`: trials of one commit's modes, and two commits against each other
(interleaved A B B A … until the verdict is clear or the budget is spent), stored as they land.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..engine.stats import compare, compare_sequential
from ..errors import UsageError, WorkloadError
from ..measure.search_trials import interleaved
from ..measure.trials import TrialRunner
from ..runtime.progress import Progress
from ..measure.launch_checks import preflight
from .workspace import Workspace
from ..metrics import describe as describe_metric
from ..metrics import describe_workload
from ..model import Commit, Comparison, TrialResult, Verdict
from ..report.render import attribution_line, history_line
from .calibration import noise_model


def why_nothing_measured(trials: Sequence[TrialResult]) -> str | None:
    """None when some trial produced a number; else the first reason one did not."""
    if not trials or any(t.summary is not None for t in trials):
        return None
    for t in trials:
        if t.error:
            return t.error
        for r in t.runs:
            if r.error and not r.warmup:
                return r.error
    return "no trial produced a usable run"


@dataclass
class MeasureResult:
    commit: Commit
    trials: dict[str, list[TrialResult]]  # per mode, in the order they ran


def measure(
    ws: Workspace,
    rev: str,
    modes: Sequence[str],
    trials: int,
    progress: Progress | None = None,
    *,
    purpose: str = "measure",
    wait_idle_s: float = 0.0,
) -> MeasureResult:
    """Run ``trials`` trials of each mode at one commit, interleaved (A B B A ...), and store them."""
    commit = ws.repo.resolve(rev)
    for m in modes:
        ws.config.mode(m)
    preflight(ws.config)
    runner = TrialRunner(ws, progress, wait_idle_s=wait_idle_s, client_rev=commit.sha)
    out: dict[str, list[TrialResult]] = {m: [] for m in modes}
    for i in range(trials):
        for m in interleaved(modes, i):
            out[m].append(runner.trial(commit, m, purpose=purpose))
    return MeasureResult(commit=commit, trials=out)


@dataclass
class CompareResult:
    a: Commit
    b: Commit
    mode: str
    comparison: Comparison
    trials_a: list[TrialResult]
    trials_b: list[TrialResult]
    history: list[str]
    attribution: str | None
    comparison_id: int
    metric: dict | None = None  # the description stored with it (metrics.Metric.as_json)


def compare_commits(
    ws: Workspace,
    a_rev: str,
    b_rev: str,
    mode: str,
    progress: Progress | None = None,
    *,
    min_trials: int = 2,
    max_trials: int | None = None,
    wait_idle_s: float = 0.0,
    env_from: str | None = None,
) -> CompareResult:
    """A vs B with interleaved trials (A B B A ...) until the verdict is clear or the budget is spent.
    ``env_from``: both run in that commit's environment ([environment]), so what differs is the code alone."""
    progress = progress or Progress()
    cfg = ws.config
    mode_cfg = cfg.mode(mode)
    a, b = ws.repo.resolve(a_rev), ws.repo.resolve(b_rev)
    if ws.environments is not None:  # both sides resolve as of one date: the later commit's
        ws.environments.anchor(b if ws.repo.is_ancestor(a.sha, b.sha) else a)
        if env_from is not None:
            ws.environments.env_from = ws.repo.resolve(env_from)
    elif env_from is not None:
        raise UsageError(
            f"--env-from {env_from} runs both commits in one commit's environment, but the config has no [environment] "
            f"table: every commit already runs in target.python as it is. Drop --env-from, or add [environment]."
        )
    preflight(ws.config)
    max_trials = max_trials or cfg.stats.max_trials_per_commit or max(cfg.stats.max_trials_total // 2, min_trials)
    noise = noise_model(ws, [mode])
    progress.info(f"noise model: {noise.describe()}")
    runner = TrialRunner(ws, progress, wait_idle_s=wait_idle_s, client_rev=a.sha)  # A's client for both
    ta: list[TrialResult] = []
    tb: list[TrialResult] = []
    cmp: Comparison | None = None
    i = 0
    looks = 0  # every look decides at a share of alpha (stats.LOOK_ALPHA_SHARE): stopping early stays honest
    while True:
        for commit, bucket in interleaved([(a, ta), (b, tb)], i):
            bucket.append(runner.trial(commit, mode, purpose="compare"))
        i += 1
        sa = [t.summary for t in ta if t.summary is not None]
        sb = [t.summary for t in tb if t.summary is not None]
        if len(sa) >= min_trials and len(sb) >= min_trials:
            looks += 1
            cmp = compare_sequential(
                sa, sb, noise, cfg.stats, look=looks, max_looks=max(max_trials - min_trials + 1, 1),
                higher_is_better=describe_metric(cfg).higher_is_better,
            )
            progress.info(f"after {len(sa)}+{len(sb)} trials: {cmp.verdict.value} ({cmp.effect_pct:+.1f}%)")
            if cmp.verdict is not Verdict.INCONCLUSIVE:
                break
        if i >= max_trials:
            break
    unusable = [(c, ts) for c, ts, s in ((a, ta, sa), (b, tb, sb)) if not s]
    if unusable:  # a side without one usable trial: nothing to compare, and nothing to store as a comparison
        c, ts = unusable[0]
        last = next((t.error for t in reversed(ts) if t.error), None) or "no usable run"
        raise WorkloadError(
            f"compare: none of the {len(ts)} trial{'s' if len(ts) != 1 else ''} of {c.short} "
            f"({'A' if c is a else 'B'}) gave a usable result, so there is nothing to compare (the trials are "
            f"stored in the results database, each with its error). The last one said: {last}"
        )
    if cmp is None:  # too few usable trials for a look: judge what there is (inconclusive)
        cmp = compare(sa, sb, noise, cfg.stats, higher_is_better=describe_metric(cfg).higher_is_better)
    history = [
        line for line in (
            history_line(c.short, ts, ws.store.trials(commit=c.sha, mode=mode_cfg.name), noise, describe_metric(cfg)) for c, ts in ((a, ta), (b, tb))
        ) if line
    ]
    attribution = attribution_line(ta + tb, higher_is_better=describe_metric(cfg).higher_is_better)
    cid = ws.store.record_comparison(
        a.sha, b.sha, mode, cmp, metric=mode,
        trial_ids_a=[t.id for t in ta], trial_ids_b=[t.id for t in tb], bisection_id=None,
        metric_info=describe_workload(cfg.workload).as_json(),  # one mode: its parts' unit, never a ratio
    )
    return CompareResult(a, b, mode, cmp, ta, tb, history, attribution, cid, describe_workload(cfg.workload).as_json())

