"""`perfbisect run` and `resume`: a bisection from its range to its stored outcome.

``run_bisection`` reads as its steps: a resumed bisection reopened with the [stats] it started with
(``_reopened``), the range planned and its candidates taken (``_candidates``), what the search starts
from (``_search_start``), the bisection stored or its stored observations taken over (``_begin``,
``_resumed_search``), the commits marked untestable recorded (``_mark_untestable``), the search over
the configured executor (``_search``: this host one trial at a time, narrated by ``_LocalNarration``,
or Slurm jobs), a merge culprit widened to the commits it merged (``_expand_merge_culprit``), for a
speculative mode's culprit which path regressed (``which_path``), and the bisection finished
(``_finish``). Everything is stored as it lands.

``finished_bisection`` is what `run` and `resume` show after the search, besides its outcome: whether
anything was measured, the HTML report, what it spent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

from ..engine import cost
from ..engine.bisect import SearchPolicy
from ..engine.observations import Done, Measure
from ..report import words
from ..report.words import settles
from ..engine.regressed_path import decide as decide_path
from ..engine.search_start import SearchStart, observations_of
from ..engine.stats import NoiseModel
from ..executors.chosen import ModesMeasurer, measures_here, search_executor
from ..executors.loop import SearchLoop
from ..measure.search_trials import measured_trials
from ..runtime.progress import Progress
from ..measure.launch_checks import preflight
from .workspace import Workspace
from ..metrics import DECODE, Metric, describe as describe_metric
from ..metrics import stored_or_described
from ..model import BisectOutcome, Commit, Observation, Verdict, log_of_pct
from ..report.costs import more_trials_line
from ..report.render import state_lines
from ..settings import Config, StatsConfig
from ..store import BisectionRecord, Store
from ..workload_kinds import kind_of
from .calibration import keep_noise, noise_model_and_note
from .measuring import why_nothing_measured
from .planning import check_endpoints, endpoint_effect, plan_between, range_of, trial_time
from .reports import report, report_quietly
from .resume import Resumed, as_started, kept_line, resume_summary


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
    # [environment]: the packages that move between the culprit's parent's environment and the culprit's, when
    # any do ({"parent", "culprit", "moves": [text, ...], "split": the command that measures the code alone})
    environment: dict | None = None


@dataclass(frozen=True)
class _Range:
    """good..bad as a bisection searches it: its endpoints, its commits by sha (a merge culprit adds the
    commits it merged), the candidates in order, the commits marked untestable among them (sha → why) and
    those only paths the filters ignore changed (never measured)."""

    good: Commit
    bad: Commit
    by_sha: dict[str, Commit]
    shas: list[str]
    marked: dict[str, str]
    filtered: list[Commit]


def run_bisection(
    ws: Workspace,
    good: str,
    bad: str,
    progress: Progress | None = None,
    *,
    wait_idle_s: float = 0.0,
    resume_id: int | None = None,
) -> BisectResult:
    """Bisect good..bad: confirm the endpoints differ, search, confirm the culprit; store everything.
    ``resume_id``: go on with that stored bisection instead (its range, its [stats], its search start)."""
    progress = progress or Progress()
    record: BisectionRecord | None = None
    kept: dict[str, tuple] = {}
    if resume_id is not None:
        record, ws, kept = _reopened(ws, resume_id, progress)
        good, bad = record.good, record.bad
    metric = describe_metric(ws.config) if record is None else stored_or_described(record.metric_info, ws.config)
    span = _candidates(ws, good, bad, progress)
    start = _search_start(ws, record, span, progress)
    resumed: Resumed | None = None
    if record is None:
        bisection_id, shas, observations = _begin(ws, span, start), span.shas, []
    else:
        bisection_id = record.id
        shas, observations, resumed = _resumed_search(ws, record, span.shas, kept, progress)
    _mark_untestable(ws.store, bisection_id, shas, span.marked, observations, progress)
    noise = start.noise
    policy = SearchPolicy(shas, ws.config.stats, noise, history=start.history, higher_is_better=start.higher_is_better)
    try:
        outcome = _search(ws, policy, observations, bisection_id, span.by_sha, noise, progress, wait_idle_s).outcome
        outcome = _expand_merge_culprit(ws, outcome, span.by_sha)
        outcome = which_path(ws, outcome, shas, bisection_id, noise, progress, wait_idle_s)
    finally:
        progress.done()
    return _finish(ws, bisection_id, outcome, span, metric, resumed)


def _reopened(ws: Workspace, resume_id: int, progress: Progress) -> tuple[BisectionRecord, Workspace, dict[str, tuple]]:
    """The stored bisection `resume` goes on with (marked running again), ``ws`` with the [stats] it started
    with, and what of them differs from the config's now (``as_started``; warned)."""
    record = ws.store.resume_bisection(resume_id)
    # One bisection is one search: it goes on with the [stats] it started with (its metric, budget and
    # thresholds), not today's, so its next decisions are the ones the uninterrupted search would make.
    as_then, kept = as_started(ws, record)
    if kept:
        progress.warn(kept_line(record.id, kept, ws.config))
    as_then.keep_workload_files(record.search_start, record.id)
    if as_then.workload_files is not None:
        progress.info(f"workload.files: {as_then.workload_files.describe()}, as bisection #{record.id} started with them")
    return record, as_then, kept


