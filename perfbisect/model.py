"""Frozen values passed between perfbisect's layers.

Nothing here imports a third-party library: the git layer, the server layer, the store and the
statistics all speak in these types, so each can be tested alone.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from .layout import Layout


def content_hash(*parts: Any) -> str:
    """A short, stable sha256 of JSON-serialisable parts (used for config, mode and stack identity)."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


@dataclass(frozen=True)
class Reason:
    """Why the engine asked for a trial or ended a search, as a code and the numbers behind it: the engine decides,
    ``report.words`` says it (a wording change is never an engine diff). ``numbers`` holds JSON-able values only
    (numbers, strings such as commit shas, lists, and nested ``Reason``s), so a stored one words the same later."""

    code: str
    numbers: Mapping[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.numbers[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.numbers.get(key, default)


class Verdict(str, enum.Enum):
    """Outcome of comparing two sets of trials, or of a whole bisection."""

    REGRESSED = "regressed"
    IMPROVED = "improved"
    SAME = "same"
    INCONCLUSIVE = "inconclusive"
    SKIPPED = "skipped"


class TrialStatus(str, enum.Enum):
    """Whether a trial produced evidence.

    ``skipped`` means the commit cannot be tested (patch conflict, build failure, server never
    ready): like ``git bisect`` exit 125 it is never blamed. ``failed`` means the trial started but
    broke part-way (server died mid-run): its stored runs are kept but it carries no summary.
    """

    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class Commit:
    """One commit of the target repository, as the search sees it."""

    sha: str
    subject: str = ""
    parents: tuple[str, ...] = ()
    author_date: str = ""  # ISO 8601

    @property
    def short(self) -> str:
        return self.sha[:10]

    @property
    def is_merge(self) -> bool:
        return len(self.parents) > 1


@dataclass(frozen=True)
class RepoFacts:
    """What the target repository says of the commits a report shows, read once by the use case that
    renders it (``git.commit_facts``) and handed to the report as plain values: the report renders from
    these and the store, never from the target's git. Empty when the repository is not where the
    bisection ran (the report then says the subjects are unknown).

    ``range``: every commit of good..bad oldest first as the report lists it (filtered ones included),
    empty for the stored candidates; ``commits``: per sha its ``author``, ``email``, ``date`` and
    ``subject``; ``files``: the paths changed by each commit the answer names; ``variants``: per measured
    commit, which patch files of the stack applied where a variant replaced the default one;
    ``remote``: the ``origin`` URL (a forge link when it is a known forge)."""

    range: tuple[str, ...] = ()
    commits: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    files: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    variants: Mapping[str, str] = field(default_factory=dict)
    remote: str | None = None


@dataclass(frozen=True)
class RunResult:
    """One measured (or warm-up) request: fixed prompt, fixed output length, streamed."""

    index: int
    warmup: bool
    requested_tokens: int
    output_tokens: int
    prompt_tokens: int | None = None
    ttft_s: float | None = None
    decode_tok_s: float | None = None  # (tokens - 1) / (t_last - t_first)
    e2e_tok_s: float | None = None  # tokens / (t_last - t_request)
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    spec_verify_ct: int | None = None
    spec_accept_length: float | None = None
    spec_accept_rate: float | None = None
    server_decode_tok_s: float | None = None  # what the server itself reports, when it does
    metric_value: float | None = None  # for `command` workloads: the metric the command printed
    error: str | None = None
    # A measured run found to be warm-up after the fact (slower than the later runs beyond their
    # spread, perfbisect.measure.warmup); such a run also has warmup=True, so no statistic uses it.
    detected_warmup: bool = False
    # When it landed in the store (unix time; None before it is stored): bookkeeping, not part of
    # the measurement, so two runs that measured the same compare equal.
    recorded_at: float | None = field(default=None, compare=False)

    @property
    def complete(self) -> bool:
        """True when the run returned every token it was asked for and did not error."""
        return self.error is None and self.output_tokens >= self.requested_tokens

    @property
    def usable(self) -> bool:
        """Counts towards statistics: measured (not warm-up), complete, with a metric."""
        value = self.value
        return (not self.warmup) and self.complete and value is not None and math.isfinite(value) and value > 0

    @property
    def value(self) -> float | None:
        """The primary metric of this run (decode tok/s, or a command workload's metric)."""
        return self.metric_value if self.metric_value is not None else self.decode_tok_s

    @property
    def cycle_time_ms(self) -> float | None:
        """Speculative verify-cycle time: decode time / spec_verify_ct."""
        if not self.spec_verify_ct or not self.decode_tok_s or self.output_tokens < 2:
            return None
        decode_time = (self.output_tokens - 1) / self.decode_tok_s
        return 1000.0 * decode_time / self.spec_verify_ct


@dataclass(frozen=True)
class GpuSample:
    """One reading of one GPU."""

    index: int
    name: str = ""
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    mem_clock_max_mhz: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    pstate: str | None = None
    throttle_reasons: int | None = None  # NVML clock-event reasons bitmask
    pcie_gen: int | None = None
    pcie_width: int | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    utilization_pct: float | None = None
    ecc_errors: int | None = None
    processes: tuple[int, ...] = ()


@dataclass(frozen=True)
class SystemSnapshot:
    """What the machine was doing at one moment: GPUs, CPU load and frequency."""

    t: float  # unix time
    gpus: tuple[GpuSample, ...] = ()
    load_avg_1m: float | None = None
    cpu_mhz: float | None = None
    source: str = ""  # "nvml", "nvidia-smi", "proc", ...


# NVML clock-event reasons that come from outside the code under test.
_EXTERNAL_NAMES = ((0x8, "HwSlowdown"), (0x20, "SwThermalSlowdown"), (0x40, "HwThermalSlowdown"), (0x80, "HwPowerBrakeSlowdown"))
EXTERNAL_THROTTLE = sum(bit for bit, _ in _EXTERNAL_NAMES)


@dataclass(frozen=True)
class SystemSummary:
    """A trial's system state reduced to the numbers the statistics and reports use."""

    samples: int = 0
    sm_clock_mean_mhz: float | None = None
    sm_clock_min_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    temperature_mean_c: float | None = None
    temperature_max_c: float | None = None
    power_mean_w: float | None = None
    throttled_fraction: float | None = None  # share of samples with a non-idle throttle reason
    throttle_reasons_seen: int = 0  # OR of every reason bitmask seen
    load_avg_1m: float | None = None
    other_gpu_processes: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()
    # State before the trial's own load started: the code under test cannot have caused it.
    start_temperature_c: float | None = None
    start_load_avg: float | None = None

    def as_covariates(self) -> dict[str, float]:
        """Numeric state variables the statistics may relate to trial summaries.

        Mediators (the load's own clock, temperature, power, throttled time) are only ever shown;
        ``start_temperature_c`` and ``other_load`` are exogenous and may adjust (covariates.covariate_notes).
        """
        out = {
            "sm_clock_mean_mhz": self.sm_clock_mean_mhz,
            "temperature_mean_c": self.temperature_mean_c,
            "throttled_fraction": self.throttled_fraction,
            "power_mean_w": self.power_mean_w,
            "start_temperature_c": self.start_temperature_c,
            "other_load": self.start_load_avg,
        }
        return {k: float(v) for k, v in out.items() if v is not None}

    def exclusion(self) -> str | None:
        """Why a trial should not count (nvbench's habit), or None.

        Throttled by a cause outside the code (hardware slowdown, thermal or power-brake events)
        for a fifth of the samples or more, or another process on the GPUs. The power cap
        (SwPowerCap) is not a reason: the load itself reaches it, so a faster build would hit it more.
        """
        external = self.throttle_reasons_seen & EXTERNAL_THROTTLE
        if external and (self.throttled_fraction or 0.0) >= 0.2:
            names = [name for bit, name in _EXTERNAL_NAMES if external & bit]
            return f"throttled: {', '.join(names)} in {100 * (self.throttled_fraction or 0):.0f}% of samples"
        if self.other_gpu_processes:
            return f"contended: other GPU processes {', '.join(map(str, self.other_gpu_processes[:4]))}"
        return None


@dataclass(frozen=True)
class EnvCheck:
    """Which configured environment variables reached which server process."""

    pid: int
    cmdline: str
    missing: tuple[str, ...] = ()
    mismatched: tuple[tuple[str, str, str], ...] = ()  # (name, wanted, actual)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.mismatched

    def gap(self) -> str:
        """What did not arrive: "pid 12 (python -m ...): NCCL_X, NCCL_Y='1' (wanted '0')"."""
        what = ", ".join(list(self.missing) + [f"{n}={a!r} (wanted {w!r})" for n, w, a in self.mismatched])
        return f"pid {self.pid} ({self.short_cmdline()}): {what}"

    def short_cmdline(self, width: int = 90) -> str:
        """The command line cut in the middle: workers of one server share its start and differ at
        the end (`... --rank 1`, `sglang::scheduler_TP1`), which is what tells them apart."""
        if len(self.cmdline) <= width:
            return self.cmdline
        head = width // 2
        return f"{self.cmdline[:head]} … {self.cmdline[-(width - head - 3):]}"


class NoiseKey(NamedTuple):
    """What trials must share to share one noise model: host, mode and workload, whatever the build.

    The one definition: trials (``TrialIdentity.noise_key``), the learned estimates the store keeps,
    and the key a command looks its noise up by (``Workspace.noise_key``) all build it here.
    """

    host: str  # host fingerprint: GPU model, count, driver
    mode: str
    mode_hash: str
    workload_hash: str


@dataclass(frozen=True)
class TrialIdentity:
    """What must be equal for two trials to be pooled as repeats of one build (pyperf-style)."""

    commit: str
    patch_hash: str
    build_hash: str
    mode: str
    mode_hash: str
    workload_hash: str
    host: str  # host fingerprint: GPU model, count, driver

    @property
    def build_key(self) -> tuple[str, str, str, str, str, str, str]:
        return (
            self.commit,
            self.patch_hash,
            self.build_hash,
            self.mode,
            self.mode_hash,
            self.workload_hash,
            self.host,
        )

    @classmethod
    def of_build(cls, key: NoiseKey, *, commit: str, patch_hash: str, build_hash: str) -> "TrialIdentity":
        """The identity of a trial of one build (commit, patches, build) under ``key``."""
        return cls(
            commit=commit, patch_hash=patch_hash, build_hash=build_hash,
            mode=key.mode, mode_hash=key.mode_hash, workload_hash=key.workload_hash, host=key.host,
        )

    @property
    def noise_key(self) -> NoiseKey:
        """Trials sharing this key share one noise model (host, mode, workload)."""
        return NoiseKey(self.host, self.mode, self.mode_hash, self.workload_hash)


def median(values: Iterable[float | None]) -> float | None:
    """Median of the values that are there (None skipped), or None when there are none."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def trial_summary(runs: Sequence[RunResult]) -> float | None:
    """Median of log(metric) over usable runs: the unit of evidence of one trial."""
    return median(math.log(r.value) for r in runs if r.usable and r.value)


def pct(log_delta: float) -> float:
    """A log-scale difference as a percent change (exp(d) − 1): every layer shows the log-scale summaries'
    differences and spreads this way."""
    return 100.0 * math.expm1(log_delta)


def log_of_pct(percent: float) -> float:
    """A percent change as a log-scale difference (the inverse of ``pct``)."""
    return math.log1p(percent / 100.0)


@dataclass(frozen=True)
class TrialResult:
    """One server session for (commit, mode): build, launch, ready, warm-up, runs, teardown."""

    identity: TrialIdentity
    status: TrialStatus
    runs: tuple[RunResult, ...] = ()
    started_at: float = 0.0
    finished_at: float = 0.0
    system: SystemSummary = field(default_factory=SystemSummary)
    env_checks: tuple[EnvCheck, ...] = ()
    server_info: Mapping[str, Any] = field(default_factory=dict)
    versions: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None
    log_path: str | None = None
    id: int | None = None  # database id once stored
    job_id: str | None = None  # the cluster job that ran it (None: run here by perfbisect itself)
    node: str | None = None  # the node that job ran on
    layout: Layout | None = None  # what it ran under (worktree slot, env padding, hash seed); None: stored before layouts

    @property
    def summary(self) -> float | None:
        """log-scale trial summary, or None when the trial carries no evidence."""
        if self.status is not TrialStatus.OK:
            return None
        return trial_summary(self.runs)

    @property
    def usable_runs(self) -> tuple[RunResult, ...]:
        return tuple(r for r in self.runs if r.usable)

    @property
    def flagged_runs(self) -> tuple[RunResult, ...]:
        """Measured runs kept out of statistics (early EOS, errors)."""
        return tuple(r for r in self.runs if not r.warmup and not r.usable)

    @property
    def detected_warmup_runs(self) -> tuple[RunResult, ...]:
        """Leading measured runs that turned out to be warm-up (``workload.detect_warmup``)."""
        return tuple(r for r in self.runs if r.detected_warmup)


@dataclass(frozen=True)
class Observation:
    """One trial's summary for a commit (log scale), or None when the commit cannot be tested: what the
    search policy reads (``engine.bisect``), built by the measure layer and rebuilt from the store."""

    commit: str
    value: float | None  # None = untestable: patch conflict, build failure, server never ready
    covariates: Mapping[str, float] = field(default_factory=dict)
    seq: int = 0  # order in which the trials ran: the drift model's time axis
    day: str = ""  # for history: the date it was measured ("11-28"); informs notes, never levels
    at: float | None = None  # wall-clock time the trial started (unix seconds), when known
    flag: str | None = None  # why this trial is excluded (throttled, contended); None = usable
    host: str | None = None  # the node that measured it (host fingerprint); None = the one local host
    layout: str | None = None  # the layout the trial ran under (env size, worktree path, hash seed); None = unrecorded


@dataclass(frozen=True)
class Comparison:
    """A vs B on trial summaries: effect in percent (B relative to A) with its interval."""

    verdict: Verdict
    effect_pct: float
    ci_low_pct: float
    ci_high_pct: float
    sigma_b_pct: float
    sigma_source: str  # "measured (N trials, dof D)" or "prior"
    n_a: int
    n_b: int
    p_value: float | None = None
    min_effect_pct: float = 0.0
    explanation: str = ""
    covariate_note: str | None = None
    level_pct: float | None = None  # the interval's two-sided level (99 for 1 − alpha); None: stored before it was kept


@dataclass(frozen=True)
class ModeEffect:
    """One configured mode measured at the culprit's parent (before) and the culprit (after)."""

    mode: str
    speculative: bool
    before: float | None  # median of the trials' metric values at the parent
    after: float | None  # … at the culprit
    comparison: Comparison | None  # after vs before (log trial summaries)


@dataclass(frozen=True)
class RegressedPath:
    """Which path a speculative mode's regression came from: the target model (the baseline lost
    too) or the speculative path (baseline unchanged; accept length or verify cycle moved)."""

    path: str  # "target", "speculative" or "unclear"
    summary: str  # "speculative path regressed (baseline unchanged; accept length 2.40 → 2.40, …)"
    mode: str  # the speculative mode the bisection decided on
    baseline: str | None  # the non-speculative mode it was compared with
    before: str  # the parent (the last measured candidate before the culprit)
    after: str  # the culprit
    effects: tuple[ModeEffect, ...] = ()
    accept_before: float | None = None
    accept_after: float | None = None
    cycle_before_ms: float | None = None
    cycle_after_ms: float | None = None
    break_even_before: float | None = None  # baseline tok/s × verify cycle: the accept length that pays
    break_even_after: float | None = None
    moved: tuple[str, ...] = ()  # speculative-health columns that moved beyond stats.min_effect_pct
    trials: int = 0  # trials measured for this (beyond the bisection's own)


@dataclass(frozen=True)
class BisectOutcome:
    """The result of a whole search, with the evidence that carries it."""

    verdict: Verdict
    good: str
    bad: str
    culprit: str | None = None  # first bad commit, when exactly one
    culprit_set: tuple[str, ...] = ()  # when skipped neighbours or a merge make it a set
    effect_pct: float | None = None
    endpoint_comparison: Comparison | None = None
    culprit_comparison: Comparison | None = None
    extra_changes: tuple[str, ...] = ()  # further change points found (more than one change)
    skipped: tuple[str, ...] = ()
    trials_used: int = 0
    drift_note: str | None = None
    explanation: str = ""
    improvements: tuple[str, ...] = ()  # located changes that made it faster (never the culprit)
    answer_probability: float | None = None  # posterior of the named (or best) answer
    best_answer: tuple[str, ...] = ()  # when inconclusive: where the change most probably is
    budget_exhausted: bool = False  # the trial budget ended the search before the answer was clear
    ruled_out_pct: float | None = None  # no regression of this size or more (one-sided, 1 − alpha)
    excluded: tuple[str, ...] = ()  # trials left out (throttled, contended) and why
    drift_pct: float | None = None  # span of the machine's fitted drift over the bisection
    noise_sigma_pct: float | None = None  # noise per trial this bisection measured (kept for the next)
    noise_dof: float | None = None
    layout_sensitive: tuple[str, ...] = ()  # located changes that did not survive a change of layout (not blamed)
    tolerance_pct: float | None = None  # the regression `same` had to rule out (stats.tolerance_pct)
    stopped_by: str | None = None  # the budget that ended an inconclusive search ("stats.max_trials_total = 80")
    more_trials: int | None = None  # when inconclusive: further trials that would rule out the tolerance (at the measured noise, the next trials differing by the posterior's expected endpoint step) or settle the open check
    regressed_path: RegressedPath | None = None  # a speculative mode's culprit: target model or speculative path
    # how trial summaries of one build track recorded state (CPU load or temperature at the start: adjusted for;
    # clock, power: only shown), as the explanation's "System state:" says them
    state_notes: tuple[str, ...] = ()
    # the culprit is a merge on the first-parent line: named (it is the first bad commit there), with the commits
    # it brought in ``culprit_set`` beside it (one of them, or the merge, changed performance)
    culprit_merge: bool = False
    # why the search ended, as the engine decided it (``report.words.explained`` writes ``explanation``,
    # ``stopped_by`` and ``drift_note`` from it); None in outcomes stored before reasons were codes
    reason: Reason | None = None

    @property
    def culprit_is_set(self) -> bool:
        """The answer is a set (an untestable neighbour, a merged branch): no one commit can be blamed."""
        return len(self.culprit_set) > 1

    @property
    def named_culprit(self) -> str | None:
        """The one commit to blame, or None when the answer is a set (``culprit`` is then only where the
        change was located, the set's last commit: naming it would blame a possibly innocent commit). A merge
        culprit is named: on the first-parent line it is the first bad commit, its branch beside it."""
        return self.culprit if self.culprit_merge or not self.culprit_is_set else None
