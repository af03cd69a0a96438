"""Use cases: wire config, git, build, server, workload, sampler, store, statistics and search.

Each public function here is one thing a user asks for (run a bisection, measure a commit, compare
two, calibrate the noise, plan a range, check the machine, list or render what is stored). They
report progress through a ``Progress`` sink, raise ``PerfbisectError`` subclasses, and never print:
``cli.py`` does that. What they stand on: ``workspace`` (what a command opens, preflight, locks),
``trials`` (one server session per trial, observations) and ``render`` (results as text).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Callable, Sequence

from .engine import cost
from .executors import slurm
from .executors.local import LocalExecutor
from .executors.loop import Executor, SearchLoop
from .measure.calibration import (
    CalibrationNoise, StartingNoise, calibration_lines, calibration_noise, keep_noise, noise_model, noise_model_and_note,
    starting_noise_for,
)
from .engine.bisect import SearchPolicy
from .engine.observations import Done, Measure
from .engine.outcomes import settles
from .engine.search_replay import INDEX_REPLAY_WORK, SearchStart, observations_of, stats_over
from .settings import Config, StatsConfig
from .doctor import Finding, run_doctor
from .errors import StoreError, UsageError, WorkloadError
from .git.patches import PatchCheck, check_patches
from .git.gitrepo import TargetRepo
from .engine.changepoint import SPARSE_ABOVE, sparse_footprint
from .measure.envs import pin_groups
from .git.plan import Plan, PlanWarning, plan_range, step_plans
from .measure.run_allocation import RunsAdvice, runs_advice
from .git.skips import Skip, SkipList, skipped_commits
from .git.targets import active_filters
from .model import BisectOutcome, Commit, Comparison, Observation, TrialResult, TrialStatus, Verdict, log_of_pct, median, pct
from .metrics import DECODE, describe as describe_metric
from .metrics import describe_workload, stored_or_described
from .workload_kinds import kind_of
from .report.render import attribution_line, history_line, state_lines
from .engine.stats import NoiseModel, compare, compare_sequential
from .engine.regressed_path import decide as decide_path
from .store import (
    BisectionRecord, ObservationRecord, Store, StoreLocation, TrialPurpose, is_unfinished, locate, open_store,
)
from .measure.search_trials import interleaved, measure_modes, measured_trials
from .measure.trials import TrialRunner
from .measure.workspace import Progress, Workspace, exclusive, preflight  # Workspace, exclusive: the CLI opens through here

def measured_nothing(ws: Workspace, bisection_id: int) -> str | None:
    """When no trial of a bisection produced a number: why the first one failed (else None)."""
    return why_nothing_measured(ws.store.trials(bisection_id=bisection_id, status=None))


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


# ------------------------------------------------------------------------------------------------
# perfbisect run / resume


@dataclass
class BisectResult:
    bisection_id: int
    outcome: BisectOutcome
    commits: dict[str, Commit]
    filtered: list[Commit] = field(default_factory=list)
    db_path: Path | None = None
    state: list[str] = field(default_factory=list)  # system state over the bisection's trials
    more: str | None = None  # when inconclusive: what settling the tolerance would cost on this host
    metric: dict | None = None  # the description stored with it (metrics.Metric.as_json)
    resumed: dict | None = None  # `resume`: what of the stored bisection it reused and discarded (Resumed.as_json)


def _range(ws: Workspace, good: str, bad: str) -> tuple[Commit, Commit, list[Commit]]:
    good_c = ws.repo.resolve(good)
    bad_c = ws.repo.resolve(bad)
    if good_c.sha == bad_c.sha:
        raise UsageError(
            f"good ({good}) and bad ({bad}) are the same commit {good_c.short}: there is nothing to "
            f"bisect. Pass the last commit known to be fast as good and a later one as bad."
        )
    return good_c, bad_c, ws.repo.first_parent_range(good_c.sha, bad_c.sha)


def _check_endpoints(ws: Workspace, good: Commit, bad: Commit) -> None:
    """The stack must apply at both ends: a bisection between untestable endpoints can only guess."""
    if ws.stack is None:
        return
    for label, commit in (("good", good), ("bad", bad)):
        check = ws.stack.check_at(commit)
        if not check.ok:
            raise UsageError(_endpoint_conflict_message(label, commit, check.conflict))


def _endpoint_conflict_message(label: str, commit: Commit, conflict) -> str:
    return (
        f"The patch stack does not apply at the {label} endpoint {commit.short}: {conflict.describe()}. "
        f"Pick a {label} commit where it applies (see `perfbisect patches check good=.. bad=..`), or add a "
        f"[[patches.variants]] entry with a version of that patch for this part of history."
    )


def endpoint_conflict(plan: Plan) -> str | None:
    """Why `run` would refuse a planned range (the stack conflicts at an endpoint), else None."""
    for label, entry in (("good", plan.entries[0]), ("bad", plan.entries[-1])):
        if entry.skipped:
            return _endpoint_conflict_message(label, entry.commit, entry.conflict)
    return None


def plan_candidates(plan: Plan) -> int:
    """The commits a bisection of this plan searches over (untestable ones cost a build attempt)."""
    return sum(1 for e in plan.entries if e.measure or (e.skipped and not e.filtered))


def endpoint_effect(ws: Workspace, good: str, bad: str, *, besides: int | None = None) -> tuple[float, str] | None:
    """The regression the endpoints' stored trials on this host show (percent, worse direction, with a
    sentence saying so), or None when either has none (or the metric is a ratio of modes). ``besides``:
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
    return worse, f"the endpoints' stored trials on this host: {values[0][1]} good, {values[1][1]} bad, {gap:+.1f}%"


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
    effect = (effect_pct, "given: --effect") if effect_pct is not None else endpoint_effect(ws, plan.good.sha, plan.bad.sha)
    return cost.estimate(
        ws.config, trial_time(ws), plan_candidates(plan), noise_model(ws, ws.config.metric_modes), effect,
        higher_is_better=higher, budget_s=budget_s,
    )


