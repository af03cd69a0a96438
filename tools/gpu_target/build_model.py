#!/usr/bin/env python3
"""Build the validation model offline: a wide Llama with random bf16 weights, made on the GPU.

    python3 build_model.py --out /dev/shm/pb-gpu-model            # ~7.4B params, ~15 GB
    python3 build_model.py --out /tmp/tiny --tiny --device cpu      # a few MB, for wiring tests

Writes config.json + safetensors shards (save_pretrained) and a PreTrainedTokenizerFast whose
WordLevel vocabulary has exactly vocab_size entries, then a READY marker last: an existing
directory with READY is left alone (one build per device session). No network is used.
"""

import argparse
import json
import re
import sys
import time
from pathlib import Path

SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]  # ids 0..3; LlamaConfig's bos=1, eos=2

# Words of perfbisect's default prompts and some common ones, so prompts tokenize to real ids.
SEED_TEXT = """
explain in plain words how a large language model turns prompt into text one token at time and why
the decode phase is memory bound write short story about lighthouse keeper who finds message bottle
that was written by her own grandmother fifty years ago list main differences between tensor
parallelism pipeline when serving mixture of experts on eight gpus are linked only pcie describe
water cycle to curious ten year old using an example from rainy afternoon small mountain village
end with simple experiment summarise causes french revolution few paragraphs say which most
historians consider important today give step instructions for baking loaf sourdough bread at home
starting active starter ending cooling it rack compare strengths weaknesses python rust writing high
performance web server must handle many thousands slow clients once plan three day walking trip
through kyoto someone loves gardens quiet temples good green tea family restaurants away crowds
"""


def vocabulary(size):
    words = []
    seen = set(SPECIALS)
    for w in re.findall(r"[a-z]+", SEED_TEXT) + list(".,;:!?()'\"-"):
        if w not in seen:
            seen.add(w)
            words.append(w)
    vocab = SPECIALS + words
    i = 0
    while len(vocab) < size:
        w = f"w{i}"
        i += 1
        if w not in seen:
            vocab.append(w)
    return {tok: idx for idx, tok in enumerate(vocab[:size])}


def build_tokenizer(vocab_size):
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = vocabulary(vocab_size)
    tok = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    assert len(fast) == vocab_size, (len(fast), vocab_size)
    return fast


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--hidden", type=int, default=12288)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=28672)
    ap.add_argument("--heads", type=int, default=96)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="hidden 64, 2 layers, vocab 512: for wiring tests")
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    if args.tiny:
        args.hidden, args.layers, args.intermediate, args.heads, args.vocab = 64, 2, 128, 4, 512

    out = Path(args.out)
    if (out / "READY").exists() and not args.force:
        print(f"model already built: {out} ({(out / 'READY').read_text().strip()})")
        return
    out.mkdir(parents=True, exist_ok=True)

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    t0 = time.time()
    tokenizer = build_tokenizer(args.vocab)
    config = LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.heads,
        max_position_embeddings=4096, bos_token_id=1, eos_token_id=2, pad_token_id=3,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(args.device):
        model = LlamaForCausalLM(config)
    torch.set_default_dtype(torch.float32)
    model = model.to(torch.bfloat16).eval()
    params = sum(p.numel() for p in model.parameters())
    t1 = time.time()
    model.save_pretrained(out, max_shard_size="4GB")
    tokenizer.save_pretrained(out)
    t2 = time.time()
    info = {"params": params, "hidden": args.hidden, "layers": args.layers, "intermediate": args.intermediate,
            "vocab": args.vocab, "built_s": round(t1 - t0, 1), "saved_s": round(t2 - t1, 1)}
    (out / "READY").write_text(json.dumps(info) + "\n")
    print(json.dumps(info))


if __name__ == "__main__":
    sys.exit(main())
