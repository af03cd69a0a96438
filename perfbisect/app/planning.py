"""What bisecting a range would measure and cost, before anything is built or run: the range between
two revisions, its plan (``plan``: which commits are measured, which not, and why, with the warnings a
long range, an uncached build step, a requirement set that cannot resolve or a benchmark file that is not the
user's earn), the checks `run` makes at its
endpoints, and the estimate (``plan_estimate``: the search simulated with the noise `run` would start
from and the regression the endpoints' stored trials show) behind `perfbisect plan` and `run`'s
budget question (``over_budget``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..config import deprecations
from ..engine import cost
from ..engine.changepoint import SPARSE_ABOVE, sparse_footprint
from ..errors import EnvironmentBuildError, UsageError
from ..git.plan import Plan, PlanWarning, plan_range, step_plans
from ..git.skips import skipped_commits
from ..git.targets import active_filters
from ..measure import rust_extensions
from ..measure.versions import check_target_python
from ..measure.workload_files import file_warnings
from ..runtime.progress import Progress
from .workspace import Workspace
from ..metrics import describe as describe_metric
from ..model import Commit, median, pct
from ..settings import Config
from ..workload_kinds import kind_of
from .calibration import noise_model


def range_of(ws: Workspace, good: str, bad: str) -> tuple[Commit, Commit, list[Commit]]:
    """good and bad resolved, and the first-parent commits between them (good and bad one commit: nothing to bisect)."""
    good_c = ws.repo.resolve(good)
    bad_c = ws.repo.resolve(bad)
    if good_c.sha == bad_c.sha:
        raise UsageError(
            f"good ({good}) and bad ({bad}) are the same commit {good_c.short}: there is nothing to "
            f"bisect. Pass the last commit known to be fast as good and a later one as bad."
        )
    commits = ws.repo.first_parent_range(good_c.sha, bad_c.sha)
    if ws.environments is not None:
        ws.environments.anchor(bad_c)  # unpinned requirements resolve as of the bad endpoint's date
    return good_c, bad_c, commits


def check_endpoints(ws: Workspace, good: Commit, bad: Commit, progress: Progress | None = None) -> None:
    """The stack must apply at both ends, and both ends' environments must resolve and install: a bisection
    between untestable endpoints can only guess. Both environments are made here, before any trial."""
    if ws.stack is not None:
        for label, commit in (("good", good), ("bad", bad)):
            check = ws.stack.check_at(commit)
            if not check.ok:
                raise UsageError(_endpoint_conflict_message(label, commit, check.conflict))
    refusal = rust_extensions.problem(ws.config.environment, ws.repo, [good, bad])
    if refusal is not None and refusal.kind == "rust-offline":
        raise UsageError(refusal.message)
    if ws.environments is None:
        return
    for label, commit in (("good", good), ("bad", bad)):
        try:
            env = ws.environments.ensure(commit)
        except EnvironmentBuildError as exc:
            raise UsageError(_endpoint_env_message(label, commit, str(exc))) from None
        if progress is not None and not env.cached:
            progress.info(f"{label} endpoint {commit.short}: built the environment {env.key[:10]} ({len(env.lock.packages)} "
                          f"packages) in {env.seconds:.1f} s")


def _endpoint_env_message(label: str, commit: Commit, why: str) -> str:
    return (
        f"The {label} endpoint {commit.short} cannot get its environment: {why}. Nothing was measured. Pick a {label} "
        f"commit whose requirements resolve and install here (`perfbisect plan` lists the environments of the range), "
        f"or change [environment] (index_url, find_links for a wheelhouse, overrides for a version pinned by hand)."
    )


def _endpoint_conflict_message(label: str, commit: Commit, conflict) -> str:
    return (
        f"The patch stack does not apply at the {label} endpoint {commit.short}: {conflict.describe()}. "
        f"Pick a {label} commit where it applies (see `perfbisect patches check good=.. bad=..`), or add a "
        f"[[patches.variants]] entry with a version of that patch for this part of history."
    )


def endpoint_conflict(plan: Plan) -> str | None:
    """Why `run` would refuse a planned range (the stack conflicts at an endpoint, or an endpoint's environment
    cannot be made), else None."""
    for label, entry in (("good", plan.entries[0]), ("bad", plan.entries[-1])):
        if entry.skipped:
            return _endpoint_conflict_message(label, entry.commit, entry.conflict)
        refusal = next((w for w in plan.warnings if w.kind == "rust-offline"), None)
        if refusal is not None:
            return refusal.message
        group = next((g for g in plan.environments if entry.commit.sha in g.commits), None)
        if group is not None and group.problem:
            return _endpoint_env_message(label, entry.commit, group.problem)
    return None


def plan_candidates(plan: Plan) -> int:
    """The commits a bisection of this plan searches over (untestable ones cost a build attempt)."""
    return sum(1 for e in plan.entries if e.measure or (e.skipped and not e.filtered))


def plan(ws: Workspace, good: str, bad: str, check_patches: bool = True, progress: Progress | None = None) -> Plan:
    """Which commits of good..bad would be measured, which not, and why (nothing is built or run; each
    distinct requirement set is resolved by uv, and kept)."""
    good_c, bad_c, _ = range_of(ws, good, bad)
    check_target_python(ws.config.target.python)
    return plan_between(ws, good_c, bad_c, check_patches=check_patches and ws.stack is not None, progress=progress)


def plan_between(ws: Workspace, good_c: Commit, bad_c: Commit, check_patches: bool = False,
                 progress: Progress | None = None) -> Plan:
    """The plan of a range with the target's filters (named) and the commits marked untestable."""
    skips = {sha: s.describe() for sha, s in skipped_commits(ws.repo, ws.config).items()}
    active = active_filters(ws.config)
    result = plan_range(ws.repo, good_c.sha, bad_c.sha, ws.filters, ws.stack, check_patches=check_patches, skipped=skips)
    long = long_range_warning(result, ws.config.stats.max_trials_total)
    retiring = tuple(PlanWarning("deprecated-key", text) for text in deprecations(ws.config))
    result = replace(result, default_filters=active.defaults, default_filters_of=active.defaults_of,
                     user_filters=active.user, filters_note=active.note,
                     warnings=result.warnings + ((long,) if long else ()) + retiring)
    result = _with_build_steps(ws, result)
    result = _with_rust_extensions(ws, result)
    result = _with_workload_files(ws, result, good_c, bad_c)
    return _with_environments(ws, result, progress)


