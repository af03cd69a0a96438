"""`perfbisect calibrate` measures what a bisection meets (two builds' sessions interleaved, each a
bisection's trial), stores σ_b with its dof, and says when it disagrees with what bisections on this
host measured and which figure the next bisection starts from (perfbisect/app/calibration.py, over the
stored figures of perfbisect/measure/noise_figures.py)."""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
from pathlib import Path

import pytest
from scipy import stats as scipy_stats

from perfbisect.app.calibration import keep_noise, noise_model_and_note
from perfbisect.measure.noise_figures import LEARNED_DOF_CAP, starting_noise
from perfbisect.config import load_config
from perfbisect.demo.target import make_demo_target
from perfbisect.model import NoiseKey
from perfbisect.engine.stats import variance_ratio_test
from perfbisect.store import NoiseEstimate
from perfbisect.app.workspace import Workspace
from tests.cli_runner import run_command

KEY = NoiseKey("host-a", "baseline", "m1", "w1")


def estimate(sigma_pct: float, dof: float, source: str, created_at: float, key: NoiseKey = KEY) -> NoiseEstimate:
    return NoiseEstimate(**key._asdict(), sigma_b=math.log1p(sigma_pct / 100), dof=dof, sigma_w=0.01,
                         source=source, created_at=created_at)


def test_the_f_test_is_scipy_s_two_sided_f_test():
    ratio, p = variance_ratio_test(0.03, 8, 0.09, 14)
    assert ratio == pytest.approx(1 / 9)
    assert p == pytest.approx(2 * scipy_stats.f.cdf(1 / 9, 8, 14))
    assert variance_ratio_test(0.05, 10.5, 0.05, 7.3)[1] > 0.9  # fractional dof, one variance
    assert math.isnan(variance_ratio_test(0.05, 0, 0.05, 7)[1])


def test_the_next_bisection_starts_from_what_bisections_measured_and_from_the_larger_in_doubt():
    bisection = estimate(9.0, 20, "bisection #3: residual noise of 24 trials", 200.0)
    elsewhere = estimate(30.0, 20, "bisection #1: another host", 300.0, NoiseKey("host-b", "baseline", "m1", "w1"))
    # Nothing measured here (another host's figure does not count): the prior.
    none = starting_noise([elsewhere], KEY)
    assert none.figure is None and "no noise measured" in none.why
    # Only a calibration: it is used, and says no bisection has measured yet.
    cal = estimate(3.0, 8, "calibrate: 5+5 trials", 100.0)
    only = starting_noise([cal], KEY)
    assert only.figure.origin == "calibrate" and only.note() is None
    # They agree (3.6% vs 4.0%): what bisections measured is preferred, no note.
    agree = starting_noise([estimate(4.0, 20, "bisection #3: …", 200.0), estimate(3.6, 8, "calibrate: …", 100.0)], KEY)
    assert agree.figure.origin == "bisection #3" and not agree.disagree and agree.note() is None
    # They disagree and the bisection's is larger: the bisection's, with both figures and their dof named.
    low = starting_noise([elsewhere, bisection, cal], KEY)
    assert low.disagree and low.figure.origin == "bisection #3"
    note = low.note()
    assert "3.0% (calibrate, 8 dof)" in note and "9.0% (bisection #3, 20 dof)" in note
    assert "starts from 9.0% (bisection #3)" in note and "preferred" in note
    # They disagree and the calibration's is larger: in doubt, the larger.
    high = starting_noise([estimate(1.0, 20, "bisection #4: …", 300.0), estimate(6.0, 8, "calibrate: …", 100.0)], KEY)
    assert high.disagree and high.figure.origin == "calibrate" and "the larger" in high.why
    # With hundreds of dof a small difference is significant but does not matter: no disagreement.
    tiny = starting_noise([estimate(5.0, 2000, "bisection #5: …", 300.0), estimate(5.5, 2000, "calibrate: …", 100.0)], KEY)
    assert tiny.agreement.p_value < 0.05 and not tiny.disagree


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return make_demo_target(tmp_path_factory.mktemp("calibrate") / "demo", commits=10)


def test_calibrate_interleaves_two_builds_stores_its_dof_and_names_a_disagreement(demo, tmp_path):
    """A bisection on this host measured 60% (30 dof) — far more than the emulator's ~2% sessions, and more than
    its sessions spread even with both cores busy (at 25% a loaded run measured enough to make the F test doubt):
    calibrate says they disagree, names both figures, and the next bisection starts from the 60%."""
    db = tmp_path / "r.sqlite"
    config = load_config(demo.config)
    with Workspace.open(config, db) as ws:
        keep_noise(ws, ["baseline"], 60.0, 30, "bisection #7: residual noise of 31 trials after the change(s) and drift")
    proc = run_command("calibrate", "HEAD", "-n", "3", "-m", "baseline", "-c", str(demo.config), "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    head = subprocess.run(["git", "-C", str(demo.repo), "rev-parse", "HEAD", "HEAD~1"], capture_output=True, text=True,
                          check=True).stdout.split()
    assert [out["commit"], out["against"]] == head  # B is REV's first parent by default
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        order = [c for (c,) in con.execute("select commit_sha from trials where purpose = 'calibrate' order by id")]
        stored = con.execute("select sigma_b, dof, source from noise_estimates order by id").fetchall()
    a, b = head
    assert order == [a, b, b, a, a, b]  # A B B A A B: drift falls on both builds alike
    assert out["dof"] == 4 and stored[-1][1] == 4.0  # 2 + 2: its true dof, uncapped
    assert stored[-1][2].startswith("calibrate: 3+3 trials of") and "interleaved" in stored[-1][2]
    assert stored[-1][0] == pytest.approx(math.log1p(out["sigma_b_pct"] / 100))
    text = " ".join(out["lines"])
    assert "they disagree" in text and "60.0% (bisection #7, 30 dof)" in text
    assert f"{out['sigma_b_pct']:.1f}% (calibrate, 4 dof)" in text
    assert out["next_bisection"]["disagree"] is True and out["next_bisection"]["sigma_b_pct"] == pytest.approx(60.0)
    # And how many runs per trial would be cheapest at that noise and the timings these trials had.
    assert out["lines"][-1].startswith("runs per trial: 5 now") and out["runs_per_trial"]["runs"] == 5
    assert 3 <= out["runs_per_trial"]["recommended"] <= 30
    # The statement is true: the noise model a bisection opens with starts from the 60%, and warns.
    with Workspace.open(config, db) as ws:
        noise, note = noise_model_and_note(ws, ["baseline"])
    assert noise.source.startswith("learned on this host by bisection #7") and noise.dof >= LEARNED_DOF_CAP
    assert note is not None and "they disagree" in note


def test_calibrate_refuses_a_partner_that_cannot_interleave(demo, tmp_path):
    """--against the same build, or a root commit without --against: a usage error before any trial."""
    db = str(tmp_path / "r.sqlite")
    itself = run_command("calibrate", "HEAD", "--against", "HEAD", "-c", str(demo.config), "--db", db)
    assert itself.returncode == 2 and "itself" in itself.stderr and "Traceback" not in itself.stderr
    root = run_command("calibrate", demo.good, "-c", str(demo.config), "--db", db)
    assert root.returncode == 2 and "--against REV2" in " ".join(root.stderr.split())
    assert not Path(db).exists() or sqlite3.connect(db).execute("select count(*) from trials").fetchone() == (0,)
