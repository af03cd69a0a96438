"""Where perfbisect's trials go in one cell (issue #35): every decision of the search, by phase and reason.

Run from the repository root: .venv/bin/python benchmarks/issue35/phases.py S1 60 100000
Prints the mean number of trials per bisection asked for by each (phase, reason) — the reason with its commits
and numbers blanked so that the same rule counts as one row — over seeds N..N+reps−1."""
import collections
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import strategies as S  # noqa: E402
from perfbisect.report import words  # noqa: E402


def main(cell: str, reps: int, base: int) -> None:
    tally: collections.Counter = collections.Counter()

    def count(act) -> None:
        reason = re.sub(r"[0-9.]+", "N", re.sub(r"c\d{3}", "cX", words.measure_text(act)))
        tally[(act.phase, reason[:110])] += 1

    for seed in range(base, base + reps):
        t = S.make_target(S.SCENARIOS[cell], seed)
        t.seed = seed
        S.run_perfbisect(t, on_measure=count)
    for (phase, reason), v in tally.most_common():
        print(f"{v / reps:6.2f}  {phase:20s} {reason}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