def latest_unfinished(ws: Workspace) -> int:
    """Id of the newest bisection that did not finish, or a clear error when there is none."""
    record = ws.store.latest_unfinished_bisection()
    if record is None:
        raise UsageError(
            f"No unfinished bisection in {ws.db_path}. Start one with `perfbisect run good=REV bad=REV`, "
            f"or list past ones with `perfbisect log`."
        )
    return record.id


def stored_stats(record: BisectionRecord, base: StatsConfig) -> StatsConfig:
    """The [stats] a stored bisection started with (``search_replay.stats_over``)."""
    return stats_over(record.settings, record.metric, base)


def as_started(ws: Workspace, record: BisectionRecord) -> tuple[Workspace, dict[str, tuple]]:
    """``ws`` with the [stats] ``record`` started with, and what differs from the config's now
    ({key: (config's, the bisection's)}; empty when nothing does).

    A resumed search must decide as the uninterrupted one would: the metric its stored observations
    measure, the budget they count against, the thresholds its stored decisions were made under. The
    post-pull check starts a bisection on the mode that regressed (hook/check.py), and a config may be
    edited between Ctrl-C and `resume`: resumed with today's [stats], such a search measured another
    metric on top of the stored one (a speculative mode's throughput beside the baseline's: a fitted
    "drift" of that ratio) and spent its budget fitting it."""
    cfg = ws.config
    started = stored_stats(record, cfg.stats)
    kept = {f.name: (getattr(cfg.stats, f.name), getattr(started, f.name)) for f in fields(StatsConfig)
            if getattr(cfg.stats, f.name) != getattr(started, f.name)}
    if not kept:
        return ws, {}
    as_then = replace(cfg, stats=started)
    missing = [m for m in as_then.metric_modes if m not in cfg.modes]
    if missing:
        raise UsageError(
            f"Bisection #{record.id} measures [stats] metric = {started.metric!r}, and {cfg.path or 'the config'} "
            f"defines no mode {', '.join(repr(m) for m in missing)} any more: its stored observations could not be "
            f"continued. Put [modes.{missing[0]}] back as it was to resume it, or start a new `perfbisect run`."
        )
    return replace(ws, config=as_then), kept


def kept_line(bisection_id: int, kept: dict[str, tuple], cfg: Config) -> str:
    """The warning that a resumed bisection keeps the [stats] it started with, naming each that differs."""
    what = "; ".join(f"[stats] {k} = {then!r} (the config now: {now!r})" for k, (now, then) in kept.items())
    return (
        f"bisection #{bisection_id} started with other settings than {cfg.path or 'the config'} has now: {what}. "
        f"It resumes with the ones it started with, so that its stored observations and decisions stay one search "
        f"(start a new `perfbisect run` to search with the new ones)"
    )


@dataclass(frozen=True)
class Resumed:
    """What `resume` takes over from a stored bisection: its observations and the trials they hold (reused,
    never measured again), finished trials no observation holds yet (a ratio metric's first mode when the
    second was interrupted: used by the next observation of their commit), and the trials the interruption
    cut short (discarded: kept in the database, never completed or counted; their commit is measured again)."""

    bisection_id: int
    observations: int
    trials: int  # distinct stored trials the observations hold
    untestable: int  # observations without a value (patch conflict, build failure, marked untestable)
    reused: tuple[TrialResult, ...] = ()
    discarded: tuple[TrialResult, ...] = ()
    kept: dict[str, tuple] = field(default_factory=dict)  # [stats] kept as started: {key: (config's, bisection's)}

    def line(self) -> str:
        """One progress line: what was reused, what was discarded and why."""
        untestable = f", {self.untestable} untestable" if self.untestable else ""
        parts = [f"resuming bisection #{self.bisection_id}: {self.observations} stored observation"
                 f"{'s' if self.observations != 1 else ''} ({self.trials} trial{'s' if self.trials != 1 else ''}"
                 f"{untestable}) reused, none measured again"]
        for t in self.reused:
            parts.append(f"trial #{t.id} ({_trial_words(t)}) finished before the interruption but no observation "
                         f"holds it yet: used, not measured again")
        for t in self.discarded:
            parts.append(f"interrupted trial #{t.id} ({_trial_words(t)}, {_runs_words(t)}) "
                         f"discarded: a trial is one server session, so one cut short is kept in the database but "
                         f"never completed or counted, and its commit is measured again")
        return "; ".join(parts)

    def as_json(self) -> dict:
        return {
            "bisection": self.bisection_id, "observations": self.observations, "trials": self.trials,
            "untestable": self.untestable,
            "reused": [{"trial": t.id, "commit": t.identity.commit, "mode": t.identity.mode} for t in self.reused],
            "discarded": [{"trial": t.id, "commit": t.identity.commit, "mode": t.identity.mode, "runs": len(t.runs),
                           "measured_runs": sum(1 for r in t.runs if not r.warmup), "why": t.error}
                          for t in self.discarded],
            "settings_kept": {k: {"config": now, "bisection": then} for k, (now, then) in self.kept.items()},
        }


def _trial_words(t: TrialResult) -> str:
    return f"{t.identity.commit[:10]} [{t.identity.mode}]"


def _runs_words(t: TrialResult) -> str:
    """What a cut-short trial had stored: "2 measured runs and 1 warm-up run stored", "no run stored"."""
    measured = sum(1 for r in t.runs if not r.warmup)
    warm = len(t.runs) - measured
    parts = [f"{n} {what} run{'s' if n != 1 else ''}" for n, what in ((measured, "measured"), (warm, "warm-up")) if n]
    return " and ".join(parts) + " stored" if parts else "no run stored"


