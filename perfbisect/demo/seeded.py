"""A load-proof measurement of the demo target: what the emulator would serve, computed, not timed.

``python -m perfbisect.demo.seeded`` is a ``command`` workload (perfbisect runs it in the trial's
worktree and reads the last JSON line it prints). It reads the same speed knobs from the checked-out
code as the emulator (``read_code_speed``: the planted commit's slower verify cycle, a patch's
capture fix), turns them into the mode's tokens per second, and multiplies by a noise factor drawn
from a seeded generator: seeded by ``PERFBISECT_SEEDED_SEED``, the commit, the mode and how many
times this commit and mode were measured before (a counter file per pair under
``PERFBISECT_SEEDED_STATE``). So the values of a bisection depend on what it measured, never on the
machine's load, and its outcome is the same on an idle and a busy machine: what tests that need a
finished bisection stand on. The live emulator (HTTP streaming, process groups, timing) is tested
where it is the point.

Environment: ``PERFBISECT_SEEDED_MODE`` (``baseline`` or a speculative mode's name; set per mode in
the config), ``PERFBISECT_SEEDED_SIGMA`` (log-sd of the trial-to-trial noise, default 0.01),
``PERFBISECT_SEEDED_DRIFT`` (e.g. -0.003: invocation n of the whole target is (1 + drift)^n as
fast, the drift-only demo's slow machine drift),
``PERFBISECT_SEEDED_SEED`` and ``PERFBISECT_SEEDED_STATE`` (required: where the counters live).
Stdlib only, like the emulator: it runs under the target's interpreter.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

from .emulator import read_code_speed


def token_gap_ms(worktree: Path, speculative: bool) -> float:
    """The emulator's noiseless slowest gap between streamed tokens (what its ITL p99 reads): one
    decode step, or one verify cycle (its accepted tokens arrive together)."""
    speed = read_code_speed(worktree)
    return speed.verify_cycle_ms if speculative else speed.decode_step_ms


def tokens_per_second(worktree: Path, speculative: bool) -> float:
    """The emulator's noiseless decode speed for this code: one token per decode step, or the mean
    accept length per verify cycle."""
    speed = read_code_speed(worktree)
    if speculative:
        return 1000.0 * speed.effective_accept_length / speed.verify_cycle_ms
    return 1000.0 / speed.decode_step_ms


def next_count(state: Path, key: str) -> int:
    """How many times ``key`` was measured before; counts this time."""
    state.mkdir(parents=True, exist_ok=True)
    path = state / hashlib.sha256(key.encode()).hexdigest()[:24]
    count = int(path.read_text()) if path.exists() else 0
    path.write_text(str(count + 1))
    return count


def main() -> int:
    env = os.environ
    worktree = Path.cwd()
    state = env.get("PERFBISECT_SEEDED_STATE")
    if not state:
        print("perfbisect.demo.seeded: set PERFBISECT_SEEDED_STATE (a directory for its counters)", file=sys.stderr)
        return 2
    mode = env.get("PERFBISECT_SEEDED_MODE", "baseline")
    sigma = float(env.get("PERFBISECT_SEEDED_SIGMA", "0.01"))
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=worktree, capture_output=True, text=True,
                            check=True).stdout.strip()
    key = f"{env.get('PERFBISECT_SEEDED_SEED', '0')}:{commit}:{mode}"
    count = next_count(Path(state), key)
    rng = random.Random(f"{key}:{count}")
    drift = float(env.get("PERFBISECT_SEEDED_DRIFT", "0"))
    invocation = next_count(Path(state), "every invocation") if drift else 0
    factor = math.exp(rng.gauss(0.0, sigma)) * (1.0 + drift) ** invocation  # > 1: this session ran faster
    speculative = mode != "baseline"
    value = tokens_per_second(worktree, speculative) * factor
    print(json.dumps({"tok_s": value, "itl_p99_ms": token_gap_ms(worktree, speculative) / factor,
                      "commit": commit, "mode": mode, "count": count}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
