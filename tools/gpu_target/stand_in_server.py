#!/usr/bin/env python3
"""CPU stand-in for the target's server, for dry runs of run_on_device.sh without a GPU: the
checked-out app.py (cwd: the worktree perfbisect made) over selftest.FakeEngine, ~25% slower when
the checked-out engine.py carries the planted per-step matmul. Same command line as app.py.
"""

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, os.getcwd())
sys.path.insert(1, str(Path(__file__).resolve().parent))

import uvicorn  # noqa: E402

import app  # noqa: E402  (the worktree's app.py)
from selftest import FakeEngine  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--model-dir")
ap.add_argument("--host", default="127.0.0.1")
ap.add_argument("--port", type=int, default=8000)
args = ap.parse_args()
slow = "calib_a" in Path("engine.py").read_text()
uvicorn.run(app.make_app(FakeEngine(0.004 if slow else 0.003)), host=args.host, port=args.port, log_level="warning")