def resume_summary(store: Store, bisection_id: int, observations: Sequence[ObservationRecord],
                   kept: dict[str, tuple] | None = None) -> Resumed:
    """What resuming ``bisection_id`` reuses and discards (``Resumed``), from what the store holds.

    Reused unobserved trials are the finished ones of purpose `bisect` that no observation holds (what
    ``TrialRunner`` hands the resumed search instead of measuring them again); discarded ones are the
    trials of purpose `bisect` after the last one an observation holds that failed without a result:
    the interruption's (stored `interrupted: ...`, or `interrupted` when recovered after a kill). A trial
    still running in a cluster job is neither: the Slurm executor re-attaches to its job."""
    held = {tid for o in observations for tid in o.trial_ids}
    trials = store.trials(bisection_id=bisection_id, status=None, purpose=TrialPurpose.BISECT)
    last = max(held, default=0)
    reused = tuple(t for t in trials if t.id not in held and t.status is TrialStatus.OK and t.summary is not None)
    discarded = tuple(t for t in trials if t.id not in held and t.id > last and t.status is TrialStatus.FAILED
                      and not (t.job_id is not None and is_unfinished(t)))
    return Resumed(bisection_id, len(observations), len(held), sum(1 for o in observations if o.value is None),
                   reused, discarded, dict(kept or {}))


def run_bisection(
    ws: Workspace,
    good: str,
    bad: str,
    progress: Progress | None = None,
    *,
    wait_idle_s: float = 0.0,
    resume_id: int | None = None,
) -> BisectResult:
    """Bisect good..bad: confirm the endpoints differ, search, confirm the culprit; store everything."""
    progress = progress or Progress()
    cfg = ws.config
    store = ws.store
    metric = describe_metric(cfg)
    resumed: Resumed | None = None
    if resume_id is not None:
        record = store.resume_bisection(resume_id)
        good, bad = record.good, record.bad
        # One bisection is one search: it goes on with the [stats] it started with (its metric, budget and
        # thresholds), not today's, so its next decisions are the ones the uninterrupted search would make.
        ws, kept = as_started(ws, record)
        if kept:
            progress.warn(kept_line(record.id, kept, cfg))
        cfg = ws.config
        metric = stored_or_described(record.metric_info, cfg)
    good_c, bad_c, commits = _range(ws, good, bad)
    preflight(ws)
    _check_endpoints(ws, good_c, bad_c)
    plan = _plan(ws, good_c, bad_c)
    for warning in plan.warnings:
        progress.warn(str(warning))
    by_sha = {c.sha: c for c in commits}
    # Commits marked untestable stay candidates (a change next to one is reported as a set); the
    # search is told up front that they have no value, like a patch conflict found on the way.
    candidates = [e.commit for e in plan.entries if e.measure or e.skip or e.commit.sha in (good_c.sha, bad_c.sha)]
    marked = {e.commit.sha: e.skip for e in plan.entries if e.skip and not e.measure}
    filtered = [e.commit for e in plan.filtered]
    progress.info(
        f"range {good_c.short}..{bad_c.short}: {len(commits)} commits, {len(candidates)} candidates, "
        f"{len(filtered)} not measured (only paths the filters ignore)"
    )
    progress.info(f"filters: {plan.filters_note}")
    shas = [c.sha for c in candidates]
    higher = describe_metric(cfg).higher_is_better
    if resume_id is not None and record.search_start:
        # The search resumes from what it started from (noise, endpoint history), not from what this host
        # has learned since: one bisection is one search, and its report replays exactly this one.
        start = SearchStart.from_json(record.search_start)
        progress.info(f"noise model (as this bisection started): {start.noise.describe()}")
    else:
        noise, noise_note = noise_model_and_note(ws, cfg.metric_modes)
        progress.info(f"noise model: {noise.describe()}")
        if noise_note:
            progress.warn(noise_note)
        start = SearchStart(noise, tuple(endpoint_history(ws, (good_c, bad_c))), higher)
    noise = start.noise
    if resume_id is None:
        bisection_id = store.begin_bisection(
            good=good_c.sha, bad=bad_c.sha, commits=shas, metric=cfg.stats.metric,
            settings=cfg.stats, target=str(cfg.target.repo), metric_info=describe_metric(cfg).as_json(),
            search_start=start.as_json(),
        )
        observations: list[Observation] = []
    else:
        bisection_id = resume_id
        if list(record.commits) != shas:
            progress.warn("the candidate list changed since this bisection started (config filters?); using the stored one")
            shas = list(record.commits)
        stored_observations = store.observations(bisection_id)
        observations = observations_of(stored_observations)
        resumed = resume_summary(store, bisection_id, stored_observations, kept)
        progress.info(resumed.line())
    untestable = {o.commit for o in observations if o.value is None}
    for sha in (s for s in shas if s in marked and s not in untestable):
        obs = Observation(commit=sha, value=None, seq=len(observations))
        store.add_observation(bisection_id, obs.seq, sha, None, [])
        observations.append(obs)
        progress.info(f"{sha[:10]} {marked[sha]}: never measured, never blamed")
    policy = SearchPolicy(shas, cfg.stats, noise, history=start.history, higher_is_better=start.higher_is_better)
    try:
        outcome = _search(ws, policy, observations, bisection_id, by_sha, noise, progress, wait_idle_s).outcome
        outcome = _expand_merge_culprit(ws, outcome, by_sha)
        outcome = which_path(ws, outcome, shas, bisection_id, noise, progress, wait_idle_s)
    finally:
        progress.done()
    store.finish_bisection(bisection_id, outcome)
    if cfg.executor.kind == "local":  # trials on cluster nodes measured their noise, not this host's
        keep_noise(
            ws, cfg.metric_modes, outcome.noise_sigma_pct, outcome.noise_dof,
            f"bisection #{bisection_id}: residual noise of {outcome.trials_used} trials after the change(s) and drift",
        )
    trials = store.trials(bisection_id=bisection_id, status=None)
    more = None
    if outcome.more_trials:  # what it would settle: the tolerance, or a check on the best answer left open
        more = cost.more_trials_line(cfg, trial_time(ws), outcome.more_trials, settles(outcome))
    return BisectResult(
        bisection_id=bisection_id, outcome=outcome, commits=by_sha, filtered=filtered, db_path=ws.db_path,
        state=state_lines(trials, gpu_target=kind_of(cfg.workload).serves), more=more, metric=metric.as_json(),
        resumed=resumed.as_json() if resumed is not None else None,
    )


