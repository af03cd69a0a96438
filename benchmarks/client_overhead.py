"""How much does perfbisect's client distort what it measures?

Starts the demo emulator with ``DECODE_STEP_MS = 0.2`` (~5,000 tok/s, faster than any real
single stream, so client overhead would show) and runs the real workload client against it. For
each measured run it compares the client's decode rate with the emulator's own server-side timing
of the same stream (``/get_server_info`` → ``last_decode_tok_s``) and reports the mean and worst
relative difference, plus the client's CPU time per token.

    python benchmarks/client_overhead.py [--runs 20] [--tokens 1000] [--step-ms 0.2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from perfbisect.settings import WorkloadConfig
from perfbisect.model import RunResult
from perfbisect.measure.workload import run_workload


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_emulator(worktree: Path, port: int, log_path: Path) -> subprocess.Popen:
    env = {**os.environ, "PERFBISECT_DEMO_SESSION_SIGMA": "0", "PERFBISECT_DEMO_RUN_SIGMA": "0"}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "perfbisect.demo.emulator", "--port", str(port), "--worktree", str(worktree)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True,
        )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"emulator exited: {log_path.read_text()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health_generate", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError("emulator not ready after 20 s")


def measure(runs: int, tokens: int, step_ms: float) -> dict:
    """Run the client against the emulator and compare it with the server's own timing."""
    with tempfile.TemporaryDirectory() as tmp:
        worktree = Path(tmp) / "wt"
        code = worktree / "python" / "sglang" / "speed.py"
        code.parent.mkdir(parents=True)
        code.write_text(f"DECODE_STEP_MS = {step_ms}\nSTARTUP_S = 0.05\n")
        port = _free_port()
        proc = _start_emulator(worktree, port, Path(tmp) / "emulator.log")
        try:
            cfg = WorkloadConfig(max_tokens=tokens, warmup=2, runs=runs, request_timeout_s=60.0)
            cpu: list[float] = []
            mark = [time.process_time()]

            def on_run(run: RunResult) -> None:
                now = time.process_time()
                cpu.append(now - mark[0])
                mark[0] = now

            results = run_workload(f"http://127.0.0.1:{port}", cfg, on_run=on_run)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
    measured = [(r, c) for r, c in zip(results, cpu) if not r.warmup]
    diffs = [r.decode_tok_s / r.server_decode_tok_s - 1.0 for r, _ in measured if r.server_decode_tok_s]
    cpu_per_token_us = [1e6 * c / r.output_tokens for r, c in measured]
    return {
        "runs": len(measured),
        "tokens_per_run": tokens,
        "configured_tok_s": 1000.0 / step_ms,
        "client_decode_tok_s_mean": statistics.fmean(r.decode_tok_s for r, _ in measured),
        "server_decode_tok_s_mean": statistics.fmean(r.server_decode_tok_s for r, _ in measured if r.server_decode_tok_s),
        "rel_diff_mean_pct": 100 * statistics.fmean(diffs),
        "rel_diff_mean_abs_pct": 100 * statistics.fmean(abs(d) for d in diffs),
        "rel_diff_worst_pct": 100 * max(diffs, key=abs),
        "within_1pct": sum(abs(d) <= 0.01 for d in diffs),
        "client_cpu_us_per_token_mean": statistics.fmean(cpu_per_token_us),
        "client_cpu_us_per_token_max": max(cpu_per_token_us),
        "itl_p50_ms_mean": statistics.fmean(r.itl_p50_ms for r, _ in measured),
    }


def main() -> int:
    """Parse flags, measure, print."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--tokens", type=int, default=1000)
    p.add_argument("--step-ms", type=float, default=0.2)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    out = measure(args.runs, args.tokens, args.step_ms)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"client vs emulator server-side timing: {out['runs']} runs x {out['tokens_per_run']} tokens "
          f"at ~{out['configured_tok_s']:.0f} tok/s")
    print(f"  client decode     {out['client_decode_tok_s_mean']:9.1f} tok/s (mean)")
    print(f"  server decode     {out['server_decode_tok_s_mean']:9.1f} tok/s (mean)")
    print(f"  relative diff     mean {out['rel_diff_mean_pct']:+.3f}%  mean |.| {out['rel_diff_mean_abs_pct']:.3f}%  "
          f"worst {out['rel_diff_worst_pct']:+.3f}%  ({out['within_1pct']}/{out['runs']} runs within 1%)")
    print(f"  client CPU        {out['client_cpu_us_per_token_mean']:.1f} us/token (mean), "
          f"{out['client_cpu_us_per_token_max']:.1f} us/token (worst run)")
    print(f"  ITL p50           {out['itl_p50_ms_mean']:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
