"""A synthetic results database over a real git repository, for report tests and benchmarks.

``make_results(dir, commits=64, trials=600)`` writes a git repository with one commit per level
(a planted step in the middle) and a results database holding a finished bisection over it: trials
with runs, sampled GPU state (clocks, temperature, power, a throttled stretch), worker env checks,
observations and an outcome. No server runs; the report reads it exactly as it reads a real one.
"""

from __future__ import annotations

import math
import os
import random
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..model import (
    BisectOutcome,
    Comparison,
    EnvCheck,
    GpuSample,
    RunResult,
    SystemSnapshot,
    SystemSummary,
    TrialIdentity,
    TrialStatus,
    Verdict,
)

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "Synthetic Upstream", "GIT_AUTHOR_EMAIL": "upstream@example.invalid",
    "GIT_COMMITTER_NAME": "Synthetic Upstream", "GIT_COMMITTER_EMAIL": "upstream@example.invalid",
}


@dataclass(frozen=True)
class SyntheticResults:
    repo: Path
    db: Path
    commits: tuple[str, ...]
    culprit: str
    bisection_ids: tuple[int, ...]


def make_repo(path: Path, subjects: Sequence[str], remote: str | None = None) -> list[str]:
    """A git repository with one commit per subject (each touching one file); returns the shas."""
    path.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **_GIT_ENV}

    def git(*args: str, stdin: str | None = None) -> str:
        return subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True, text=True,
                              env=env, input=stdin).stdout.strip()

    git("init", "-q", "-b", "main")
    # fast-import: 64 commits in one process instead of 200 git invocations.
    stream = []
    for i, subject in enumerate(subjects):
        data = subject.encode()
        body = f"level {i}\n".encode()
        stream.append(b"commit refs/heads/main\n")
        stream.append(b"committer Synthetic Upstream <upstream@example.invalid> %d +0000\n" % (1764000000 + 60 * i))
        stream.append(b"data %d\n%s\n" % (len(data), data))
        stream.append(b"M 644 inline python/sglang/srt/level.py\ndata %d\n%s\n" % (len(body), body))
    subprocess.run(["git", "-C", str(path), "fast-import", "--quiet"], input=b"".join(stream), check=True, env=env)
    git("reset", "-q", "--hard", "main")
    if remote:
        git("remote", "add", "origin", remote)
    return git("rev-list", "--reverse", "main").split()


def _samples(t0: float, seconds: float, clock: float, throttled: bool, rng: random.Random) -> list[SystemSnapshot]:
    out = []
    for k in range(int(seconds)):
        gpus = tuple(
            GpuSample(index=g, name="NVIDIA H200", sm_clock_mhz=round(clock + rng.gauss(0, 15)), sm_clock_max_mhz=1980,
                      temperature_c=round(55 + 10 * k / max(seconds, 1) + rng.gauss(0, 1)), power_w=round(450 + rng.gauss(0, 20)),
                      power_limit_w=700, throttle_reasons=(0x20 if throttled else 0x0), memory_used_mib=80000.0,
                      memory_total_mib=143771.0, utilization_pct=97.0, pstate="P0")
            for g in range(2)
        )
        out.append(SystemSnapshot(t=t0 + k, gpus=gpus, load_avg_1m=1.5, cpu_mhz=2600.0, source="nvml"))
    return out


