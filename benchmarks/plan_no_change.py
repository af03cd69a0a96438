"""What `plan`'s "if nothing changed" line costs and says: CPU seconds of the forecast with and without
the no-change simulation, and the trials each outcome is expected to take, at the configured prior noise
(stats defaults) for a few range lengths. CPU seconds, not wall: the figure a busy machine does not move.

Usage:  python benchmarks/plan_no_change.py [--candidates 6,20,36] [--effect 10]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfbisect.engine import cost  # noqa: E402
from perfbisect.settings import StatsConfig  # noqa: E402
from perfbisect.engine.stats import NoiseModel  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", default="6,20,36")
    parser.add_argument("--effect", type=float, default=10.0)
    args = parser.parse_args()
    settings = StatsConfig()
    noise = NoiseModel.prior(settings.prior_sigma_pct)
    reps = cost.NO_CHANGE_REPS
    print("candidates  cpu_s without  cpu_s with  trials (regression)  trials (no change)")
    for n in (int(x) for x in args.candidates.split(",")):
        cpu = []
        for r in (0, reps):
            cost.NO_CHANGE_REPS = r
            c0 = time.process_time()
            f = cost.forecast_trials(n, settings, noise, cost.Effect(args.effect, "given"), budget_s=60.0)
            cpu.append(time.process_time() - c0)
        print(f"{n:>10}  {cpu[0]:>13.2f}  {cpu[1]:>10.2f}  {f.trials:>19}  {f.no_change!s:>18}")
    cost.NO_CHANGE_REPS = reps


if __name__ == "__main__":
    main()