def _with_workload_files(ws: Workspace, result: Plan, good_c: Commit, bad_c: Commit) -> Plan:
    """A warning for each file the workload command names that is untracked, edited or missing at an endpoint and
    not in workload.files: the trial would run another benchmark than the user's, or fail."""
    if kind_of(ws.config.workload).serves:
        return result
    found = file_warnings(ws.config, ws.repo, (("good endpoint", good_c), ("bad endpoint", bad_c)))
    return replace(result, warnings=result.warnings + tuple(PlanWarning("workload-file", w) for w in found))


def _with_rust_extensions(ws: Workspace, result: Plan) -> Plan:
    """A warning where commits of the range build SGLang's Rust extensions on demand and this machine cannot build
    them before the server (no cargo), and a refusal where it would fetch crates on an offline node."""
    problem = rust_extensions.problem(ws.config.environment, ws.repo, result.commits)
    return replace(result, warnings=result.warnings + ((problem,) if problem else ()))


def _with_environments(ws: Workspace, result: Plan, progress: Progress | None = None) -> Plan:
    """``result`` with the range's environments by lock (every distinct requirement set resolved by uv), what
    moves between them, and a warning for commits whose requirements cannot be resolved (untestable)."""
    environments = ws.environments
    if environments is None:
        return result
    progress = progress or Progress()
    cfg = ws.config.environment

    def said(done: int, total: int, elapsed: float) -> None:
        progress.detail(f"resolving environments with uv: {done}/{total} requirement sets ({elapsed:.0f} s)")

    groups = tuple(environments.groups(result.commits, on_progress=said))
    distinct, seconds = environments.last_resolution
    policy = cfg.resolve_date
    as_of = {"bad": "the bad endpoint's commit date", "commit": "each commit's own date", "now": "today (no cut-off)"}
    dates = sorted({g.resolved_as_of for g in groups if g.resolved_as_of})
    when = (f"{dates[0]}" if len(dates) == 1 else f"{len(dates)} dates") if dates else "now"
    unresolved = sum(len(g.commits) for g in groups if g.unavailable)
    note = (f"{cfg.requirements} resolved by uv as of {as_of.get(policy, policy)} ({when}): {distinct} requirement "
            f"set{'s' if distinct != 1 else ''} in {seconds:.1f} s"
            + (f"; {unresolved} commits not resolved here" if unresolved else ""))
    warnings = []
    for g in groups:
        if g.problem:
            warnings.append(PlanWarning("env-unresolvable", f"{g.span()}: {g.problem}. Those commits would be skipped as "
                                        f"untestable (never blamed)."))
        elif g.unavailable:
            warnings.append(PlanWarning("env-unavailable", f"{g.span()}: not resolved here: {g.unavailable}"))
    return replace(result, environments=groups, environments_note=note, warnings=result.warnings + tuple(warnings))


