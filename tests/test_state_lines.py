"""The machine-state lines under a verdict: what the GPU did during the trials that measured something."""

from __future__ import annotations

from dataclasses import replace

from perfbisect.model import RunResult, SystemSummary, TrialIdentity, TrialResult, TrialStatus
from perfbisect.report.render import state_lines


def _trial(status: TrialStatus, clock: float | None, others: tuple[int, ...] = ()) -> TrialResult:
    runs = tuple(RunResult(index=i, warmup=False, requested_tokens=128, output_tokens=128, decode_tok_s=230.0)
                 for i in range(3 if status is TrialStatus.OK else 1))
    ident = TrialIdentity(commit="c" * 40, patch_hash="p", build_hash="b", mode="baseline", mode_hash="m",
                          workload_hash="w", host="h")
    system = SystemSummary(samples=40, sm_clock_mean_mhz=clock, temperature_max_c=61.0, other_gpu_processes=others)
    return TrialResult(identity=ident, status=status, runs=runs, started_at=1.0, finished_at=2.0, system=system)


def test_a_trial_cut_short_does_not_widen_the_clock_range_but_its_gpu_users_are_shown():
    # the H200 of round 6: every finished trial at 1980 MHz; one cut short by the device's time limit sampled
    # a server being torn down (856 MHz at 93 W), and it reported another process on the GPU
    finished = [_trial(TrialStatus.OK, 1980.0) for _ in range(4)]
    cut = _trial(TrialStatus.FAILED, 856.0, others=(4242,))
    lines = state_lines([*finished[:2], cut, *finished[2:]])
    assert lines[0] == "SM clock per trial 1980–1980 MHz over 4 measured trials"
    assert "other GPU processes seen: 4242" in lines
    assert not any("no GPU state" in line for line in lines)


def test_only_failed_trials_with_clocks_still_count_as_gpu_state_recorded():
    lines = state_lines([_trial(TrialStatus.FAILED, 856.0)])
    assert not any("SM clock" in line or "no GPU state" in line for line in lines)
    assert lines == ["GPU temperature up to 61 C"]
    none = state_lines([replace(_trial(TrialStatus.OK, None), system=SystemSummary(samples=3))])
    assert none == ["no GPU state recorded (no NVML or nvidia-smi here): differences cannot be attributed to clocks"]
