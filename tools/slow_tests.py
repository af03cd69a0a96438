"""Which tests are slow: read a full run's JUnit XML and write ``tests/slow.txt``, the tests that took at least
``--over`` seconds (file::function, every parametrisation of one that is slow), which ``tests/conftest.py`` marks
``slow`` so that ``pytest -m "not slow"`` is the fast local loop.

    uv run pytest --junitxml=/tmp/junit.xml           # the full suite, once
    python tools/slow_tests.py /tmp/junit.xml          # tests/slow.txt, and what the fast loop is left with

A test added later is in the fast loop until the list is made again: the loop gets slower, nothing is skipped in
CI (CI runs every test).
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIST = ROOT / "tests" / "slow.txt"


def durations(junit: Path) -> dict[str, float]:
    """file::function → the longest time any of its parametrisations took (setup, call and teardown)."""
    out: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/") + ".py"
        name = case.get("name", "").split("[", 1)[0]
        key = f"{module}::{name}"
        out[key] = max(out[key], float(case.get("time") or 0.0))
    return dict(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("junit", type=Path)
    ap.add_argument("--over", type=float, default=2.0, help="seconds from which a test is slow (default 2)")
    args = ap.parse_args()
    times = durations(args.junit)
    slow = sorted(k for k, t in times.items() if t >= args.over)
    LIST.write_text("# Written by tools/slow_tests.py from a full run: tests that took "
                    f"≥ {args.over:g} s, marked slow by tests/conftest.py.\n" + "".join(f"{k}\n" for k in slow))
    fast = sum(t for k, t in times.items() if k not in slow)
    print(f"{len(slow)} of {len(times)} tests slow (≥ {args.over:g} s): {sum(times[k] for k in slow):.0f} s of "
          f"{sum(times.values()):.0f} s; the rest take {fast:.0f} s of one worker's time -> {LIST.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