def _with_build_steps(ws: Workspace, result: Plan) -> Plan:
    """``result`` with its build steps over the range, and a warning for each compiled step that would run
    at every trial (no artifacts to restore) or whose sources exist at no commit of the range."""
    steps = ws.config.build.steps
    if not steps:
        return result
    plans = step_plans(ws.repo, result.commits, steps)
    warnings = []
    for step, sp in zip(steps, plans):
        if not step.python_only and not sp.cached:
            warnings.append(PlanWarning(
                "build-step-uncached",
                f"build step '{step.name}' declares no artifacts, so nothing of it can be restored: it runs again at "
                f"every trial of every commit. Add artifacts = [...] (what it builds, relative to the worktree) to cache "
                f"it by the content of its paths, or python_only = true if it only checks Python.",
            ))
        if step.sources and sp.spans and all(span.source is None for span in sp.spans):
            warnings.append(PlanWarning(
                "build-step-no-sources",
                f"build step '{step.name}': none of its sources ({', '.join(step.sources)}) is a directory at any "
                f"commit of the range, so it builds nothing. Fix build.steps[].sources (SGLang's kernels are in "
                f"sgl-kernel/ until 2026-07-28 and in python/sglang/kernels/aot/ after).",
            ))
    return replace(result, build_steps=plans, warnings=result.warnings + tuple(warnings))


def long_range_warning(plan: Plan, max_trials: int) -> PlanWarning | None:
    """A range past changepoint.SPARSE_ABOVE candidates: say how the search bounds what it holds, and what."""
    n = sum(1 for i, e in enumerate(plan.entries) if e.measure or e.skip or i in (0, len(plan.entries) - 1))
    if n <= SPARSE_ABOVE:
        return None
    edges, hypotheses, size = sparse_footprint(n, max_trials)
    return PlanWarning(
        "long-range",
        f"Long range: {n:,} candidate commits. Past {SPARSE_ABOVE} the search does not score each of the "
        f"{n * (n - 1) // 2:,} pairs of commits: it scores bins of commits between the ones it measured, split "
        f"where the change most probably is, so after {max_trials} trials (stats.max_trials_total) `run` holds at "
        f"most {edges} bin edges and {hypotheses:,} hypotheses (about {size / 1e6:.0f} MB besides the commit list) "
        f"and each decision costs about what one on 200 commits does. Every halving of the range costs about "
        f"one more trial: a later good or an earlier bad saves them.",
    )


def endpoint_effect(ws: Workspace, good: str, bad: str, *, besides: int | None = None) -> cost.Effect | None:
    """The regression the endpoints' stored trials on this host show (percent, worse direction, with the trial
    counts and gap behind it), or None when either has none (or the metric is a ratio of modes). ``besides``:
    a bisection whose own trials are left out (a resumed one's estimate is the one it started with)."""
    cfg = ws.config
    if len(cfg.metric_modes) != 1:
        return None
    mode = cfg.mode(cfg.metric_modes[0])
    key = ws.noise_key(mode)
    own = {t.id for t in ws.store.trials(bisection_id=besides, status=None)} if besides is not None else set()
    values = []
    for sha in (good, bad):
        vs = [t.summary for t in ws.store.trials(commit=sha, mode=mode.name)
              if t.summary is not None and t.identity.noise_key == key and t.id not in own]
        if not vs:
            return None
        values.append((float(median(vs)), len(vs)))
    gap = pct(values[1][0] - values[0][0])
    worse = -gap if describe_metric(cfg).higher_is_better else gap
    return cost.Effect(worse, "endpoints", good_trials=values[0][1], bad_trials=values[1][1], gap_pct=gap)