def _candidates(ws: Workspace, good: str, bad: str, progress: Progress) -> _Range:
    """good..bad resolved and planned (the machine ready, the patch stack applying at both endpoints), and
    what the search takes of it; the plan's warnings and its counts said."""
    good_c, bad_c, commits = range_of(ws, good, bad)
    preflight(ws.config)
    check_endpoints(ws, good_c, bad_c, progress)
    plan = plan_between(ws, good_c, bad_c, progress=progress)
    for warning in plan.warnings:
        progress.warn(str(warning))
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
    return _Range(good_c, bad_c, {c.sha: c for c in commits}, [c.sha for c in candidates], marked, filtered)


def _search_start(ws: Workspace, record: BisectionRecord | None, span: _Range, progress: Progress) -> SearchStart:
    """What the search starts from: a resumed bisection's stored start, else the noise model this host's
    stored figures give (said, with its note) and the endpoints' trials of earlier days."""
    if record is not None and record.search_start:
        # The search resumes from what it started from (noise, endpoint history), not from what this host
        # has learned since: one bisection is one search, and its report replays exactly this one.
        start = SearchStart.from_json(record.search_start)
        progress.info(f"noise model (as this bisection started): {start.noise.describe()}")
        return start
    cfg = ws.config
    noise, noise_note = noise_model_and_note(ws, cfg.metric_modes)
    progress.info(f"noise model: {noise.describe()}")
    if noise_note:
        progress.warn(noise_note)
    return SearchStart(noise, tuple(endpoint_history(ws, (span.good, span.bad))), describe_metric(cfg).higher_is_better)


def _begin(ws: Workspace, span: _Range, start: SearchStart) -> int:
    """A new bisection stored with its candidates, [stats], metric and search start; its id."""
    cfg = ws.config
    files = ws.workload_files  # taken now: the whole search, its resumes and its cluster jobs run this benchmark
    return ws.store.begin_bisection(
        good=span.good.sha, bad=span.bad.sha, commits=span.shas, metric=cfg.stats.metric,
        settings=cfg.stats, target=str(cfg.target.repo), metric_info=describe_metric(cfg).as_json(),
        search_start={**start.as_json(), **({"workload_files": files.hash} if files is not None else {})},
    )


def _resumed_search(ws: Workspace, record: BisectionRecord, shas: list[str], kept: dict[str, tuple],
                    progress: Progress) -> tuple[list[str], list[Observation], Resumed]:
    """A resumed bisection's candidates (the stored ones, should the config's filters have changed them since),
    its stored observations, and what of it is reused and discarded (``resume_summary``; said)."""
    if list(record.commits) != shas:
        progress.warn("the candidate list changed since this bisection started (config filters?); using the stored one")
        shas = list(record.commits)
    stored_observations = ws.store.observations(record.id)
    observations = observations_of(stored_observations)
    resumed = resume_summary(ws.store, record.id, stored_observations, kept,
                             "server session" if kind_of(ws.config.workload).serves else "command run")
    progress.info(resumed.line())
    return shas, observations, resumed


def _mark_untestable(store: Store, bisection_id: int, shas: Sequence[str], marked: dict[str, str],
                     observations: list[Observation], progress: Progress) -> None:
    """Each candidate marked untestable (``perfbisect skip``, ``[filters] skip``) that has no observation yet
    stored as one without a value, before the search starts: never measured, never blamed."""
    untestable = {o.commit for o in observations if o.value is None}
    for sha in (s for s in shas if s in marked and s not in untestable):
        obs = Observation(commit=sha, value=None, seq=len(observations))
        store.add_observation(bisection_id, obs.seq, sha, None, [])
        observations.append(obs)
        progress.info(f"{sha[:10]} {marked[sha]}: never measured, never blamed")


