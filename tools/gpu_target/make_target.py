#!/usr/bin/env python3
"""Create the GPU validation target: a throwaway git repository whose tracked code IS the server
(target_src/app.py + engine.py), with 16 commits of ordinary history and one planted slowdown.

    python3 make_target.py --root /tmp/pbgpu/planted --model-dir /dev/shm/pb-gpu-model
    python3 make_target.py --root /tmp/pbgpu/aa --model-dir /dev/shm/pb-gpu-model --no-plant

History after the initial import (15 commits): 5 docs-only (filtered by perfbisect, never
measured), 9 harmless code/config edits, and at --planted-at (default 10) the planted commit
"engine: refresh the logit calibration matrix every step", which runs one extra DIM x DIM x DIM
bf16 matmul per decode step (default DIM 8192: ~1.1 TFLOP, ~1.5-2 ms on an H200, i.e. ~20-30%
slower decode and more tensor-core work, so GPU power moves too). With --no-plant that commit only
adds a comment: the range is an A/A range whose endpoints serve identical GPU work.

Writes ROOT/server (the repo), ROOT/perfbisect.toml, and prints one JSON line:
{"repo", "config", "good", "bad", "planted", "commits"}.
"""

import argparse
import json
import os
import shutil
import string
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE / "target_src"
FILES = ["app.py", "engine.py", "README.md", "docs/api.md", "docs/serving.md", ".gitignore"]
ENV = {
    "GIT_AUTHOR_NAME": "GPU Target", "GIT_AUTHOR_EMAIL": "target@example.invalid",
    "GIT_COMMITTER_NAME": "GPU Target", "GIT_COMMITTER_EMAIL": "target@example.invalid",
}

LOGITS = "out.logits[:, -1, :].argmax(dim=-1, keepdim=True)"
LOOP_CALL = "                    out = self.model(input_ids=nxt, past_key_values=cache, use_cache=True)\n"


def history(plant, dim):
    """(subject, [edits]); an edit is (path, old, new) replacing every occurrence, or (path, None, text) appending."""
    planted = (
        "engine: refresh the logit calibration matrix every step",
        [
            ("engine.py", "        self.lock = threading.Lock()\n",
             "        self.lock = threading.Lock()\n"
             f"        # Logit calibration: a {dim}x{dim} matrix product refreshed every decode step.\n"
             "        g = torch.Generator(device=self.device).manual_seed(0)\n"
             f"        self.calib_a = torch.randn({dim}, {dim}, device=self.device, dtype=torch.bfloat16, generator=g)\n"
             f"        self.calib_b = torch.randn({dim}, {dim}, device=self.device, dtype=torch.bfloat16, generator=g)\n"),
            ("engine.py", LOOP_CALL,
             "                    self.calib = torch.mm(self.calib_a, self.calib_b)\n" + LOOP_CALL),
        ],
    )
    harmless = (
        "engine: comment the decode loop",
        [("engine.py", LOOP_CALL, "                    # One decode step: the new token against the cache.\n" + LOOP_CALL)],
    )
    return [
        ("README: document the command line", [("README.md", None,
            "\nOptions: `--model-dir` (required), `--host`, `--port`, `--device`, `--warmup-tokens`.\n")]),
        ("engine: pick the next token in one helper", [
            ("engine.py", LOGITS, "greedy(out.logits)"),
            ("engine.py", "\n\nclass Engine:", "\n\ndef greedy(logits):\n"
             "    \"\"\"The most likely next token of the last position, shape (batch, 1).\"\"\"\n"
             "    return logits[:, -1, :].argmax(dim=-1, keepdim=True)\n\n\nclass Engine:")]),
        ("docs: describe the streaming format", [("docs/api.md", None,
            "\nStreaming answers are server-sent events: `data: {...}` chunks with `choices[0].text`, "
            "a final chunk with `finish_reason`, an optional usage chunk, then `data: [DONE]`.\n")]),
        ("app: name the SSE media type", [
            ("app.py", 'MODEL_NAME = "pb-gpu-target"\n', 'MODEL_NAME = "pb-gpu-target"\nSSE_MEDIA_TYPE = "text/event-stream"\n'),
            ("app.py", 'media_type="text/event-stream"', "media_type=SSE_MEDIA_TYPE")]),
        ("Ignore editor files", [(".gitignore", None, "*.swp\n.idea/\n.vscode/\n")]),
        ("engine: name the warm-up prompt", [
            ("engine.py", "class Engine:\n", 'WARMUP_PROMPT = "warm up the kernels and the allocator"\n\n\nclass Engine:\n'),
            ("engine.py", 'self.generate("warm up the kernels and the allocator", ', "self.generate(WARMUP_PROMPT, ")]),
        ("docs: serving notes on warm-up", [("docs/serving.md", None,
            "\nThe first request of a session is slower (allocator, kernel selection): clients should warm up.\n")]),
        ("app: add a --log-level option", [
            ("app.py", '    parser.add_argument("--warmup-tokens", type=int, default=256)\n',
             '    parser.add_argument("--warmup-tokens", type=int, default=256)\n'
             '    parser.add_argument("--log-level", default="warning")\n'),
            ("app.py", 'log_level="warning"', "log_level=args.log_level")]),
        ("engine: reset the per-request record in one place", [
            ("engine.py", '            self.last = {"request_id": request_id, "prompt_tokens": int(ids.shape[1])}\n',
             "            self.last = self.new_record(request_id, ids)\n"),
            ("engine.py", "    @torch.inference_mode()\n    def generate",
             "    @staticmethod\n    def new_record(request_id, ids):\n"
             '        return {"request_id": request_id, "prompt_tokens": int(ids.shape[1])}\n\n'
             "    @torch.inference_mode()\n    def generate")]),
        planted if plant else harmless,
        ("README: troubleshooting", [("README.md", None,
            "\n## Troubleshooting\n\nIf `/health` never answers, read the server log: the model directory "
            "must hold config.json, the safetensors shards and the tokenizer files.\n")]),
        ("app: include the model name in /health", [
            ("app.py", 'JSONResponse({"status": "ok"})', 'JSONResponse({"status": "ok", "model": MODEL_NAME})')]),
        ("engine: type hints on generate", [
            ("engine.py", "def generate(self, prompt, max_tokens, ignore_eos=False, request_id=None):",
             "def generate(self, prompt: str, max_tokens: int, ignore_eos: bool = False, request_id: str | None = None):")]),
        ("docs: changelog", [("docs/changelog.md", None, "# Changelog\n\n- /health names the model.\n- --log-level.\n")]),
        ("app: export make_app and main", [
            ("app.py", 'MODEL_NAME = "pb-gpu-target"\n', '__all__ = ["make_app", "main"]\n\nMODEL_NAME = "pb-gpu-target"\n')]),
    ]


