"""What one trial works with: the commit as prepared for it, and what its server session gathers.

``Prepared`` is a commit checked out in a worktree with the patch stack applied and built (or why it
cannot be), in the pinned environment of its commit; ``TrialSession`` is what one trial gathers while
it runs: its runs, stored as they land, with their time window, the system-state sampler, the server,
its env checks and server info. ``with_start_state`` adds the state before the trial's own load to the
sampler's summary; ``format_run`` is a run's progress line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

from ..metrics import DECODE, Metric
from ..model import Commit, EnvCheck, RunResult, SystemSummary
from ..store import Store
from .served import Served
from .server import ServerSession
from .sysstate import Sampler
from ..runtime.progress import Progress


@dataclass
class Prepared:
    """A commit checked out in a worktree with the stack applied and built, or why it can't be."""

    commit: Commit
    worktree: Path | None = None
    slot: int = 0  # the worktree slot (path length) it was prepared in
    patch_hash: str = "none"
    build_hash: str = "none"
    untestable: str | None = None  # reason: patch conflict, build failure
    versions: dict | None = None  # target's torch/sglang/CUDA/NCCL versions, read once per commit
    python: str = ""  # the interpreter its build, server and workload run under: the pinned environment's, else target.python
    env_key: str | None = None  # the environment it runs in (perfbisect/measure/envs.py), if any
    env_info: dict | None = None  # that environment's key, lock, package count, resolution date (stored with the versions)
    server_env: dict = field(default_factory=dict)  # what the server (or command) gets beside the config's env (rust_extensions)
    # On an SGLang target: the versions read before each trial, with the server's env for the mode,
    # per (worktree, PYTHON* variables of that env): they hold where its sglang is imported from.
    served: dict | None = None


class TrialSession:
    """What one trial gathers while it runs: its runs (stored as they land) and their time window,
    the sampler, the server, its env checks and server info."""

    def __init__(self, trial_id: int, store: Store, progress: Progress, metric: Metric | None = None):
        self.trial_id = trial_id
        self.metric = metric
        self.store = store
        self.progress = progress
        self.servers: list[ServerSession] = []
        self.window: list[float] = []  # when measured runs ran: the state summary covers only that
        self.landed: dict[int, float] = {}  # run index -> when it landed
        self.env_checks: tuple[EnvCheck, ...] = ()
        self.info: dict = {}
        self.served: Served | None = None
        self.sampler = Sampler(
            interval_s=1.0, exclude_pids=lambda: self.servers[0].group_pids() if self.servers else ()
        )

    def on_run(self, run: RunResult) -> None:
        self.store.add_run(self.trial_id, run)
        self.landed[run.index] = time.time()
        if run.warmup or not self.window:
            self.window[:] = [self.landed[run.index]]
        else:
            self.window[1:] = [self.landed[run.index]]
        self.progress.detail("  " + format_run(run, self.metric))

    def on_warmup_detected(self, runs: list[RunResult]) -> None:
        """Leading measured runs turned out to be warm-up: re-mark them stored, and start the state
        window after them (it covers measured runs only)."""
        self.store.mark_detected_warmup(self.trial_id, [r.index for r in runs])
        self.window[0] = max(self.landed[r.index] for r in runs)
        self.progress.info(
            f"  run{'s' if len(runs) > 1 else ''} {', '.join(str(r.index) for r in runs)}: slower than the later runs "
            f"beyond their spread: counted as warm-up (workload.detect_warmup); more runs take their place, up to a bound"
        )


def with_start_state(system: SystemSummary, snapshots: Sequence) -> SystemSummary:
    """Add the state before the trial's own load (first snapshot): temperature and CPU load then."""
    if not snapshots:
        return system
    first = snapshots[0]
    temps = [g.temperature_c for g in first.gpus if g.temperature_c is not None]
    return replace(
        system,
        start_temperature_c=(sum(temps) / len(temps)) if temps else None,
        start_load_avg=first.load_avg_1m,
    )


def format_run(run: RunResult, metric: Metric | None = None) -> str:
    """One progress line for a run, its value in the metric's own unit."""
    tag = "warm-up" if run.warmup else f"run {run.index}"
    if run.error:
        return f"{tag}: error: {run.error}"
    metric = metric or DECODE
    spec = ""
    if run.spec_accept_length:
        cycle = run.cycle_time_ms
        spec = f", accept {run.spec_accept_length:.2f}" + (f", cycle {cycle:.1f} ms" if cycle else "")
    flag = "" if run.complete else f"  FLAGGED: {run.output_tokens}/{run.requested_tokens} tokens, kept out of statistics"
    ttft = f", TTFT {run.ttft_s * 1000:.0f} ms" if run.ttft_s is not None and metric.name != "ttft_ms" else ""
    itl = (f", ITL p50/p99 {run.itl_p50_ms:.2f}/{run.itl_p99_ms:.2f} ms"
           if run.itl_p50_ms is not None and run.itl_p99_ms is not None and not metric.name.startswith("itl_") else "")
    return f"{tag}: {metric.format(run.value)}{ttft}{itl}{spec}{flag}"