def _search(ws: Workspace, policy: SearchPolicy, observations: list[Observation], bisection_id: int,
            by_sha: dict[str, Commit], noise: NoiseModel, progress: Progress, wait_idle_s: float) -> Done:
    """The search over the configured executor (``executors.loop``): its trials on this machine one at a time
    (``[executor] kind = "local"``), or as Slurm jobs up to ``executor.nodes`` at once; each observation stored
    as it lands with the decision that asked for it."""
    if ws.config.executor.kind == "slurm":
        executor: Executor = slurm.SlurmExecutor(ws, bisection_id, progress)

        def announce(measure: Measure, _observations: Sequence[Observation]) -> None:
            progress.info(f"{measure.commit[:10]} ({measure.phase}): {measure.reason}")
    else:
        runner = TrialRunner(ws, progress, wait_idle_s=wait_idle_s, client_rev=policy.commits[0])  # the good endpoint's client
        executor = LocalExecutor(runner, bisection_id, by_sha)
        announce = _LocalNarration(ws, policy, bisection_id, by_sha, noise, progress, len(observations))
    return SearchLoop(ws.store, policy, bisection_id, executor, progress, announce, observations).run()


class _LocalNarration:
    """What a local search says before each trial: where it stands and what is left (``search_status``)."""

    def __init__(self, ws: Workspace, policy: SearchPolicy, bisection_id: int, by_sha: dict[str, Commit],
                 noise: NoiseModel, progress: Progress, stored: int):
        cfg = ws.config
        self.stats, self.bisection_id, self.by_sha, self.progress, self.stored = cfg.stats, bisection_id, by_sha, progress, stored
        # The estimate the bisection started with: a resumed one leaves its own endpoint trials out, so its
        # "expected" count does not jump at the resume (one noisy trial a side is no better a guess of the effect).
        effect = endpoint_effect(ws, policy.commits[0], policy.commits[-1], besides=bisection_id)
        self.estimate = cost.estimate(cfg, trial_time(ws), len(policy.commits), noise, effect,
                                      higher_is_better=describe_metric(cfg).higher_is_better)
        self.started, self.best = time.monotonic(), ("", None)

    def __call__(self, action: Measure, observations: Sequence[Observation]) -> None:
        commit, estimate = self.by_sha[action.commit], self.estimate
        if action.best:
            self.best = (action.best, action.p)
        done_here = len(observations) - self.stored
        elapsed = time.monotonic() - self.started
        step_s = elapsed / done_here if done_here else (estimate.trial_s and estimate.trial_s * estimate.modes)
        status = search_status(self.bisection_id, action, len(observations), self.stats, estimate.trials, elapsed,
                               step_s or None, best=self.best, short=commit.short)
        self.progress.search(status)
        # numbered as the budget counts trials (an untestable commit tried is not one: the next attempt keeps its number)
        self.progress.info(f"[{status.trial}] {commit.short} ({action.phase}): {action.reason}")


def search_status(bisection_id: int, action: Measure, observations: int, stats: StatsConfig, expected: int,
                  elapsed_s: float, step_s: float | None, best: tuple[str, float | None] | None = None,
                  short: str | None = None) -> cost.SearchStatus:
    """Where the search stands before ``action``'s trial, for the progress line: the trial as the budget counts it
    (``Measure.trial``: never past stats.max_trials_total), the observations that were not trials of the budget
    (untestable commits), the estimate's own expected count, and the best answer (``best``: the latest one named,
    when this action names none)."""
    trial = action.trial or observations + 1
    name, p = (action.best, action.p) if action.best else (best or ("", None))
    return cost.SearchStatus(
        bisection_id, trial, stats.max_trials_total, expected, action.phase, short or action.commit[:10], name, p,
        elapsed_s, step_s, untestable=max(0, observations - (trial - 1)),
    )


def endpoint_history(ws: Workspace, endpoints: Sequence[Commit]) -> list[Observation]:
    """Stored trials of the endpoints from earlier days: they inform drift notes, never the verdict."""
    cfg = ws.config
    if len(cfg.metric_modes) != 1:
        return []
    mode = cfg.mode(cfg.metric_modes[0])
    today = time.strftime("%Y-%m-%d")
    out = []
    for commit in endpoints:
        for t in ws.store.trials(commit=commit.sha, mode=mode.name):
            day = time.strftime("%Y-%m-%d", time.localtime(t.started_at))
            if t.summary is None or day == today or t.identity.noise_key != ws.noise_key(mode):
                continue
            out.append(Observation(commit=commit.sha, value=t.summary, day=day[5:]))
    return out


def speculative_metric_mode(cfg: Config) -> str | None:
    """The one speculative mode the bisection metric decides on (``eagle3``, or the SPEC of a ratio), if any."""
    spec = [m for m in cfg.metric_modes if m in cfg.modes and cfg.modes[m].speculative]
    return spec[0] if len(spec) == 1 else None


