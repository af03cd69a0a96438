#!/usr/bin/env python3
"""Before spending device time on a bisection: start the target's server once, stream a few
128-token completions, print the decode rate and one raw chunk, and fail (exit 5) when decode is
slower than --min-tok-s (a host-bound server would hide the planted GPU slowdown).

    python3 gate.py --worktree DIR --model-dir DIR [--min-tok-s 100] [--server-script PATH]
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time

import httpx


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worktree", required=True)
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--server-script", default="app.py")
    ap.add_argument("--min-tok-s", type=float, default=100.0)
    ap.add_argument("--log", default="gate-server.log")
    args = ap.parse_args()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    script = args.server_script.replace("{worktree}", args.worktree)
    t0 = time.time()
    with open(args.log, "wb") as log:
        proc = subprocess.Popen([sys.executable, script, "--model-dir", args.model_dir, "--port", str(port)],
                                cwd=args.worktree, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    rates = []
    try:
        while True:
            if proc.poll() is not None:
                print(f"gate: the server exited with {proc.returncode}; log: {args.log}")
                return 5
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() - t0 > 240:
                print("gate: the server was not ready within 240 s")
                return 5
            time.sleep(0.5)
        ready = time.time() - t0
        body = {"prompt": "Explain how decode works", "max_tokens": 128, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}, "model": "pb-gpu-target"}
        sample = None
        for _ in range(4):
            times = []
            with httpx.stream("POST", base + "/v1/completions", json=body, timeout=120) as r:
                for line in r.iter_lines():
                    if line.startswith("data:") and '"text": " ' in line:
                        times.append(time.perf_counter())
                        sample = sample or line
            rates.append((len(times) - 1) / (times[-1] - times[0]))
        print(f"gate: ready in {ready:.1f} s; decode {', '.join(f'{r:.0f}' for r in rates)} tok/s over HTTP; "
              f"first chunk: {sample[:160]}")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if max(rates[1:]) < args.min_tok_s:
        print(f"gate: decode is below {args.min_tok_s:.0f} tok/s: the server is host-bound and would hide the planted "
              f"GPU slowdown; not bisecting (see {args.log})")
        return 5
    return 0


if __name__ == "__main__":
    sys.exit(main())
