#!/usr/bin/env python3
"""CPU-only wiring test of the target's HTTP layer: app.make_app over a fake engine, driven by
perfbisect's own openai-completions client. Needs starlette, uvicorn and perfbisect importable.

    PYTHONPATH=/path/to/perfbisect-repo python3 tools/gpu_target/selftest.py
"""

import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "target_src"))

import uvicorn  # noqa: E402

import app  # noqa: E402  (target_src/app.py)


class FakeEngine:
    eos_id = 2

    def __init__(self, step_s=0.002):
        from concurrent.futures import ThreadPoolExecutor

        self.step_s = step_s
        self.last = {}
        self.worker = ThreadPoolExecutor(max_workers=1)

    def generate(self, prompt, max_tokens, ignore_eos=False, request_id=None):
        self.last = {"request_id": request_id, "prompt_tokens": len(prompt.split()) + 1}
        t0 = None
        for i in range(max_tokens):
            time.sleep(self.step_s)
            tid = 2 if (i == 9 and not ignore_eos) else 10 + i
            t = time.perf_counter()
            t0 = t0 or t
            yield tid, f" w{tid}"
            if tid == self.eos_id and not ignore_eos:
                break
        self.last.update(completion_tokens=i + 1, decode_tok_s=i / (t - t0) if i else None)


def main():
    from perfbisect.settings import WorkloadConfig
    from perfbisect.measure.workload import run_workload

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    server = uvicorn.Server(uvicorn.Config(app.make_app(FakeEngine()), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    import httpx

    assert httpx.get(base + "/health").status_code == 200
    cfg = WorkloadConfig(kind="openai-completions", max_tokens=128, warmup=1, runs=3, model="pb-gpu-target")
    runs = run_workload(base, cfg)
    for r in runs:
        print(r.index, r.warmup, r.output_tokens, r.requested_tokens, r.complete, round(r.decode_tok_s or 0, 1),
              r.server_decode_tok_s and round(r.server_decode_tok_s, 1), r.error)
        assert r.complete and r.error is None and r.output_tokens == 128, r
        assert r.server_decode_tok_s, "server timing not read back"
    early = run_workload(base, cfg, ignore_eos=False)[-1]
    print("without ignore_eos:", early.output_tokens, "tokens, complete =", early.complete)
    assert early.output_tokens == 10 and not early.complete
    body = httpx.post(base + "/v1/completions", json={"prompt": "hi", "max_tokens": 5}).json()
    assert body["usage"]["completion_tokens"] == 5, body
    server.should_exit = True
    print("selftest ok")


if __name__ == "__main__":
    main()
