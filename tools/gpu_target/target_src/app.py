"""A small OpenAI-compatible completions server (starlette + uvicorn) over engine.Engine.

POST /v1/completions (stream or not), GET /v1/models, GET /health, GET /get_server_info.
The model is loaded and warmed up before the server listens: /health answers 200 once it can.
"""

import argparse
import asyncio
import json
import threading
import time
import uuid

import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

MODEL_NAME = "pb-gpu-target"


def make_app(engine):
    async def health(request):
        return JSONResponse({"status": "ok"})

    async def models(request):
        return JSONResponse({"object": "list", "data": [{"id": MODEL_NAME, "object": "model", "owned_by": "perfbisect"}]})

    async def server_info(request):
        last = engine.last
        return JSONResponse(
            {
                "model": MODEL_NAME,
                "last_request_id": last.get("request_id"),
                "last_decode_tok_s": last.get("decode_tok_s"),
            }
        )

    async def completions(request):
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": {"message": "body is not JSON"}}, status_code=400)
        prompt = body.get("prompt", "")
        if isinstance(prompt, list):
            prompt = prompt[0] if prompt else ""
        max_tokens = int(body.get("max_tokens") or 16)
        ignore_eos = bool(body.get("ignore_eos", False))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage", False))
        rid = "cmpl-" + uuid.uuid4().hex[:24]
        created = int(time.time())

        if not body.get("stream", False):
            pieces = await asyncio.get_running_loop().run_in_executor(
                engine.worker, lambda: [p for _, p in engine.generate(prompt, max_tokens, ignore_eos, rid)]
            )
            last = engine.last
            return JSONResponse(
                {
                    "id": rid, "object": "text_completion", "created": created, "model": MODEL_NAME,
                    "choices": [{"index": 0, "text": "".join(pieces), "logprobs": None,
                                 "finish_reason": "length" if len(pieces) >= max_tokens else "stop"}],
                    "usage": {"prompt_tokens": last.get("prompt_tokens"), "completion_tokens": len(pieces),
                              "total_tokens": (last.get("prompt_tokens") or 0) + len(pieces)},
                }
            )

        loop = asyncio.get_running_loop()
        queue = asyncio.Queue()
        cancelled = threading.Event()

        def produce():
            try:
                for _, piece in engine.generate(prompt, max_tokens, ignore_eos, rid):
                    if cancelled.is_set():
                        break
                    loop.call_soon_threadsafe(queue.put_nowait, ("token", piece))
                loop.call_soon_threadsafe(queue.put_nowait, ("end", None))
            except Exception as exc:  # reported in the stream, not swallowed
                loop.call_soon_threadsafe(queue.put_nowait, ("error", f"{type(exc).__name__}: {exc}"))

        def chunk(choices, **extra):
            obj = {"id": rid, "object": "text_completion", "created": created, "model": MODEL_NAME, "choices": choices}
            obj.update(extra)
            return "data: " + json.dumps(obj) + "\n\n"

        async def events():
            engine.worker.submit(produce)  # the engine's one decode thread
            n = 0
            try:
                while True:
                    kind, value = await queue.get()
                    if kind == "token":
                        n += 1
                        yield chunk([{"index": 0, "text": value, "logprobs": None, "finish_reason": None}])
                    elif kind == "error":
                        yield "data: " + json.dumps({"error": {"message": value}}) + "\n\n"
                        return
                    else:
                        break
                finish = "length" if n >= max_tokens else "stop"
                yield chunk([{"index": 0, "text": "", "logprobs": None, "finish_reason": finish}])
                if include_usage:
                    p = engine.last.get("prompt_tokens") or 0
                    yield chunk([], usage={"prompt_tokens": p, "completion_tokens": n, "total_tokens": p + n})
                yield "data: [DONE]\n\n"
            finally:
                cancelled.set()

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(
        routes=[
            Route("/health", health),
            Route("/v1/models", models),
            Route("/get_server_info", server_info),
            Route("/v1/completions", completions, methods=["POST"]),
        ]
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--warmup-tokens", type=int, default=256)
    args = parser.parse_args()

    from engine import Engine

    t0 = time.time()
    engine = Engine(args.model_dir, device=args.device)
    print(f"loaded {args.model_dir} in {time.time() - t0:.1f} s", flush=True)
    t1 = time.time()
    engine.warm_up(args.warmup_tokens)
    print(f"warmed up in {time.time() - t1:.1f} s; listening on {args.host}:{args.port}", flush=True)
    uvicorn.run(make_app(engine), host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