def _finish(ws: Workspace, bisection_id: int, outcome: BisectOutcome, span: _Range, metric: Metric,
            resumed: Resumed | None) -> BisectResult:
    """The bisection stored as finished, the residual noise it measured here kept for the next command on
    this host, and its result: the system state over its trials, and what more trials would settle."""
    cfg, store = ws.config, ws.store
    store.finish_bisection(bisection_id, outcome)
    if measures_here(cfg):  # trials on cluster nodes measured their noise, not this host's
        keep_noise(
            ws, cfg.metric_modes, outcome.noise_sigma_pct, outcome.noise_dof,
            f"bisection #{bisection_id}: residual noise of {outcome.trials_used} trials after the change(s) and drift",
        )
    trials = store.trials(bisection_id=bisection_id, status=None)
    more = None
    if outcome.more_trials:  # what it would settle: the tolerance, or a check on the best answer left open
        more = more_trials_line(cfg, trial_time(ws), outcome.more_trials, settles(outcome))
    return BisectResult(
        bisection_id=bisection_id, outcome=outcome, commits=span.by_sha, filtered=span.filtered, db_path=ws.db_path,
        state=state_lines(trials, gpu_target=kind_of(cfg.workload).serves), more=more, metric=metric.as_json(),
        resumed=resumed.as_json() if resumed is not None else None,
        environment=environment_at_culprit(ws, outcome, span.by_sha),
    )


def environment_at_culprit(ws: Workspace, outcome: BisectOutcome, by_sha: dict[str, Commit]) -> dict | None:
    """When the culprit's environment differs from its parent's: what moved, and how to tell code from environment
    (the culprit measured against its parent in the parent's environment: `compare --env-from`)."""
    culprit = by_sha.get(outcome.named_culprit) if outcome.named_culprit else None
    if ws.environments is None or culprit is None or not culprit.parents:
        return None
    parent = culprit.parents[0]
    moved = ws.environments.moved_at(parent, culprit)
    if not moved:
        return None
    mode = ws.config.metric_modes[-1]
    return {"parent": parent, "culprit": culprit.sha, "moves": [m.text() for m in moved],
            "split": ["perfbisect", "compare", parent[:10], culprit.sha[:10], "--env-from", parent[:10], "--mode", mode]}


def _search(ws: Workspace, policy: SearchPolicy, observations: list[Observation], bisection_id: int,
            by_sha: dict[str, Commit], noise: NoiseModel, progress: Progress, wait_idle_s: float) -> Done:
    """The search over the configured executor (``executors.loop``): its trials on this machine one at a time
    (``[executor] kind = "local"``), or as Slurm jobs up to ``executor.nodes`` at once; each observation stored
    as it lands with the decision that asked for it."""
    # the good endpoint's benchmark client measures every trial
    executor = search_executor(ws, bisection_id, progress, by_sha=by_sha, client_rev=policy.commits[0],
                               wait_idle_s=wait_idle_s)
    if measures_here(ws.config):  # one trial at a time here: where it stands, with an ETA
        announce = _LocalNarration(ws, policy, bisection_id, by_sha, noise, progress, len(observations))
    else:
        def announce(measure: Measure, _observations: Sequence[Observation]) -> None:
            progress.info(f"{measure.commit[:10]} ({measure.phase}): {words.measure_text(measure)}")
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
        self.started, self.best, self.phase = time.monotonic(), ("", None), ""

    def __call__(self, action: Measure, observations: Sequence[Observation]) -> None:
        commit, estimate = self.by_sha[action.commit], self.estimate
        if action.best is not None:
            self.best = (words.best_text(action), action.p)
        done_here = len(observations) - self.stored
        elapsed = time.monotonic() - self.started
        step_s = elapsed / done_here if done_here else (estimate.trial_s and estimate.trial_s * estimate.modes)
        again = stepped_back(self.phase, action.phase)
        self.phase = action.phase
        status = search_status(self.bisection_id, action, len(observations), self.stats, estimate.trials, elapsed,
                               step_s or None, best=self.best, short=commit.short, again=again)
        if again:
            self.progress.info(f"back to {action.phase}: {again}")
        self.progress.search(status)
        # numbered as the budget counts trials (an untestable commit tried is not one: the next attempt keeps its number)
        self.progress.info(f"[{status.trial}] {commit.short} ({action.phase}): {words.measure_text(action)}")


PHASES = ("endpoints", "locating", "second-change check", "confirming")


