"""Where perfbisect's trials go in one cell (issue #35): every decision of the search, by phase and reason.

Run from the repository root: .venv/bin/python docs/validation/issue35/phases.py S1 60 100000
Prints the mean number of trials per bisection asked for by each (phase, reason) — the reason with its commits
and numbers blanked so that the same rule counts as one row — over seeds N..N+reps−1."""
import collections
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import strategies as S  # noqa: E402
from perfbisect.engine.observations import Done  # noqa: E402
from perfbisect.model import Observation  # noqa: E402


def main(cell: str, reps: int, base: int) -> None:
    tally: collections.Counter = collections.Counter()
    for seed in range(base, base + reps):
        t = S.make_target(S.SCENARIOS[cell], seed)
        _commits, _settings, policy = S._policy(t, None, S.stored_noise(t))
        obs: list[Observation] = []
        while True:
            act = policy.next(obs)
            if isinstance(act, Done):
                break
            reason = re.sub(r"[0-9.]+", "N", re.sub(r"c\d{3}", "cX", act.reason or ""))
            tally[(act.phase, reason[:110])] += 1
            j = int(act.commit[1:])
            t.vary_layout = act.vary_layout
            if not t.try_build(j):
                obs.append(Observation(act.commit, None, seq=len(obs), at=t.clock))
                continue
            tr = t.raw_trial(j)
            obs.append(Observation(act.commit, tr.value, tr.cov, seq=len(obs), at=tr.at, flag=tr.flag,
                                   layout=S._layout_id(tr)))
    for (phase, reason), v in tally.most_common():
        print(f"{v / reps:6.2f}  {phase:20s} {reason}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
