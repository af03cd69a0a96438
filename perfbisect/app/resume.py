"""`perfbisect resume`: what a stored bisection goes on with. Which bisection (``latest_unfinished``),
the ``[stats]`` it started with (``as_started``: one bisection is one search, whatever the config says
now), and what of it is reused and what discarded (``resume_summary`` → ``Resumed``: its progress line
and `--json`'s ``resumed``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Sequence

from ..engine.search_start import stats_over
from ..errors import UsageError
from .workspace import Workspace
from ..model import TrialResult, TrialStatus
from ..settings import Config, StatsConfig
from ..store import BisectionRecord, ObservationRecord, Store, TrialPurpose, is_unfinished


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
    """The [stats] a stored bisection started with (``search_start.stats_over``)."""
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
    trial_unit: str = "server session"  # what one trial is, in the target's words ("command run" for a command target)

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
                         f"discarded: a trial is one {self.trial_unit}, so one cut short is kept in the database but "
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
                   kept: dict[str, tuple] | None = None, trial_unit: str = "server session") -> Resumed:
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
                   reused, discarded, dict(kept or {}), trial_unit)

