#!/usr/bin/env python3
"""A tensor-parallel decode server: one process per GPU, torch.distributed with NCCL.

    python3 tp_server.py --tp 2 --host 127.0.0.1 --port 8000 [--drop-env NAME] [--backend nccl]

The process perfbisect starts is rank 0: it spawns ranks 1..tp-1 as worker processes (the same
interpreter and file, started with its environment, as SGLang starts its scheduler/TP workers),
and serves HTTP (stdlib): GET /health, /v1/models, /get_server_info and streaming POST
/v1/completions (OpenAI). Every request is broadcast to the workers, and every decode step runs on
every rank in lockstep: ``--layers`` blocks of a column-parallel then row-parallel MLP (hidden
``--hidden``, inner ``--ffn`` split over the ranks, bf16) with one all-reduce per block, and rank 0
reads the next token (argmax of a vocabulary projection) back each step.

``--drop-env NAME`` (repeatable) removes NAME from worker 1's environment before it starts: a
deliberate gap that perfbisect's worker env check (/proc/<pid>/environ of every process of the
server's group) must report. ``--backend gloo`` lets all ranks share one GPU (NCCL refuses two
ranks on one device): for a machine with fewer GPUs than ranks, not for measurements.

No third-party HTTP stack: torch is the one dependency. Each worker writes one line to the log
(rank, pid, device, NCCL_* it sees) so the log shows what each rank got.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL_NAME = "pb-gpu-tp"
STOP = -1


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tp", type=int, default=2, help="tensor-parallel size (processes, one per GPU)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--dist-port", type=int, default=0, help="rendezvous port (0: pick one)")
    p.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    p.add_argument("--hidden", type=int, default=8192)
    p.add_argument("--ffn", type=int, default=28672)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--warmup-tokens", type=int, default=64)
    p.add_argument("--drop-env", action="append", default=[], help="remove NAME from worker 1's environment")
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


class Shard:
    """This rank's slice of the model and the decode step that runs on every rank."""

    def __init__(self, args, rank, world):
        import torch

        self.torch = torch
        n_gpu = torch.cuda.device_count()
        self.device = torch.device(f"cuda:{rank % n_gpu}") if n_gpu else torch.device("cpu")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        g = torch.Generator(device=self.device).manual_seed(1234 + rank)  # drawn where it lives: no host copy
        part = args.ffn // world
        scale = args.hidden ** -0.5

        # bf16 as a serving engine runs; float32 where gloo carries the all-reduce (a test set-up).
        self.dtype = torch.bfloat16 if args.backend == "nccl" else torch.float32

        def weight(*shape):
            return torch.randn(*shape, generator=g, device=self.device, dtype=self.dtype) * scale

        self.w_in = [weight(args.hidden, part) for _ in range(args.layers)]  # column-parallel
        self.w_out = [weight(part, args.hidden) for _ in range(args.layers)]  # row-parallel: partial sums
        self.vocab = weight(args.hidden, args.vocab) if rank == 0 else None
        self.x0 = torch.ones(1, args.hidden, device=self.device, dtype=self.dtype)
        self.rank = rank

    def step(self, x):
        """One decode step: every block's partial output all-reduced across the ranks."""
        torch, dist = self.torch, self.torch.distributed
        for w_in, w_out in zip(self.w_in, self.w_out):
            h = torch.nn.functional.gelu(x @ w_in) @ w_out
            dist.all_reduce(h)
            x = torch.nn.functional.layer_norm(x + h, x.shape[-1:])
        return x

    def run(self, n, emit=None):
        """n decode steps in lockstep; rank 0 reads each token back and hands it to ``emit``."""
        x = self.x0
        with self.torch.inference_mode():
            for _ in range(n):
                x = self.step(x)
                if self.vocab is not None:
                    token = int((x @ self.vocab).argmax(dim=-1).item())
                    if emit is not None:
                        emit(token)


def init_dist(args, rank):
    import torch.distributed as dist

    dist.init_process_group(args.backend, init_method=f"tcp://127.0.0.1:{args.dist_port}", rank=rank,
                            world_size=args.tp, timeout=datetime.timedelta(hours=2))
    return dist


