#!/usr/bin/env python3
"""Where does a decode step's time go? In-process timings of the target's decode loop on the GPU.

    python3 diag_decode.py --model-dir /dev/shm/pb-gpu-model
"""

import argparse
import cProfile
import io
import pstats
import time

import torch


def steps_item(model, ids, n):
    out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
    cache, nxt = out.past_key_values, out.logits[:, -1, :].argmax(-1, keepdim=True)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        int(nxt.item())
        out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
        cache, nxt = out.past_key_values, out.logits[:, -1, :].argmax(-1, keepdim=True)
    int(nxt.item())
    return (time.perf_counter() - t) / n * 1000


def steps_nosync(model, ids, n, extra=None):
    out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
    cache, nxt = out.past_key_values, out.logits[:, -1, :].argmax(-1, keepdim=True)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        if extra is not None:
            extra()
        out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
        cache, nxt = out.past_key_values, out.logits[:, -1, :].argmax(-1, keepdim=True)
    t_launch = time.perf_counter() - t
    torch.cuda.synchronize()
    return t_launch / n * 1000, (time.perf_counter() - t) / n * 1000


def gpu_ms(model, ids, n):
    out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
    cache, nxt = out.past_key_values, out.logits[:, -1, :].argmax(-1, keepdim=True)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    tot = 0.0
    for _ in range(n):
        s.record()
        out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
        cache, nxt = out.past_key_values, out.logits[:, -1, :].argmax(-1, keepdim=True)
        e.record()
        e.synchronize()
        tot += s.elapsed_time(e)
    return tot / n


def engine_check(args):
    import sys
    sys.path.insert(0, args.engine_dir)
    from engine import Engine

    t = time.perf_counter()
    eng = Engine(args.model_dir)
    print(f"engine loaded in {time.perf_counter() - t:.1f} s")
    for i in range(5):
        t = time.perf_counter()
        n = sum(1 for _ in eng.generate("Explain how a large language model turns a prompt into text", 128, True))
        dt = time.perf_counter() - t
        print(f"engine run {i}: {n} tokens in {dt:.2f} s ({n / dt:.0f} tok/s e2e, server decode {eng.last.get('decode_tok_s') or 0:.0f} tok/s)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--engine-dir", help="time ENGINE_DIR/engine.py's Engine.generate right after loading, and stop")
    args = ap.parse_args()
    if args.engine_dir:
        return engine_check(args)
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    x = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(2000):
        x.add_(1)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    print(f"tiny kernel launch: {(t1 - t) / 2000 * 1e6:.1f} us/launch")
    t = time.perf_counter()
    for _ in range(300):
        x.add_(1)
        torch.cuda.synchronize()
    print(f"launch + synchronize: {(time.perf_counter() - t) / 300 * 1e6:.1f} us")
    t = time.perf_counter()
    for _ in range(300):
        x.add_(1)
        x.item()
    print(f"launch + item(): {(time.perf_counter() - t) / 300 * 1e6:.1f} us")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    torch.mm(a, b)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(50):
        torch.mm(a, b)
    torch.cuda.synchronize()
    mm_ms = (time.perf_counter() - t) / 50 * 1000
    print(f"8192^3 bf16 matmul: {mm_ms:.2f} ms ({2 * 8192**3 / mm_ms / 1e9:.0f} TFLOP/s)")

    tok = PreTrainedTokenizerFast.from_pretrained(args.model_dir)
    ids = tok("Explain how a large language model turns a prompt into text", return_tensors="pt").input_ids.cuda()
    t = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.bfloat16, device_map="cuda").eval()
    print(f"from_pretrained(device_map=cuda): {time.perf_counter() - t:.1f} s; attn {model.config._attn_implementation}; "
          f"hooks {sum(1 for m in model.modules() if hasattr(m, '_hf_hook'))}; dtype {next(model.parameters()).dtype}; "
          f"devices {sorted({str(p.device) for p in model.parameters()})}")
    n = args.steps
    with torch.inference_mode():
        steps_item(model, ids, 8)
        print(f"A item() per step: {steps_item(model, ids, n):.2f} ms/step")
        lt, tot = steps_nosync(model, ids, n)
        print(f"B no sync: launch {lt:.2f} ms/step, total {tot:.2f} ms/step")
        print(f"C GPU time (events): {gpu_ms(model, ids, 16):.2f} ms/step")
        lt, tot = steps_nosync(model, ids, n, extra=lambda: torch.mm(a, b))
        print(f"D no sync + 8192 matmul: launch {lt:.2f}, total {tot:.2f} ms/step")
        pr = cProfile.Profile()
        pr.enable()
        steps_item(model, ids, 16)
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
        print("\n".join(s.getvalue().splitlines()[:45]))
        try:
            from accelerate.hooks import remove_hook_from_module
            remove_hook_from_module(model, recurse=True)
            print(f"hooks removed: A {steps_item(model, ids, n):.2f} ms/step; B {steps_nosync(model, ids, n)}")
        except Exception as exc:
            print("remove hooks failed:", exc)
        torch.set_num_threads(1)
        print(f"1 CPU thread: A {steps_item(model, ids, n):.2f} ms/step")


if __name__ == "__main__":
    main()
