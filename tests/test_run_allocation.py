"""Runs per trial (perfbisect/measure/run_allocation.py): the cost model, and `workload.runs = 0` choosing R
from stored noise and timings — seeded into a real results database, then applied by a real trial."""

from __future__ import annotations

import math
import sqlite3
from dataclasses import replace

import numpy as np
import pytest

from perfbisect.app.calibration import keep_noise
from perfbisect.config import load_config
from perfbisect.model import RunResult, TrialIdentity, TrialStatus
from perfbisect.measure.run_allocation import (
    FALLBACK_RUNS,
    closed_form_runs,
    cost_per_information,
    median_efficiency,
    optimal_runs,
    runs_advice,
)
from perfbisect.app.workspace import Workspace
from tests.cli_runner import run_command


def test_median_efficiency_is_the_variance_of_a_median_over_that_of_a_mean():
    assert median_efficiency(1) == median_efficiency(2) == 1.0
    assert median_efficiency(5) == pytest.approx(1.43, abs=0.01)
    assert median_efficiency(1000) == pytest.approx(math.pi / 2)
    rng = np.random.default_rng(3)
    for r in (3, 4, 7):
        medians = np.median(rng.normal(size=(200_000, r)), axis=1)
        assert r * medians.var() == pytest.approx(median_efficiency(r), rel=0.02)


def test_the_cheapest_run_count_minimises_cost_per_information_near_the_closed_form():
    # The numbers: σ_b 3%, σ_w 8%, a 5.5-minute server start, 25-second runs.
    args = (330.0, 25.0, math.log(1.03), math.log(1.08))
    best = optimal_runs(*args)
    assert abs(best - closed_form_runs(*args, c=median_efficiency(best))) < 1.5
    assert all(cost_per_information(best, *args) <= cost_per_information(r, *args) for r in range(3, 31))
    assert cost_per_information(5, *args) > cost_per_information(best, *args)
    # Runs do not average session noise away: with σ_w tiny, the fewest runs; with starts dear, many.
    assert optimal_runs(330.0, 25.0, 0.05, 0.001) == 3
    assert optimal_runs(3600.0, 1.0, 0.01, 0.2) == 30


def seed_trials(ws: Workspace, mode: str) -> None:
    """Four finished trials of four builds under the config's key at runs = 5 (what the host ran
    before auto): 1 warm-up + 4 measured runs landing every 10 s from 60 s after the trial began,
    ending at 120 s (so a trial's fixed part is 120 − 4 × 10 = 80 s); within each trial log values
    ±0.1 around its level (σ_w = √(4 × 0.01 / 3))."""
    key = ws.noise_key(ws.config.mode(mode))
    sibling = replace(ws.config.workload, runs=5).config_hash()
    for i in range(4):
        t0 = 1_700_000_000.0 + 1000 * i
        identity = TrialIdentity.of_build(key._replace(workload_hash=sibling), commit=f"{i:040x}", patch_hash="p", build_hash=f"b{i}")
        tid = ws.store.begin_trial(identity, "bisect", started_at=t0)
        level = 100.0 * (1 + 0.01 * i)
        for j, offset in enumerate((0.0, 0.1, -0.1, 0.1, -0.1)):
            ws.store.add_run(tid, RunResult(index=j, warmup=j == 0, requested_tokens=96, output_tokens=96,
                                            decode_tok_s=level * math.exp(offset), recorded_at=t0 + 60 + 10 * j))
        ws.store.finish_trial(tid, TrialStatus.OK, finished_at=t0 + 120)


def test_auto_runs_come_from_stored_noise_and_timings_and_a_trial_holds_them(tmp_path):
    """`workload.runs = 0`: R* from what the database holds, deterministically; then a real
    `perfbisect measure` runs exactly that many measured runs per trial."""
    from perfbisect.demo.target import make_demo_target

    target = make_demo_target(tmp_path / "demo", commits=9)
    text = target.config.read_text()
    assert "runs = 5" in text
    config_path = target.root / "auto.toml"
    config_path.write_text(text.replace("runs = 5", "runs = 0"))
    config = load_config(config_path)
    db = tmp_path / "r.sqlite"
    with Workspace.open(config, db) as ws:
        fresh = runs_advice(ws, "baseline")
        assert fresh.runs == FALLBACK_RUNS and fresh.recommended is None and "until" in fresh.line()
        seed_trials(ws, "baseline")
        keep_noise(ws, ["baseline"], 2.0, 20, "bisection #1: residual noise of 20 trials")
        advice = runs_advice(ws, "baseline")
    sigma_w = math.sqrt(4 * 0.01 / 3)
    expected = optimal_runs(80.0, 10.0, math.log1p(0.02), sigma_w)
    assert (advice.timings.start_s, advice.timings.run_s, advice.timings.trials) == pytest.approx((80.0, 10.0, 4))
    assert advice.sigma_w == pytest.approx(sigma_w) and advice.sigma_b == pytest.approx(math.log1p(0.02))
    assert advice.runs == advice.recommended == expected == 18
    assert advice.line().startswith("runs per trial: auto → 18") and "start 80 s, run 10 s" in advice.line()
    # A config that keeps runs = 5 reads the same noise (learned under auto) and says what 18 would save.
    with Workspace.open(load_config(target.config), db) as ws:
        fixed = runs_advice(ws, "baseline")
    assert fixed.runs == 5 and fixed.recommended == 18 and fixed.saving_pct > 0 and "18 would reach" in fixed.line()

    proc = run_command("measure", "HEAD", "-m", "baseline", "-n", "1", "-c", str(config_path), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    assert "auto → 18" in proc.stderr
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        (trial,) = con.execute("select max(id) from trials").fetchone()
        measured = con.execute("select count(*) from runs where trial_id = ? and warmup = 0", (trial,)).fetchone()[0]
    assert measured == 18
