"""Price of the second-change guard (issue #35): perfbisect with it on (default) and off, paired on held-out seeds.

Run from the repository root: .venv/bin/python benchmarks/issue35/guard.py S1,M1,... 150 100000 out.json
"Off": tuning.second_change_doubt 1.01 (never doubts one change), residual_confirm_z 0 (no gap re-measure),
stats.second_change_z 0 (no probe of either side). The variants "default" and "guard-off" of rules.py, which runs
them (the same seeds, the same numbers as when this script ran them itself)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rules  # noqa: E402

if __name__ == "__main__":
    rules.main(sys.argv[1:], ["default", "guard-off"])
