"""Plain values the store hands back for what ``perfbisect.model`` has no type for.

Trials come back as ``model.TrialResult``; bisections, their observations and stored comparisons
come back as these frozen records, fully loaded before the session closes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..model import BisectOutcome, Comparison, NoiseKey, TrialResult, Verdict


class TrialPurpose(str, enum.Enum):
    """Why a trial was run: reports and the noise model may treat them differently."""

    BISECT = "bisect"
    MEASURE = "measure"
    CALIBRATE = "calibrate"
    COMPARE = "compare"
    MODES = "modes"  # the other modes at a speculative culprit and its parent (regressed_path)


# model.TrialStatus has no "running": a trial that has not finished (or whose process was killed)
# comes back as FAILED with this error and finished_at == 0.0; `is_unfinished` recognises it.
UNFINISHED_ERROR = "unfinished: the trial is still running, or the process running it was killed"
INTERRUPTED_ERROR = "interrupted"


def is_unfinished(trial: TrialResult) -> bool:
    """True for a trial the store holds as still running (no finished_at)."""
    return trial.error == UNFINISHED_ERROR and not trial.finished_at


@dataclass(frozen=True)
class ObservationRecord:
    """One stored answer of a bisection's search, in replay order (seq)."""

    bisection_id: int
    seq: int
    commit: str
    value: float | None  # log-scale summary; None = untestable (skipped)
    trial_ids: tuple[int, ...] = ()
    covariates: Mapping[str, float] = field(default_factory=dict)
    recorded_at: float = 0.0
    flag: str | None = None  # why the search excludes it (throttled, contended), if it does
    layout: str | None = None  # layout ids of its trials, "+"-joined for a ratio metric (model.Observation.layout)
    host: str | None = None  # the node the search was told measured it (model.Observation.host); None = the local host
    decision: Mapping[str, Any] | None = None  # the live decision that asked for it: commit, phase, reason; None = not recorded


@dataclass(frozen=True)
class NoiseEstimate:
    """Noise measured on one host for one (mode, workload): what the next bisection starts from."""

    host: str
    mode: str
    mode_hash: str
    workload_hash: str
    sigma_b: float  # log scale
    dof: float
    sigma_w: float | None
    source: str
    created_at: float

    @property
    def noise_key(self) -> NoiseKey:
        """The key of the trials this estimate was measured on."""
        return NoiseKey(self.host, self.mode, self.mode_hash, self.workload_hash)


@dataclass(frozen=True)
class BisectionRecord:
    """A stored bisection: its question, its state and (when done) its outcome."""

    id: int
    good: str
    bad: str
    metric: str
    config_hash: str
    target: str  # path of the target repository
    commits: tuple[str, ...]
    settings: Mapping[str, Any]
    status: str  # "running", "done" or "interrupted"
    started_at: float
    finished_at: float | None = None
    verdict: Verdict | None = None
    culprit: str | None = None
    outcome: BisectOutcome | None = None
    trial_count: int = 0
    observation_count: int = 0
    metric_info: Mapping[str, Any] | None = None  # metrics.Metric.as_json() when it started; None before 0007
    # What the search started from (search_start.SearchStart.as_json): noise, endpoint history, direction;
    # None for a bisection stored before migration 0006.
    search_start: Mapping[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return self.status == "done"


@dataclass(frozen=True)
class ComparisonRecord:
    """A stored A-vs-B comparison with the trials it used."""

    id: int
    a: str
    b: str
    mode: str
    metric: str
    comparison: Comparison
    trial_ids_a: tuple[int, ...] = ()
    trial_ids_b: tuple[int, ...] = ()
    bisection_id: int | None = None
    created_at: float = 0.0
    metric_info: Mapping[str, Any] | None = None  # metrics.Metric.as_json(); None: stored before 0007
