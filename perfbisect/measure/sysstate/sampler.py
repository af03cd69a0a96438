"""The sampler: readings before, during (about 1 Hz, in a daemon thread) and after a trial, reduced
to a :class:`~perfbisect.model.SystemSummary`. A missing collector is a note in the summary, said
once, never an exception."""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Sequence

import psutil

from ...model import SystemSnapshot, SystemSummary
from .collectors import CollectorSet
from .readings import ExcludePids, is_throttled, resolve_pids


def descends_from(pid: int, ancestor: int) -> bool:
    """True when ``pid`` is ``ancestor`` or one of its descendants (psutil's parent links)."""
    if pid == ancestor:
        return True
    try:
        return any(p.pid == ancestor for p in psutil.Process(pid).parents())
    except psutil.Error:
        return False


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(
    snapshots: Sequence[SystemSnapshot],
    notes: Sequence[str] = (),
    exclude_pids: ExcludePids = (),
) -> SystemSummary:
    """Reduce snapshots to means/min/max, throttled fraction, reasons seen and other GPU processes."""
    sm = [g.sm_clock_mhz for s in snapshots for g in s.gpus if g.sm_clock_mhz is not None]
    temps = [g.temperature_c for s in snapshots for g in s.gpus if g.temperature_c is not None]
    power = [g.power_w for s in snapshots for g in s.gpus if g.power_w is not None]
    loads = [s.load_avg_1m for s in snapshots if s.load_avg_1m is not None]
    with_reasons = 0
    throttled = 0
    seen = 0
    for s in snapshots:
        masks = [g.throttle_reasons for g in s.gpus if g.throttle_reasons is not None]
        if not masks:
            continue
        with_reasons += 1
        for m in masks:
            seen |= m
        if any(is_throttled(m) for m in masks):
            throttled += 1
    own = resolve_pids(exclude_pids)
    others = sorted({p for s in snapshots for g in s.gpus for p in g.processes} - own)
    return SystemSummary(
        samples=len(snapshots),
        sm_clock_mean_mhz=_mean(sm),
        sm_clock_min_mhz=min(sm) if sm else None,
        sm_clock_max_mhz=max(sm) if sm else None,
        temperature_mean_c=_mean(temps),
        temperature_max_c=max(temps) if temps else None,
        power_mean_w=_mean(power),
        throttled_fraction=throttled / with_reasons if with_reasons else None,
        throttle_reasons_seen=seen,
        load_avg_1m=_mean(loads),
        other_gpu_processes=tuple(others),
        notes=tuple(notes),
    )


class Sampler:
    """Samples the machine before, during (every ``interval_s``, daemon thread) and after a block::

        with Sampler() as sampler:
            run_the_trial()
        summary = sampler.summary()
        stored = compact(sampler.snapshots)  # perfbisect.store.samples

    ``exclude_pids`` (pids, or a callable returning them at summary time, e.g. the server's process
    group) are not reported as other GPU processes; perfbisect's own pid never is.
    """

    def __init__(
        self,
        interval_s: float = 1.0,
        collectors: Sequence[Any] | None = None,
        exclude_pids: ExcludePids = (),
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.interval_s = interval_s
        self._collectors = collectors
        self._exclude = exclude_pids
        self._set: CollectorSet | None = None
        self._snapshots: list[SystemSnapshot] = []
        self._own: set[int] = set()  # GPU pids seen to descend from this process
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.thread_cpu_s = 0.0  # CPU time the sampling thread used (its own clock)
        self.started_at: float | None = None
        self.stopped_at: float | None = None

    def __enter__(self) -> "Sampler":
        self._set = CollectorSet(self._collectors)
        self.started_at = time.time()
        self._append(self._set.snapshot())  # "before"
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="perfbisect-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 30.0)
        if self._set is not None:
            self._append(self._set.snapshot())  # "after"
            self._set.close()
        self.stopped_at = time.time()

    def _append(self, snap: SystemSnapshot) -> None:
        # GPU processes that are perfbisect's own children (its server and workers, a command
        # workload) are recognised while they live: after teardown their parentage is gone, and
        # reporting them as "other GPU processes" would flag every trial as contended.
        me = os.getpid()
        own = {p for g in snap.gpus for p in g.processes if p not in self._own and descends_from(p, me)}
        with self._lock:
            self._snapshots.append(snap)
            self._own.update(own)

    def _loop(self) -> None:
        assert self._set is not None
        while not self._stop.wait(self.interval_s):
            self._append(self._set.snapshot())
            self.thread_cpu_s = time.thread_time()

    @property
    def snapshots(self) -> tuple[SystemSnapshot, ...]:
        """Every snapshot so far: the first is "before", the last (after exit) is "after"."""
        with self._lock:
            return tuple(self._snapshots)

    @property
    def notes(self) -> tuple[str, ...]:
        """What could not be recorded, each said once."""
        return tuple(self._set.notes) if self._set is not None else ()

    def summary(self, since: float | None = None, until: float | None = None) -> SystemSummary:
        """Summary over the snapshots taken in [since, until] (unix times; default: all)."""
        snaps = [
            s
            for s in self.snapshots
            if (since is None or s.t >= since) and (until is None or s.t <= until)
        ]
        own = set(self._own)
        exclude = self._exclude
        return summarize(snaps, notes=self.notes, exclude_pids=lambda: own | resolve_pids(exclude))