def which_path(ws: Workspace, outcome: BisectOutcome, shas: Sequence[str], bisection_id: int, noise: NoiseModel,
               progress: Progress, wait_idle_s: float = 0.0) -> BisectOutcome:
    """A speculative mode's culprit: measure every other mode at the culprit and its parent
    (``stats.mode_trials`` each, interleaved; trials stored before an interruption are reused) and
    say whether the target model or the speculative path regressed (``regressed_path.decide``)."""
    cfg = ws.config
    n = cfg.stats.mode_trials
    spec = speculative_metric_mode(cfg)
    culprit = outcome.culprit
    if outcome.verdict is not Verdict.REGRESSED or not culprit or not n or spec is None or culprit not in shas:
        return outcome
    others = [m for m in cfg.modes if m != spec]
    at = shas.index(culprit)
    if not others or at == 0:
        return outcome
    stored = ws.store.trials(bisection_id=bisection_id)

    def have(sha: str, mode: str) -> int:
        return measured_trials(stored, sha, mode)

    # The parent: the last candidate before the culprit that the search measured (an untestable
    # neighbour has nothing to compare with).
    parent = next((s for s in reversed(shas[:at]) if have(s, spec)), shas[at - 1])
    pair = (ws.repo.resolve(parent), ws.repo.resolve(culprit))
    stats_noise = noise
    if outcome.noise_sigma_pct and outcome.noise_dof:  # this bisection's measured noise, when it has one
        stats_noise = NoiseModel(log_of_pct(outcome.noise_sigma_pct), outcome.noise_dof,
                                 f"bisection #{bisection_id}'s residual noise")
    metric = describe_metric(cfg)
    modes = [(m, cfg.modes[m].speculative) for m in cfg.modes]
    runner: TrialRunner | None = None
    measured = 0
    # n trials each; when that cannot tell the two paths apart (a noisy session), n more, once.
    for target in (n, 2 * n):
        missing = [m for m in (*others, spec) if any(have(c.sha, m) < target for c in pair)]
        if missing:
            progress.info(
                f"which path regressed: measuring {', '.join(missing)} at {pair[0].short} (before the culprit) and "
                f"{pair[1].short} (the culprit), up to {target} trials each, interleaved (stats.mode_trials)"
            )
            if cfg.executor.kind == "slurm":  # one job on one node measures them all, interleaved there
                measured += slurm.measure_modes(ws, bisection_id, pair, missing, target, progress)
                stored = ws.store.trials(bisection_id=bisection_id)
            else:
                runner = runner or TrialRunner(ws, progress, wait_idle_s=wait_idle_s)
                measured += len(measure_modes(runner, pair, missing, target, bisection_id, stored))
        trials = [t for t in stored if t.identity.commit in (parent, culprit)]
        verdict = decide_path(trials, spec_mode=spec, modes=modes, before=parent, after=culprit, noise=stats_noise,
                              settings=cfg.stats, higher_is_better=metric.higher_is_better,
                              decode_tok_s=metric.name == DECODE.name, measured=measured)
        if verdict.path != "unclear" or any(have(c.sha, m) < target for c in pair for m in others):
            break  # named, or nothing more to learn (a mode that does not start)
    progress.info(f"which path: {verdict.summary}")
    return replace(outcome, regressed_path=verdict)


def _expand_merge_culprit(ws: Workspace, outcome: BisectOutcome, by_sha: dict[str, Commit]) -> BisectOutcome:
    """A merge commit stands for its whole branch: name the merged commits as the culprit set."""
    if not outcome.culprit or not by_sha[outcome.culprit].is_merge:
        return outcome
    merged = ws.repo.merged_commits(by_sha[outcome.culprit])
    for c in merged:
        by_sha.setdefault(c.sha, c)
    note = (
        f" The first bad commit is a merge of {len(merged)} commits; one of them (or the merge itself) "
        f"changed performance: bisect the merged branch to narrow it down."
    )
    return replace(
        outcome,
        culprit_set=tuple(dict.fromkeys((outcome.culprit, *outcome.culprit_set, *(c.sha for c in merged)))),
        explanation=outcome.explanation + note,
    )

# ------------------------------------------------------------------------------------------------
# perfbisect measure / compare / calibrate


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
    preflight(ws)
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
) -> CompareResult:
    """A vs B with interleaved trials (A B B A ...) until the verdict is clear or the budget is spent."""
    progress = progress or Progress()
    cfg = ws.config
    mode_cfg = cfg.mode(mode)
    a, b = ws.repo.resolve(a_rev), ws.repo.resolve(b_rev)
    preflight(ws)
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


@dataclass
class CalibrateResult:
    commit: Commit  # REV
    against: Commit  # the build whose sessions interleaved with REV's (its first parent by default)
    mode: str
    noise: CalibrationNoise  # what this calibration alone measured (stored with its dof)
    trials: list[TrialResult]  # in the order they ran
    lines: list[str]
    start: StartingNoise  # the figure the next bisection on this host starts from, and why
    next_noise: NoiseModel  # what it decides with (that figure pooled with stored A/A trials)
    spread_s: float = 0.0  # from the first session's start to the last one's end
    spread_minutes: float = 0.0  # what was asked for (--spread-minutes)
    runs: RunsAdvice | None = None  # how many runs per trial this host's noise and timings make cheapest


