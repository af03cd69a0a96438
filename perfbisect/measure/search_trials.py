"""The trials a search asks for, and what it sees of them.

``observe`` measures the bisection metric at one commit (one trial per metric mode, a crash mid-run
retried once) and turns its trials into the ``model.Observation`` the search policy reads: a trial the
machine spoiled is kept but flagged. ``measure_modes`` runs the which-path step's trials of several
modes at two commits until each has its count. Both order their trials in A B B A rounds
(``interleaved``) so drift hits both sides alike. The same code runs here (``[executor] kind = "local"``)
and in a Slurm job on its node.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from ..layout import Layout, joined
from ..model import Commit, Observation, TrialResult, TrialStatus
from ..settings import Config
from .trials import TrialRunner


def observe(runner: TrialRunner, commit: Commit, bisection_id: int | None, seq: int,
            vary_layout: bool = False) -> tuple[Observation, list[int]]:
    """Measure the bisection metric at ``commit`` once: one trial per needed mode (``vary_layout``:
    under a layout drawn even when layouts are held fixed, as the search's layout re-check asks).

    A trial the machine spoiled (throttled by an external cause, another process on the GPUs) is
    kept but flagged: the search excludes it and asks for the commit again, like nvbench re-runs.
    """
    cfg = runner.ws.config
    summaries: dict[str, float] = {}
    trial_ids: list[int] = []
    covariates: dict[str, float] = {}
    flags: list[str] = []
    layouts: dict[str, Layout | None] = {}  # per mode: the layout of the trial whose value is used
    started: float | None = None
    modes = interleaved(cfg.metric_modes, seq)

    def layout_ids() -> str | None:  # in the order of metric_modes, whichever order the trials ran in
        return joined([layouts[m] for m in cfg.metric_modes if m in layouts])

    for mode in modes:
        result = None
        for _attempt in range(2):  # a crash mid-run is retried once before the commit counts as untestable
            result = runner.trial(commit, mode, purpose="bisect", bisection_id=bisection_id, vary_layout=vary_layout)
            trial_ids.append(result.id)
            if result.status is not TrialStatus.FAILED:
                break
        if result is not None:
            layouts[mode] = result.layout
        if result is None or result.summary is None:
            return Observation(commit=commit.sha, value=None, seq=seq, layout=layout_ids()), trial_ids
        summaries[mode] = result.summary
        covariates.update(result.system.as_covariates())
        started = result.started_at if started is None else started
        why = result.system.exclusion()
        if why:
            flags.append(f"[{mode}] {why}")
            runner.progress.warn(f"{commit.short} [{mode}]: {why}: the search leaves this trial out and measures again")
    return Observation(
        commit=commit.sha, value=metric_value(cfg, summaries), covariates=covariates, seq=seq,
        at=started, flag="; ".join(flags) or None, layout=layout_ids(),
    ), trial_ids


def measured_trials(stored: Iterable[TrialResult], sha: str, mode: str) -> int:
    """How many of ``stored`` measured ``mode`` at ``sha`` (a summary: not skipped, failed or flagged out)."""
    return sum(1 for t in stored if t.identity.commit == sha and t.identity.mode == mode and t.summary is not None)


def measure_modes(runner: TrialRunner, pair: Sequence[Commit], modes: Sequence[str], target: int,
                  bisection_id: int, stored: list[TrialResult]) -> list[TrialResult]:
    """Trials of ``modes`` at both commits of ``pair`` until each (commit, mode) has ``target``
    measured ones in ``stored`` (purpose "modes": the which-path step), one trial a round each,
    rounds in A B B A order so drift hits both sides alike, up to ``target`` failed attempts each
    before giving up on one. New trials are appended to ``stored`` and returned. The same loop
    runs here (``[executor] kind = "local"``) and in a Slurm job on its node."""
    new: list[TrialResult] = []
    for round_ in range(2 * target):
        ran = False
        for commit in interleaved(pair, round_):
            for mode in modes:
                if measured_trials(stored, commit.sha, mode) >= target:  # one trial a round each: interleaved
                    continue
                trial = runner.trial(commit, mode, purpose="modes", bisection_id=bisection_id)
                stored.append(trial)
                new.append(trial)
                ran = True
        if not ran:
            break
    return new


def interleaved(items: Sequence, round_index: int) -> list:
    """Order of one round of an A B B A schedule: forwards on even rounds, backwards on odd ones."""
    return list(items) if round_index % 2 == 0 else list(reversed(items))


def metric_value(cfg: Config, summaries: dict[str, float]) -> float:
    """log of the metric mode's summary (its workload.metric), or log(spec/base) for a ratio metric."""
    modes = cfg.metric_modes
    if len(modes) == 2:
        return summaries[modes[1]] - summaries[modes[0]]
    return summaries[modes[0]]