def check_effect(cfg: Config, effect_pct: float | None) -> bool:
    """A clear error for a `--effect` that cannot be a regression of this metric; its direction."""
    higher = describe_metric(cfg).higher_is_better
    if effect_pct is not None and not (0 < effect_pct < (100 if higher else math.inf)):
        raise UsageError(
            f"--effect is the size of the regression in percent, how much worse the bad commit is "
            f"({'between 0 and 100 for a metric where higher is better' if higher else 'above 0'}; e.g. --effect 15); "
            f"got {effect_pct:g}."
        )
    return higher


def trial_time(ws: Workspace) -> cost.TrialTime:
    """What one trial of this config takes on this host: its stored trials' durations (same modes and workload,
    start to finish), else ``[cost] trial_minutes``."""
    durations: list[float] = []
    for name in ws.config.metric_modes:
        key = ws.noise_key(ws.config.mode(name))
        durations += [
            t.finished_at - t.started_at for t in ws.store.trials(noise_key=key, status=None)
            if t.finished_at and t.started_at and t.finished_at > t.started_at
        ]
    return cost.trial_time(durations, ws.config)


def plan_estimate(ws: Workspace, plan: Plan, effect_pct: float | None = None, budget_s: float = cost.SIM_BUDGET_S) -> cost.Estimate:
    """`plan`'s estimate: the search simulated with the noise `run` would start from and the
    regression the user states, else the one the endpoints' stored trials show, else the default."""
    higher = check_effect(ws.config, effect_pct)
    effect = cost.Effect(effect_pct, "given") if effect_pct is not None else endpoint_effect(ws, plan.good.sha, plan.bad.sha)
    return cost.estimate(
        ws.config, trial_time(ws), plan_candidates(plan), noise_model(ws, ws.config.metric_modes), effect,
        higher_is_better=higher, budget_s=budget_s,
    )


@dataclass(frozen=True)
class OverBudget:
    """A bisection about to start whose estimate exceeds ``[cost] budget_gpu_hours``: `run` asks first."""

    estimate: cost.Estimate
    budget: float  # [cost] budget_gpu_hours


def over_budget(ws: Workspace, good: str, bad: str) -> OverBudget | None:
    """Before a bisection of good..bad starts: its estimate when that exceeds ``[cost] budget_gpu_hours``;
    None without a budget (the range is then not even planned), or when the estimate is within it or
    its cost unknown (no trial time)."""
    budget = ws.config.cost.budget_gpu_hours
    if not budget:
        return None
    est = plan_estimate(ws, plan(ws, good, bad, check_patches=False))
    if est.gpu_hours is None or est.gpu_hours <= budget:
        return None
    return OverBudget(est, budget)


@dataclass(frozen=True)
class PlannedRange:
    """`perfbisect plan`'s answer: the range's plan, what bisecting it would cost, and why `run` would
    refuse it (``endpoint_conflict``: the patch stack conflicts at an endpoint), else None."""

    plan: Plan
    estimate: cost.Estimate
    conflict: str | None


def plan_and_estimate(ws: Workspace, good: str, bad: str, *, check_patches: bool = True,
                      effect_pct: float | None = None, progress: Progress | None = None) -> PlannedRange:
    """good..bad planned (``plan``) and its bisection estimated (``plan_estimate``, against ``effect_pct``
    when given). Builds and runs nothing."""
    planned = plan(ws, good, bad, check_patches=check_patches, progress=progress)
    return PlannedRange(planned, plan_estimate(ws, planned, effect_pct), endpoint_conflict(planned))



def prepare_environments(ws: Workspace, plan: Plan, progress: Progress | None = None) -> list:
    """Resolve and install the environment of every commit the plan would measure (its endpoints included),
    before any GPU time: per group of commits, what happened ("built in 12.3 s", "cached", or why not)."""
    if ws.environments is None:
        raise UsageError(
            "--prepare installs each commit's environment, but the config has no [environment] table: every commit "
            "runs in target.python as it is. Add [environment] requirements = \"python/pyproject.toml\" to make one "
            "environment per lock, or drop --prepare."
        )
    progress = progress or Progress()
    commits = [e.commit for i, e in enumerate(plan.entries) if e.measure or i in (0, len(plan.entries) - 1)]
    return ws.environments.prepare(commits, on_step=progress.info)
