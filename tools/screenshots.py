"""Screenshots of the demo's report and index for the docs, taken with headless Chromium.

    python tools/screenshots.py [--out docs] [--chromium /usr/bin/chromium] [--db results.sqlite]

Runs the seeded demo bisection (``perfbisect demo``, the emulator; a private node lock) in a
temporary directory, unless ``--db`` names a results database to show, then writes:

- ``report-demo.png`` (1400 px wide) and ``report-demo-900.png`` (900 px: the layout a laptop's half
  screen gets) of the bisection's report;
- ``index-demo.png`` (1400 px) of ``perfbisect report --index`` over the same database.

The demo's numbers depend on the machine (the emulator really runs), so the pictures change with
every refresh; what they show does not. Exit status 2 when Chromium is not found.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHOTS = (("report", 1400, 2600, "report-demo.png"), ("report", 900, 3000, "report-demo-900.png"),
         ("index", 1400, 900, "index-demo.png"))


def chromium_shot(chromium: str, url: str, out: Path, width: int, height: int, profile: Path) -> None:
    """One screenshot of ``url`` at ``width`` × ``height`` CSS pixels (charts drawn first: virtual time)."""
    proc = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}", "--hide-scrollbars",
         "--virtual-time-budget=8000", f"--window-size={width},{height}", f"--screenshot={out}", url],
        capture_output=True, text=True, timeout=180,
    )
    if proc.returncode != 0 or not out.is_file():
        raise SystemExit(f"Chromium could not take {out.name}: {proc.stderr[-1500:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="folder for the PNGs (default: docs/)")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium",
                        help="the Chromium binary (default: chromium on PATH)")
    parser.add_argument("--db", type=Path, help="show this results database instead of running the demo")
    args = parser.parse_args()
    chromium = shutil.which(args.chromium) or (args.chromium if os.access(args.chromium, os.X_OK) else None)
    if chromium is None:
        print(f"Error: no Chromium at {args.chromium}. Install it (Debian: apt-get install chromium) or pass "
              f"--chromium PATH to a Chromium or Chrome binary.", file=sys.stderr)
        return 2
    env = {**os.environ, "COLUMNS": "200"}
    with tempfile.TemporaryDirectory(prefix="perfbisect-shots-") as tmp:
        work = Path(tmp)
        env.setdefault("PERFBISECT_LOCK_DIR", str(work / "lock"))
        (work / "lock").mkdir(exist_ok=True)
        if args.db is None:
            proc = subprocess.run([sys.executable, "-m", "perfbisect.cli", "demo", "--json", "--dir", str(work / "demo")],
                                  capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
            if proc.returncode not in (0, 1):
                print(f"Error: the demo failed (exit {proc.returncode}): {proc.stderr[-1500:]}", file=sys.stderr)
                return proc.returncode or 4
            db = Path(json.loads(proc.stdout)["db"])
        else:
            db = args.db
        site = work / "site"
        proc = subprocess.run([sys.executable, "-m", "perfbisect.cli", "report", "--index", str(site), "--db", str(db)],
                              capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
        if proc.returncode != 0:
            print(f"Error: `perfbisect report --index` failed: {proc.stderr[-1500:]}", file=sys.stderr)
            return proc.returncode
        # The report as `perfbisect report` writes it (the index's copies replay the search on a tenth of the work).
        report = work / "report.html"
        proc = subprocess.run([sys.executable, "-m", "perfbisect.cli", "report", "latest", "--db", str(db), "-o", str(report)],
                              capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
        if proc.returncode != 0:
            print(f"Error: `perfbisect report latest` failed: {proc.stderr[-1500:]}", file=sys.stderr)
            return proc.returncode
        args.out.mkdir(parents=True, exist_ok=True)
        for i, (what, width, height, name) in enumerate(SHOTS):
            page = report if what == "report" else site / "index.html"
            chromium_shot(chromium, page.as_uri(), args.out / name, width, height, work / f"profile-{i}")
            print(f"wrote {args.out / name} ({width}×{height} px)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