def git(repo, *args, when=None):
    env = {**os.environ, **ENV}
    if when is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"{when} +0000"
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout.strip()


def apply(repo, edits, subject):
    for rel, old, new in edits:
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        text = path.read_text() if path.exists() else ""
        if old is None:
            text += new
        elif old in text:
            text = text.replace(old, new)
        else:
            raise SystemExit(f"make_target: commit {subject!r} lost its context in {rel}: {old[:60]!r}")
        path.write_text(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True, help="created afresh: ROOT/server and ROOT/perfbisect.toml")
    ap.add_argument("--model-dir", required=True, help="built by build_model.py")
    ap.add_argument("--python", default=sys.executable, help="the server's interpreter (default: this one)")
    ap.add_argument("--no-plant", action="store_true", help="A/A range: the planted commit only adds a comment")
    ap.add_argument("--planted-at", type=int, default=10, help="position of the planted commit, 1..15")
    ap.add_argument("--plant-dim", type=int, default=8192, help="size of the planted per-step matmul")
    ap.add_argument("--server-script", default="{worktree}/app.py",
                    help="the server's entry point (default: the checked-out app.py; tests use a stand-in)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--max-trials-total", type=int, default=30)
    args = ap.parse_args()

    root = Path(args.root).resolve()
    if root.exists():
        shutil.rmtree(root)
    repo = root / "server"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", ENV["GIT_AUTHOR_NAME"])
    git(repo, "config", "user.email", ENV["GIT_AUTHOR_EMAIL"])
    git(repo, "config", "commit.gpgsign", "false")
    for rel in FILES:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SRC / rel, repo / rel)
    when = 1_764_000_000
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "Initial import of the completions server", when=when)
    good = git(repo, "rev-parse", "HEAD")

    commits = history(False, args.plant_dim)
    if not 1 <= args.planted_at <= len(commits):
        raise SystemExit(f"--planted-at must lie in 1..{len(commits)}")
    # Move the planted (or its harmless stand-in) commit to the requested position.
    special = history(not args.no_plant, args.plant_dim)[9]
    commits = commits[:9] + commits[10:]
    commits.insert(args.planted_at - 1, special)
    planted = None
    for i, (subject, edits) in enumerate(commits, start=1):
        when += 3600
        apply(repo, edits, subject)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", subject, when=when)
        if subject == special[0] and not args.no_plant:
            planted = git(repo, "rev-parse", "HEAD")
    bad = git(repo, "rev-parse", "HEAD")

    text = string.Template((HERE / "perfbisect.toml.in").read_text()).substitute(
        repo=repo, python=args.python, server_script=args.server_script, model_dir=Path(args.model_dir).resolve(), max_tokens=args.max_tokens,
        warmup=args.warmup, runs=args.runs, max_trials_total=args.max_trials_total,
    )
    config = root / "perfbisect.toml"
    config.write_text(text)
    print(json.dumps({"repo": str(repo), "config": str(config), "good": good, "bad": bad, "planted": planted,
                      "commits": len(commits) + 1}))


if __name__ == "__main__":
    main()