def make_results(
    directory: Path,
    commits: int = 64,
    trials: int = 600,
    *,
    subjects: Sequence[str] | None = None,
    bisections: int = 1,
    runs_per_trial: int = 5,
    step_pct: float = -8.0,
    sigma_pct: float = 2.0,
    remote: str | None = "https://github.com/sgl-project/sglang.git",
    seed: int = 3,
    drift_pct_per_trial: float = 0.0,
) -> SyntheticResults:
    """Write the repository and the database (see the module docstring); trials are spread over bisections.
    ``drift_pct_per_trial``: the machine slows (or speeds up) by this much per trial, on top of the step."""
    from ..store import open_store

    rng = random.Random(seed)
    directory = Path(directory)
    subjects = list(subjects or [f"Change {i}: tune the scheduler" for i in range(commits)])
    while len(subjects) < commits:
        subjects.append(f"Change {len(subjects)}")
    shas = make_repo(directory / "repo", subjects[:commits], remote)
    culprit_i = commits // 2
    culprit = shas[culprit_i]
    store = open_store(directory / "results.sqlite")
    ids = []
    per_bisection = max(2, trials // bisections)
    try:
        for b in range(bisections):
            ids.append(_bisection(store, directory, shas, culprit_i, b, per_bisection, rng, runs_per_trial=runs_per_trial,
                                  step_pct=step_pct, sigma_pct=sigma_pct, drift_pct_per_trial=drift_pct_per_trial))
    finally:
        store.close()
    return SyntheticResults(directory / "repo", directory / "results.sqlite", tuple(shas), culprit, tuple(ids))


def _bisection(store: Any, directory: Path, shas: Sequence[str], culprit_i: int, b: int, per_bisection: int,
               rng: random.Random, *, runs_per_trial: int, step_pct: float, sigma_pct: float,
               drift_pct_per_trial: float) -> int:
    """The ``b``-th finished bisection over ``shas``, a day after the one before: its endpoints measured
    first, then random commits, ``step_pct`` slower from ``culprit_i`` on; its id."""
    commits = len(shas)
    culprit = shas[culprit_i]
    base_t = 1764000000.0
    bid = store.begin_bisection(good=shas[0], bad=shas[-1], commits=shas, metric="baseline",
                                settings={"metric": "baseline", "max_trials_total": per_bisection},
                                target=str(directory / "repo"), started_at=base_t + b * 86400)
    t = base_t + b * 86400
    drift = rng.gauss(0, 0.02)
    with store.session(write=True) as s:
        for k in range(per_bisection):
            i = [0, commits - 1][k] if k < 2 else rng.randrange(commits)
            level = 500.0 * math.exp(drift) * (1 + step_pct / 100 if i >= culprit_i else 1.0)
            level *= math.exp(k * math.log1p(drift_pct_per_trial / 100))
            _trial(s, store.owner, bid, k, shas[i], i, level, t, rng, sigma_pct, runs_per_trial)
            t += 40
    cmp = Comparison(Verdict.REGRESSED, step_pct, step_pct - 1.5, step_pct + 1.5, sigma_pct, "synthetic",
                     per_bisection // 2, per_bisection // 2, 0.001, 3.0, "synthetic step")
    store.finish_bisection(bid, BisectOutcome(
        verdict=Verdict.REGRESSED, good=shas[0], bad=shas[-1], culprit=culprit, effect_pct=step_pct,
        endpoint_comparison=cmp, culprit_comparison=cmp, trials_used=per_bisection,
        explanation="A synthetic bisection for report tests and benchmarks.", answer_probability=0.995,
        noise_sigma_pct=sigma_pct, noise_dof=float(per_bisection - 2),
    ))
    return bid


def _trial(s: Any, owner: str, bid: int, k: int, sha: str, i: int, level: float, t: float, rng: random.Random,
           sigma_pct: float, runs_per_trial: int) -> None:
    """The ``k``-th trial of bisection ``bid`` (of ``sha``, the ``i``-th commit) at ``level`` tok/s: its
    runs, sampled GPU state (throttled 3% of the time, then flagged), env checks and its observation."""
    from ..store import bisection_queries, trial_queries
    from ..store.trial_queries import TrialDetails
    from ..store.samples import compact

    session_factor = math.exp(rng.gauss(0, sigma_pct / 100))
    throttled = rng.random() < 0.03
    clock = 1500.0 if throttled else 1980.0
    ident = TrialIdentity(sha, "a1b2c3d4e5f60718", f"build{i:04d}", "baseline", "m0de", "w0rk",
                          "2xNVIDIA-H200-drv580.159.04-3f2a9c1e")
    tid = trial_queries.insert_trial(s, ident, "bisect", owner=owner, bisection_id=bid, started_at=t)
    for r in range(runs_per_trial + 1):
        v = level * session_factor * math.exp(rng.gauss(0, 0.008))
        trial_queries.insert_run(s, tid, RunResult(
            index=r, warmup=(r == 0), requested_tokens=256, output_tokens=256, prompt_tokens=30,
            ttft_s=0.05 + rng.random() * 0.01, decode_tok_s=v, e2e_tok_s=v * 0.97,
            itl_p50_ms=1000 / v, itl_p99_ms=1300 / v,
        ))
    snaps = _samples(t, 12, clock, throttled, rng)
    system = SystemSummary(samples=len(snaps), sm_clock_mean_mhz=clock, sm_clock_min_mhz=clock - 30,
                           sm_clock_max_mhz=clock + 20, temperature_mean_c=60, temperature_max_c=66,
                           power_mean_w=900, throttled_fraction=0.5 if throttled else 0.0,
                           throttle_reasons_seen=0x20 if throttled else 0, load_avg_1m=1.5)
    details = TrialDetails.encode(
        system, compact(snaps),
        (EnvCheck(pid=100 + k, cmdline="python -m sglang.launch_server --tp 2 --port 30000"),
         EnvCheck(pid=200 + k, cmdline="sglang::scheduler_TP1", missing=("NCCL_PROTO",))),
        {"version": "0.5.6"}, {"torch": "2.11.0", "sglang": "0.5.6", "cuda": "13.0", "nccl": "2.28.3"},
    )
    result = trial_queries.finish_trial(s, tid, TrialStatus.OK, details, finished_at=t + 30)
    flag = "[baseline] throttled: SwThermalSlowdown in 50% of samples" if throttled else None
    bisection_queries.insert_observation(s, bid, k, sha, result.summary, [tid], result.system.as_covariates(), flag=flag)