def calibrate(
    ws: Workspace, rev: str, mode: str, trials: int, progress: Progress | None = None, *,
    against: str | None = None, spread_minutes: float = 0.0, wait_idle_s: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
) -> CalibrateResult:
    """Measure the noise a bisection on this machine meets: ``trials`` sessions each of REV and a
    second build (``against``, else REV's first parent) interleaved A B B A …, through the same
    trial path as a bisection (checkout, patch stack, build, server, warm-up, runs), optionally
    paced over ``spread_minutes``. Stores σ_b with its true dof and says how it compares with what
    bisections on this host measured and which figure the next bisection starts from.
    """
    if trials < 2:
        raise UsageError(
            "calibrate needs at least 2 trials per build (--trials 2) to see any between-session noise; 5–10 is better."
        )
    if spread_minutes < 0 or not math.isfinite(spread_minutes):
        raise UsageError(f"--spread-minutes is the time to spread the sessions over, 0 or more; got {spread_minutes:g}.")
    progress = progress or Progress()
    ws.config.mode(mode)
    a = ws.repo.resolve(rev)
    b = _calibration_partner(ws, a, rev, against)
    preflight(ws)
    runner = TrialRunner(ws, progress, wait_idle_s=wait_idle_s, client_rev=a.sha)
    schedule = [c for i in range(trials) for c in interleaved([a, b], i)]
    progress.info(
        f"calibrate [{mode}]: {trials} sessions each of {a.short} (A) and {b.short} (B{', its first parent' if against is None else ''}), "
        f"interleaved A B B A" + (f", spread over {spread_minutes:g} min" if spread_minutes else "")
    )
    done: list[TrialResult] = []
    began = time.monotonic()
    for n, commit in enumerate(schedule):
        due = began + n * spread_minutes * 60.0 / max(len(schedule) - 1, 1)
        pause = due - time.monotonic()
        if pause > 0:
            progress.info(f"pausing {cost.format_duration(pause)} before session {n + 1} of {len(schedule)} (--spread-minutes {spread_minutes:g})")
            sleep(pause)
        done.append(runner.trial(commit, mode, purpose="calibrate"))
    spread_s = time.monotonic() - began
    measured = calibration_noise(done)
    if measured.sigma_b_pct is not None:
        keep_noise(
            ws, [mode], measured.sigma_b_pct, measured.dof,
            f"calibrate: {'+'.join(map(str, measured.trials))} trials of {a.short} and {b.short} interleaved over "
            f"{cost.format_duration(spread_s)}",
            sigma_w=measured.sigma_w,
        )
    start = starting_noise_for(ws, mode)
    next_noise = noise_model(ws, [mode])
    cfg = ws.config
    lines = [
        f"{a.short} (A) and {b.short} (B) [{mode}]: {len(done)} sessions interleaved A B B A over "
        f"{cost.format_duration(spread_s)}, each a bisection's trial (checkout, patch stack, build, server, "
        f"{cfg.workload.warmup} warm-up, runs)"
    ]
    lines += calibration_lines(measured, start, next_noise, budget_trials=cfg.stats.max_trials_per_commit or cfg.stats.max_trials_total // 2, alpha=cfg.stats.alpha)
    attribution = attribution_line(done, higher_is_better=describe_metric(cfg).higher_is_better)
    if attribution:
        lines.append(attribution)
    advice = runs_advice(ws, mode)
    lines.append(advice.line())
    return CalibrateResult(a, b, mode, measured, done, lines, start, next_noise, spread_s, spread_minutes, advice)


def _calibration_partner(ws: Workspace, a: Commit, rev: str, against: str | None) -> Commit:
    """The build whose sessions interleave with REV's: ``against``, else REV's first parent."""
    if against is None:
        if not a.parents:
            raise UsageError(
                f"{rev} ({a.short}) has no parent to interleave its sessions with: pass --against REV2 (any other "
                f"build; only the spread within each build is counted)."
            )
        b = ws.repo.resolve(a.parents[0])
        what = f"{rev}'s first parent {b.short}"
    else:
        b = ws.repo.resolve(against)
        what = f"--against {against} ({b.short})"
        if b.sha == a.sha:
            raise UsageError(
                f"--against {against} is {rev} itself ({a.short}): sessions of one build back to back measure less "
                f"noise than a bisection meets. Pass another build, or leave --against out for {rev}'s first parent."
            )
    if ws.stack is not None:
        check = ws.stack.check_at(b)
        if not check.ok:
            raise UsageError(
                f"The patch stack does not apply at {what}: {check.conflict.describe()}. Pass --against REV2 "
                f"where it applies (see `perfbisect patches check`)."
            )
    return b


# ------------------------------------------------------------------------------------------------
# perfbisect plan / patches check / gc / log


def plan(ws: Workspace, good: str, bad: str, check_patches: bool = True) -> Plan:
    """Which commits of good..bad would be measured, which not, and why (nothing is built or run)."""
    good_c, bad_c, _ = _range(ws, good, bad)
    return _plan(ws, good_c, bad_c, check_patches=check_patches and ws.stack is not None)


def _plan(ws: Workspace, good_c: Commit, bad_c: Commit, check_patches: bool = False) -> Plan:
    """The plan of a range with the target's filters (named) and the commits marked untestable."""
    skips = {sha: s.describe() for sha, s in skipped_commits(ws.repo, ws.config).items()}
    active = active_filters(ws.config)
    result = plan_range(ws.repo, good_c.sha, bad_c.sha, ws.filters, ws.stack, check_patches=check_patches, skipped=skips)
    long = long_range_warning(result, ws.config.stats.max_trials_total)
    result = replace(result, default_filters=active.defaults, default_filters_of=active.defaults_of,
                     user_filters=active.user, filters_note=active.note,
                     warnings=result.warnings + ((long,) if long else ()))
    result = _with_build_steps(ws, result)
    if ws.pins is None or ws.envs is None:
        return result
    build = ws.config.build
    groups = tuple(pin_groups(result.commits, ws.pins, ws.envs, build.wheel_dir, build.index_url))
    warnings = [PlanWarning(
        "pins-unsatisfiable",
        f"{g.span()} pin {', '.join(g.requirements)}, whose environment cannot be built: {g.problem}. Those commits "
        f"would be skipped as untestable (never blamed).",
    ) for g in groups if g.problem]
    pinned = {name for g in groups for name in g.pins}
    rules = ws.pins.rules
    for role in rules.roles:  # a package no commit pins (renamed away?) runs on whatever is installed, silently
        names = rules.family(role)[1]
        if not pinned & set(names):
            warnings.append(PlanWarning(
                "pin-not-found",
                f"[build] pinned_packages names {role}, but no commit of the range pins "
                f"{' or '.join(names)} in {' or '.join(build.pin_files)}: every commit runs on the {role} target.python "
                f"has. If the package was renamed, add the new name to [build] package_aliases "
                f"({role} = [{', '.join(repr(n) for n in names)}, \"NEW-NAME\"]).",
            ))
    return replace(result, pin_groups=groups, warnings=result.warnings + tuple(warnings))


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


def skip(config: Config, revs: Sequence[str], *, undo: bool = False, reason: str = "") -> tuple[list[Commit], list[Skip]]:
    """`perfbisect skip`: mark commits untestable (or unmark them with ``undo``); (changed, all marked now)."""
    repo = TargetRepo(config.target.repo)
    commits = [repo.resolve(r) for r in revs]
    marks = SkipList(config.cache_dir)
    changed = marks.remove(commits) if undo else (marks.add(commits, reason) or commits)
    return changed, sorted(skipped_commits(repo, config).values(), key=lambda s: (s.source, s.commit.author_date))


def patches_check(ws: Workspace, good: str, bad: str) -> list[PatchCheck]:
    """For every commit in good..bad: does the stack apply, and with which variant."""
    if ws.stack is None:
        raise UsageError(
            f"{ws.config.path} defines no patch stack: set [patches] dir = \"DIR\" (git format-patch files) "
            f"or branch/base, then run this again."
        )
    good_c, bad_c, commits = _range(ws, good, bad)
    return check_patches(ws.repo, good_c.sha, bad_c.sha, ws.stack)


def gc(ws: Workspace, build_cache: bool = False) -> list[str]:
    """Remove perfbisect's worktrees (and with ``build_cache`` the cached build artefacts and the
    pinned environments)."""
    removed = [f"worktree {p}" for p in ws.pool.gc()]
    if build_cache:
        size = ws.build_cache.total_bytes()
        ws.build_cache.clear()
        removed.append(f"build cache ({size / 1e6:.1f} MB)")
        if ws.envs is not None and ws.envs.lru_entries():
            count, before = len(ws.envs.lru_entries()), ws.envs.total_bytes()
            kept = ws.envs.clear()
            count, size = count - len(kept), before - ws.envs.total_bytes()
            removed.append(f"{count} pinned environment{'s' if count != 1 else ''} ({size / 1e6:.1f} MB"
                           f"{f'; {len(kept)} in use by a running command kept' if kept else ''})")
    return removed


# ------------------------------------------------------------------------------------------------
# perfbisect doctor / log


def doctor(config_path: Path, db: Path | None = None, launch: bool = False,
           range_: tuple[str, str] | None = None) -> list[Finding]:
    """Is this machine and config ready to give trustworthy numbers? One finding per check.

    The config and the ``Workspace`` are opened as every command opens them (what fails to open is
    itself a finding); ``launch`` also starts the server once under the locks a trial holds.
    """
    return run_doctor(config_path, db, launch=launch, range_=range_)


# ------------------------------------------------------------------------------------------------
# perfbisect report


def report_path(db: StoreLocation | Path | str, name: str, config: Config | None = None) -> Path:
    """Where a report goes by default: ``reports/`` beside a SQLite results file; for a database
    server, ``<cache_dir>/reports`` (see ``StoreLocation.reports_dir``). The name starts with the
    database's own (``results-bisection-1.html``): two databases in one folder keep their reports apart."""
    where = locate(db)
    return where.reports_dir(config.cache_dir if config is not None else None) / f"{where.report_prefix}{name}.html"


def stored_results(db: Path | str | None, config: Config | None) -> Store:
    """The results database a command that only reads it opens: ``db``, else the config's default."""
    path = db or (config.results_db if config is not None else None)
    if not path:
        raise UsageError(
            "No results database: pass --db PATH (e.g. .perfbisect/demo/results.sqlite) or --db URL, or run this "
            "where perfbisect.toml is (or with -c CONFIG) to use its database."
        )
    location = locate(path)
    if not location.exists() and not (location.path is not None and location.path.exists()):
        raise UsageError(f"No results database at {location}: pass --db PATH, or run `perfbisect run` first.")
    return open_store(location, recover=False, read_only=True)


def report(store: Store, which: str = "latest", out: Path | None = None, config: Config | None = None) -> tuple[Path, dict]:
    """Render one stored bisection (``N``, ``bN``), comparison (``cN``) or the ``latest`` of either."""
    from .git.commit_facts import bisection_facts, comparison_facts
    from .report import comparison_views, views as report_views
    from .report.report import render_report, write_html

    kind, number = _report_target(store, which)
    if kind == "bisection":
        view = report_views.bisection_view(store, number, config, facts=bisection_facts(store, number, config))
    else:
        view = comparison_views.comparison_view(store, number, config, facts=comparison_facts(store, number, config))
    if out is not None and Path(out).expanduser().is_dir():  # -o DIR: the report goes into it, by its usual name
        out = Path(out).expanduser() / f"{kind}-{number}.html"
    path = write_html(render_report(view), out or report_path(store.path, f"{kind}-{number}", config))
    return path, view


def _report_target(store: Store, which: str) -> tuple[str, int]:
    from .errors import PerfbisectError

    text = (which or "latest").strip().lower()
    if text == "latest":
        b = store.bisections(1)
        c = store.comparisons(1)
        if not b and not c:
            raise UsageError(f"{store.path} holds no bisection or comparison yet: run `perfbisect run good=REV bad=REV` first.")
        if b and (not c or b[0].started_at >= c[0].created_at):
            return "bisection", b[0].id
        return "comparison", c[0].id
    kind = "comparison" if text.startswith("c") else "bisection"
    digits = text.lstrip("bc#")
    if not digits.isdigit():
        raise UsageError(
            f"Cannot read report id '{which}': give a bisection id (3 or b3), a comparison id (c2) or 'latest' "
            f"(see `perfbisect log`)."
        )
    if kind == "bisection":
        try:
            store.bisection(int(digits))
        except PerfbisectError:
            raise UsageError(f"No bisection #{digits} in {store.path}. List the stored ones with `perfbisect log`.") from None
    return kind, int(digits)


def report_index(store: Store, directory: Path, config: Config | None = None, progress: Progress | None = None) -> Path:
    """A static site: every bisection's and comparison's report, and an index with a history chart per mode."""
    from .git.commit_facts import bisection_facts, commit_facts
    from .report import comparison_views, site_index, views as report_views
    from .report.report import render_index, render_report, write_html

    directory = Path(directory).expanduser().absolute()
    views = []
    for b in store.bisections(1 << 30):
        # A site of many reports replays each search on a tighter budget (coarse to fine: the last
        # steps and the overall shape stay; `perfbisect report N` shows more).
        views.append(report_views.bisection_view(store, b.id, config, replay_work=INDEX_REPLAY_WORK,
                                                 facts=bisection_facts(store, b.id, config)))
    for c in store.comparisons(1 << 30):
        views.append(comparison_views.comparison_view(store, c.id, config, facts=commit_facts(config, (c.a, c.b))))
    entries, history = site_index.index_entries(views)
    for view in views:  # entries are sorted by date: each view is written under its own name
        href = f"{view['kind']}-{view['id']}.html"
        write_html(render_report(view), directory / href)
        if progress:
            progress.detail(f"wrote {directory / href}")
    return write_html(render_index(entries, history, str(store.path)), directory / "index.html")


def report_quietly(progress: Progress | None, render: Callable[[], Path]) -> Path | None:
    """Write a command's report at its end; a failure to render never hides the verdict just measured."""
    from .errors import PerfbisectError

    try:
        return render()
    except (PerfbisectError, OSError) as exc:
        (progress or Progress()).warn(f"the HTML report could not be written: {exc}")
    except Exception as exc:  # a rendering bug: the measured verdict still prints and keeps its exit code
        (progress or Progress()).warn(
            f"the HTML report could not be rendered ({type(exc).__name__}: {exc}); this is a bug, please report it. "
            f"`perfbisect report` renders it again from the database once fixed."
        )
    return None


def calibration_report(ws: Workspace, result: CalibrateResult) -> Path:
    """The report of a calibration: its trials over time, the machine state and the noise it measured."""
    from .git.commit_facts import commit_facts
    from .report import comparison_views
    from .report.report import render_report, write_html

    stamp = time.strftime("%Y%m%d-%H%M%S")
    db = ws.db_path
    cfg = f" -c {ws.config.path}" if ws.config.path else ""
    per_build = max(sum(1 for t in result.trials if t.identity.commit == result.commit.sha), 2)
    spread = f" --spread-minutes {result.spread_minutes:g}" if result.spread_minutes else ""
    view = comparison_views.trials_view(
        ws.store, f"perfbisect calibrate: {result.commit.short} and {result.against.short} [{result.mode}], "
        f"{len(result.trials)} trials interleaved", "calibrate",
        result.trials, a=result.commit.sha, b=result.against.sha, lines=result.lines, config=ws.config,
        reproduce=[f"perfbisect calibrate {result.commit.sha} --against {result.against.sha} --mode {result.mode} "
                   f"--trials {per_build}{spread}{cfg} --db {db}"],
        facts=commit_facts(ws.config, (result.commit.sha, result.against.sha)),
    )
    view["id"] = f"{result.commit.short}-{stamp}"
    return write_html(render_report(view), report_path(db, f"calibrate-{result.commit.short}-{stamp}", ws.config))


# ------------------------------------------------------------------------------------------------
# What the command line shows around a bisection: worked out here, printed there (cli/bisection.py)


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
                      effect_pct: float | None = None) -> PlannedRange:
    """good..bad planned (``plan``) and its bisection estimated (``plan_estimate``, against ``effect_pct``
    when given). Builds and runs nothing."""
    planned = plan(ws, good, bad, check_patches=check_patches)
    return PlannedRange(planned, plan_estimate(ws, planned, effect_pct), endpoint_conflict(planned))


