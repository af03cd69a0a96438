"""Warm-up the fixed count did not cover: leading measured runs slower than the rest beyond noise.

A session's first requests can be slow for reasons no fixed ``workload.warmup`` count is sure to
cover (JIT compilation, CUDA graph capture for a new shape, cold caches: on the H200 one warm-up run
was still marginal). ``leading_warmup`` finds the longest run of leading measured runs that are each slower
than the runs *after* them by more than those runs' own spread allows (judged against the runs after
the whole prefix, so a second slow run cannot hide the first by widening the spread). Only leading
runs, only the slow direction: a run in the middle is noise, and a fast first run is not warm-up.

The rule (robust, and one that cannot fire on a collapsed spread):

- centre: the median of the later runs (log scale, oriented so that higher is better);
- scale: the larger of 1.4826 × their MAD and their standard deviation — with four later runs the
  MAD alone collapses often enough to flag 11% of pure-noise trials at 3 × MAD, the standard
  deviation does not, and a slow run among the later ones only widens it (fewer detections);
- a run is warm-up when it lies more than ``Z`` scales and more than ``MIN_GAP_PCT`` below the centre.

With ``Z`` = 5 and normal run noise, a trial of 5 runs flags its first run by chance about 1% of the
time (simulated, 10⁶ trials; fewer with more runs); at least ``MIN_LATER_RUNS`` later runs are needed.
``workload.run_workload`` then measures one more run per detected one, up to ``extra_runs_bound``.
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

Z = 5.0
MIN_GAP_PCT = 2.0  # a warm-up effect smaller than this is not worth a run
MIN_LATER_RUNS = 4
MAD_TO_SD = 1.4826  # the MAD of normal noise times this estimates its standard deviation


def leading_warmup(values: Sequence[float], higher_is_better: bool = True) -> int:
    """How many leading values (positive metric values of measured runs, in run order) are warm-up:
    the largest d whose first d runs all lie beyond the bar set by the runs after them."""
    logs = [math.log(v) if higher_is_better else -math.log(v) for v in values]
    for d in range(len(logs) - MIN_LATER_RUNS, 0, -1):
        later = logs[d:]
        centre = statistics.median(later)
        mad = statistics.median(abs(x - centre) for x in later)
        bar = max(Z * max(MAD_TO_SD * mad, statistics.stdev(later)), math.log1p(MIN_GAP_PCT / 100.0))
        if all(centre - x > bar for x in logs[:d]):
            return d
    return 0


def extra_runs_bound(runs: int) -> int:
    """The most extra runs a trial of ``runs`` measured runs spends replacing detected warm-up."""
    return max(2, runs // 2)


__all__ = ["MIN_GAP_PCT", "MIN_LATER_RUNS", "Z", "extra_runs_bound", "leading_warmup"]
