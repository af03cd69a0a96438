"""Greedy decoding with a transformers causal LM, one token at a time, with a KV cache."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast


class Engine:
    """Loads the model once and serves one generation at a time."""

    def __init__(self, model_dir, device="cuda"):
        self.device = torch.device(device)
        # cuDNN attention builds a plan per new KV length, cached per thread: with it, every new
        # length (and every new thread) costs tens of ms. The flash / memory-efficient kernels don't.
        if hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
            torch.backends.cuda.enable_cudnn_sdp(False)
        # Every generation runs on this one thread (warm-up included), so per-thread caches
        # (cuBLAS handles and workspaces, kernel plans) are built once, during warm-up.
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decode")
        self.tokenizer = PreTrainedTokenizerFast.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.bfloat16, device_map=str(self.device)
        )
        self.model.eval()
        self.eos_id = self.tokenizer.eos_token_id
        # Text of every token id, built once: decoding a token is a list lookup.
        self.pieces = [" " + t for t in self.tokenizer.convert_ids_to_tokens(list(range(len(self.tokenizer))))]
        self.lock = threading.Lock()
        self.host = torch.empty((1, 1), dtype=torch.long, pin_memory=self.device.type == "cuda")
        self.last = {}

    def warm_up(self, tokens=256, rounds=2):
        """Generate on the decode thread until every KV length up to ~tokens has been seen."""
        def run():
            for _ in range(rounds):
                for _ in self.generate("warm up the kernels and the allocator", tokens, ignore_eos=True):
                    pass
        self.worker.submit(run).result()

    def encode(self, prompt):
        ids = self.tokenizer(prompt, return_tensors="pt").input_ids
        if ids.shape[1] == 0:
            ids = torch.tensor([[self.tokenizer.bos_token_id or 0]])
        return ids.to(self.device)

    @torch.inference_mode()
    def generate(self, prompt, max_tokens, ignore_eos=False, request_id=None):
        """Yield (token id, text) pairs; greedy; stops at max_tokens or at EOS unless ignore_eos.

        The step after a token is launched before that token is read back, and the read-back polls
        an event instead of blocking in the driver: the GPU always has the next step queued.
        """
        with self.lock:
            ids = self.encode(prompt)
            self.last = {"request_id": request_id, "prompt_tokens": int(ids.shape[1])}
            out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            nxt = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
            t_first = t_last = None
            n = 0
            while True:
                tid, ready = self.read_back(nxt)
                n += 1
                more = n < max_tokens
                if more:
                    out = self.model(input_ids=nxt, past_key_values=cache, use_cache=True)
                    cache = out.past_key_values
                    following = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
                tid = self.wait(tid, ready)
                t_last = time.perf_counter()
                if t_first is None:
                    t_first = t_last
                yield tid, self.pieces[tid]
                if not more or (tid == self.eos_id and not ignore_eos):
                    break
                nxt = following
            self.last.update(
                completion_tokens=n,
                decode_tok_s=(n - 1) / (t_last - t_first) if n > 1 and t_last > t_first else None,
            )

    def read_back(self, token):
        """Start copying a (1, 1) token tensor to the host; wait() returns its value."""
        if self.device.type != "cuda":
            return token, None
        self.host.copy_(token, non_blocking=True)
        ready = torch.cuda.Event()
        ready.record()
        return self.host, ready

    @staticmethod
    def wait(token, ready):
        if ready is not None:
            while not ready.query():
                time.sleep(0)  # poll, and let the HTTP thread run meanwhile
        return int(token.reshape(-1)[0])