def say_env(rank, device):
    nccl = {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")}
    print(f"rank {rank} pid {os.getpid()} device {device} NCCL env {json.dumps(nccl)}", flush=True)


def worker(args):
    """Ranks 1..tp-1: wait for rank 0's broadcast of a token count, decode that many, repeat."""
    import ctypes

    import torch

    # Rank 0 stops the workers with a broadcast (a worker killed mid-collective would hang it), and
    # a worker must not outlive rank 0: SIGKILL when the parent dies (PR_SET_PDEATHSIG).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass

    dist = init_dist(args, args.rank)
    shard = Shard(args, args.rank, args.tp)
    say_env(args.rank, shard.device)
    cmd = torch.zeros(1, dtype=torch.int64, device=shard.device if args.backend == "nccl" else "cpu")
    while True:
        dist.broadcast(cmd, src=0)
        n = int(cmd.item())
        if n == STOP:
            break
        shard.run(n)
    dist.destroy_process_group()


class Leader:
    """Rank 0: owns the workers, serialises generations, and tells every rank what to run."""

    def __init__(self, args):
        import torch

        self.args = args
        self.torch = torch
        self.workers = []
        env = dict(os.environ)
        for rank in range(1, args.tp):
            wenv = dict(env)
            if rank == 1:
                for name in args.drop_env:
                    wenv.pop(name, None)
            argv = [sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--rank", str(rank),
                    "--dist-port", str(args.dist_port)]
            self.workers.append(subprocess.Popen(argv, env=wenv))  # same process group: torn down with us
        self.dist = init_dist(args, 0)
        self.shard = Shard(args, 0, args.tp)
        say_env(0, self.shard.device)
        self.cmd = torch.zeros(1, dtype=torch.int64, device=self.shard.device if args.backend == "nccl" else "cpu")
        self.lock = threading.Lock()
        self.last = {}

    def generate(self, n, emit):
        with self.lock:
            if self.shard.device.type == "cuda":  # HTTP threads: the current device is per thread
                self.torch.cuda.set_device(self.shard.device)
            self.cmd.fill_(n)
            self.dist.broadcast(self.cmd, src=0)
            t0 = time.perf_counter()
            self.shard.run(n, emit)
            dt = time.perf_counter() - t0
            self.last = {"completion_tokens": n, "decode_tok_s": n / dt if dt > 0 else None}

    def stop(self):
        with self.lock:
            self.cmd.fill_(STOP)
            self.dist.broadcast(self.cmd, src=0)
        for w in self.workers:
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.kill()


def make_handler(leader):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format, *args):  # noqa: A002 - stdlib signature
            pass

        def _json(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802 - stdlib name
            if self.path == "/health":
                return self._json(200, {"status": "ok"})
            if self.path == "/v1/models":
                return self._json(200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model"}]})
            if self.path == "/get_server_info":
                return self._json(200, {"model": MODEL_NAME, "tp_size": leader.args.tp, "backend": leader.args.backend,
                                        "worker_pids": [w.pid for w in leader.workers], **leader.last})
            return self._json(404, {"error": {"message": "not found"}})

        def do_POST(self):  # noqa: N802 - stdlib name
            if self.path != "/v1/completions":
                return self._json(404, {"error": {"message": "not found"}})
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            n = max(1, int(body.get("max_tokens") or 16))
            rid, created = "cmpl-" + uuid.uuid4().hex[:24], int(time.time())
            usage = bool((body.get("stream_options") or {}).get("include_usage"))

            def chunk(choices, **extra):
                obj = {"id": rid, "object": "text_completion", "created": created, "model": MODEL_NAME,
                       "choices": choices, **extra}
                return ("data: " + json.dumps(obj) + "\n\n").encode()

            if not body.get("stream"):
                tokens = []
                leader.generate(n, tokens.append)
                text = "".join(f" t{t}" for t in tokens)
                return self._json(200, {"id": rid, "object": "text_completion", "model": MODEL_NAME,
                                        "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
                                        "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}})
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()

            def emit(token):
                self.wfile.write(chunk([{"index": 0, "text": f" t{token}", "finish_reason": None}]))
                self.wfile.flush()

            leader.generate(n, emit)
            self.wfile.write(chunk([{"index": 0, "text": "", "finish_reason": "length"}]))
            if usage:
                self.wfile.write(chunk([], usage={"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    return Handler


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    args = parse_args()
    if args.rank:
        return worker(args)
    if not args.dist_port:
        args.dist_port = free_port()
    leader = Leader(args)
    t0 = time.time()
    leader.generate(args.warmup_tokens, None)
    print(f"tp={args.tp} ({args.backend}) warmed up in {time.time() - t0:.1f} s; listening on {args.host}:{args.port}",
          flush=True)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(leader))

    def on_term(signum, frame):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        leader.stop()


if __name__ == "__main__":
    sys.exit(main())