@dataclass(frozen=True)
class FinishedBisection:
    """What `run` and `resume` show after the search, besides its outcome."""

    broken: str | None  # why no trial produced a number (``measured_nothing``): exit 4, not 3
    report: tuple[Path, str] | None  # the HTML report and its short line; None when it could not be written (warned)
    spent: dict  # what it spent (``bisection_spent``)


def finished_bisection(ws: Workspace, result: BisectResult, progress: Progress) -> FinishedBisection:
    """After a bisection: whether anything was measured, its HTML report (a failure to write it is a
    warning, never hiding the verdict) and what it spent."""
    broken = measured_nothing(ws, result.bisection_id)
    written = _bisection_report(ws, result, progress)
    return FinishedBisection(broken, written, bisection_spent(ws, result.bisection_id))


def _bisection_report(ws: Workspace, result: BisectResult, progress: Progress) -> tuple[Path, str] | None:
    """The HTML report of a bisection just finished and its short line (None, with a warning, if it cannot be written)."""
    from .report.report import short_line

    def write() -> tuple[Path, str]:
        path, view = report(ws.store, str(result.bisection_id), config=ws.config)
        return path, short_line(view, path)

    return report_quietly(progress, write)


def bisection_spent(ws: Workspace, bisection_id: int) -> dict:
    """What a bisection spent (``cost.spent`` over all its trials): trials, wall time less the pauses, and
    hours in the target's unit (GPU-hours × [cost] gpus, or machine-hours for a command target)."""
    gpus, unit = cost.hours_unit(ws.config)
    return cost.spent(ws.store.trials(bisection_id=bisection_id, status=None), gpus, unit)