def stepped_back(before: str, now: str) -> str:
    """Why the search's phase went back (``now`` earlier in ``PHASES`` than ``before``), or "" when it did not."""
    if before not in PHASES or now not in PHASES or PHASES.index(now) >= PHASES.index(before):
        return ""
    if now == "locating":
        return f"the newest trials moved the answer, so it is located again before the {before} goes on"
    if now == "second-change check":
        return "the newest trials raised the doubt of a second change, so that is checked before confirming goes on"
    return "an endpoint has to be measured again"


def search_status(bisection_id: int, action: Measure, observations: int, stats: StatsConfig, expected: int,
                  elapsed_s: float, step_s: float | None, best: tuple[str, float | None] | None = None,
                  short: str | None = None, again: str = "") -> cost.SearchStatus:
    """Where the search stands before ``action``'s trial, for the progress line: the trial as the budget counts it
    (``Measure.trial``: never past stats.max_trials_total), the observations that were not trials of the budget
    (untestable commits), the estimate's own expected count, and the best answer (``best``: the latest one named,
    when this action names none)."""
    trial = action.trial or observations + 1
    name, p = (words.best_text(action), action.p) if action.best is not None else (best or ("", None))
    return cost.SearchStatus(
        bisection_id, trial, stats.max_trials_total, expected, action.phase, short or action.commit[:10], name, p,
        elapsed_s, step_s, untestable=max(0, observations - (trial - 1)), p_none=action.p_none, check=words.check_text(action),
        needs=action.needs, again=again,
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
    measure = ModesMeasurer(ws, bisection_id, progress, wait_idle_s)
    measured = 0
    # n trials each; when that cannot tell the two paths apart (a noisy session), n more, once.
    for target in (n, 2 * n):
        missing = [m for m in (*others, spec) if any(have(c.sha, m) < target for c in pair)]
        if missing:
            progress.info(
                f"which path regressed: measuring {', '.join(missing)} at {pair[0].short} (before the culprit) and "
                f"{pair[1].short} (the culprit), up to {target} trials each, interleaved (stats.mode_trials)"
            )
            measured += measure(pair, missing, target, stored)
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
    alone = not outcome.culprit_is_set  # no untestable neighbour shares the blame: the merge is named
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
        culprit_merge=alone,
    )


# ------------------------------------------------------------------------------------------------
# What the command line shows after a bisection: worked out here, printed there (cli/bisection.py)


@dataclass(frozen=True)
class FinishedBisection:
    """What `run` and `resume` show after the search, besides its outcome."""

    broken: str | None  # why no trial produced a number (``measured_nothing``): exit 4, not 3; the bisection is not kept
    report: tuple[Path, str] | None  # the HTML report and its short line; None when it could not be written (warned)
    spent: dict  # what it spent (``bisection_spent``)


def finished_bisection(ws: Workspace, result: BisectResult, progress: Progress) -> FinishedBisection:
    """After a bisection: whether anything was measured, its HTML report (a failure to write it is a
    warning, never hiding the verdict) and what it spent."""
    broken = measured_nothing(ws, result.bisection_id)
    spent = bisection_spent(ws, result.bisection_id)
    if broken:
        # Nothing was measured: not a verdict to keep or render, only an error (exit 4). The failed trials stay.
        ws.store.discard_bisection(result.bisection_id)
        return FinishedBisection(broken, None, spent)
    return FinishedBisection(None, _bisection_report(ws, result, progress), spent)


def _bisection_report(ws: Workspace, result: BisectResult, progress: Progress) -> tuple[Path, str] | None:
    """The HTML report of a bisection just finished and its short line (None, with a warning, if it cannot be written)."""
    from ..report.report import short_line

    def write() -> tuple[Path, str]:
        path, view = report(ws.store, str(result.bisection_id), config=ws.config)
        return path, short_line(view, path)

    return report_quietly(progress, write)


def bisection_spent(ws: Workspace, bisection_id: int) -> dict:
    """What a bisection spent (``cost.spent`` over all its trials): trials, wall time less the pauses, and
    hours in the target's unit (GPU-hours × [cost] gpus, or machine-hours for a command target)."""
    gpus, unit = cost.hours_unit(ws.config)
    return cost.spent(ws.store.trials(bisection_id=bisection_id, status=None), gpus, unit)


def measured_nothing(ws: Workspace, bisection_id: int) -> str | None:
    """When no trial of a bisection produced a number: why the first one failed (else None)."""
    return why_nothing_measured(ws.store.trials(bisection_id=bisection_id, status=None))

