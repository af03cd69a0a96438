"""The demo emulator, driven over real HTTP as a real subprocess on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from perfbisect.demo.emulator import BROKEN_CAPTURE_ACCEPT_LENGTH, read_code_speed


def sse_events(resp: httpx.Response) -> list:
    """The data payloads of an SSE response, in order ('[DONE]' kept as a string)."""
    out = []
    for line in resp.iter_lines():
        if line.startswith("data:"):
            body = line[5:].strip()
            out.append(body if body == "[DONE]" else json.loads(body))
    return out


def stream_generate(base_url: str, body: dict) -> list:
    with httpx.stream("POST", base_url + "/generate", json={**body, "stream": True}, timeout=30) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        return sse_events(resp)


def group_pids(pgid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                pids.append(int(entry.name))
    return pids


# ---------------------------------------------------------------------------------------------
# Reading the speed from the code


def test_code_speed_last_assignment_wins_and_ignores_indented_lines(tmp_path: Path) -> None:
    pkg = tmp_path / "python" / "sglang"
    (pkg / "srt" / "models").mkdir(parents=True)
    (pkg / "a.py").write_text("DECODE_STEP_MS = 3.0\nSTARTUP_S=1.5  # slow load\n")
    (pkg / "srt" / "models" / "deepseek_v2.py").write_text(
        "EAGLE3_CAPTURE_FIX = False\n"
        "def f():\n    DECODE_STEP_MS = 99.0\n"
        "SPEC_ACCEPT_LENGTH = 2.0\n"
    )
    (pkg / "srt" / "z.py").write_text("DECODE_STEP_MS = 12.5\nVERIFY_CYCLE_MS = 3e1\n")
    speed = read_code_speed(tmp_path)
    assert speed.decode_step_ms == 12.5  # srt/z.py sorts after a.py: last one found wins
    assert speed.verify_cycle_ms == 30.0
    assert speed.startup_s == 1.5
    assert speed.spec_accept_length == 2.0
    assert speed.eagle3_capture_fix is False
    assert speed.effective_accept_length == BROKEN_CAPTURE_ACCEPT_LENGTH
    assert speed.sources["DECODE_STEP_MS"] == "python/sglang/srt/z.py:1"


def test_code_speed_defaults_without_sglang_tree(tmp_path: Path) -> None:
    speed = read_code_speed(tmp_path)
    assert (speed.decode_step_ms, speed.verify_cycle_ms, speed.spec_accept_length) == (2.0, 4.0, 2.4)
    assert speed.eagle3_capture_fix is True and speed.sources == {}


# ---------------------------------------------------------------------------------------------
# Endpoints


def test_health_is_503_until_startup_elapsed_while_model_info_answers(emulator_worktree, start_emulator) -> None:
    # 6 s of start-up: at 1 s, CI on a loaded machine saw the window close during the four requests below
    emu = start_emulator(emulator_worktree(STARTUP_S=6.0), wait_ready=False)
    deadline = time.monotonic() + 10
    while True:  # wait for the socket, not for readiness
        try:
            info = httpx.get(emu.base_url + "/get_model_info", timeout=1)
            break
        except httpx.ConnectError:
            assert time.monotonic() < deadline, emu.log()
            time.sleep(0.02)
    assert info.status_code == 200 and info.json()["is_generation"] is True
    assert httpx.get(emu.base_url + "/v1/models").json()["data"][0]["object"] == "model"
    assert httpx.get(emu.base_url + "/health_generate").status_code == 503
    assert httpx.get(emu.base_url + "/health").status_code == 503
    gen = httpx.post(emu.base_url + "/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 2}})
    assert gen.status_code == 503
    emu.wait_ready(timeout=30)
    assert httpx.get(emu.base_url + "/health").status_code == 200


def test_never_ready_stays_503(emulator_worktree, start_emulator) -> None:
    emu = start_emulator(emulator_worktree(STARTUP_S=0.01), "--never-ready", wait_ready=False)
    deadline = time.monotonic() + 10
    seen = []
    while len(seen) < 5 and time.monotonic() < deadline:
        try:
            seen.append(httpx.get(emu.base_url + "/health_generate", timeout=1).status_code)
        except httpx.ConnectError:
            pass
        time.sleep(0.1)
    assert seen == [503] * 5


def test_generate_stream_fixed_length(emulator_worktree, start_emulator) -> None:
    emu = start_emulator(emulator_worktree(DECODE_STEP_MS=1.0), "--model-path", "some/model", "--tp", "8", "--trust-remote-code")
    events = stream_generate(
        emu.base_url,
        {"text": "Tell me a story about GPUs.", "sampling_params": {"max_new_tokens": 40, "ignore_eos": True, "temperature": 0}},
    )
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    metas = [c["meta_info"] for c in chunks]
    assert metas[0]["completion_tokens"] == 1  # the prefill token comes alone
    assert [m["finish_reason"] for m in metas[:-1]] == [None] * (len(metas) - 1)
    assert metas[-1]["finish_reason"] == {"type": "length", "length": 40}
    assert metas[-1]["completion_tokens"] == 40 and metas[-1]["prompt_tokens"] == 7
    assert "e2e_latency" in metas[-1] and all("e2e_latency" not in m for m in metas[:-1])
    assert all(b["completion_tokens"] > a["completion_tokens"] for a, b in zip(metas, metas[1:]))
    assert len({m["id"] for m in metas}) == 1
    # Cumulative text, one word per token.
    assert all(b["text"].startswith(a["text"]) for a, b in zip(chunks, chunks[1:]))
    assert len(chunks[-1]["text"].split()) == 40
    assert "spec_verify_ct" not in metas[-1]
    info = httpx.get(emu.base_url + "/get_server_info").json()
    assert info["emulator"] is True and info["tp_size"] == 8 and info["model_path"] == "some/model"
    assert info["speculative_algorithm"] is None
    assert "avg_spec_accept_length" not in info["internal_states"][0]
    assert info["last_request_id"] == metas[-1]["id"] and info["last_completion_tokens"] == 40
    assert info["emulator_code"]["DECODE_STEP_MS"] == 1.0


def test_generate_non_stream_and_early_eos(emulator_worktree, start_emulator) -> None:
    emu = start_emulator(emulator_worktree(DECODE_STEP_MS=0.5), "--eos-after", "12")
    body = {"text": "hello", "sampling_params": {"max_new_tokens": 50}}
    out = httpx.post(emu.base_url + "/generate", json=body, timeout=30).json()
    assert out["meta_info"]["completion_tokens"] == 12
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": 2}
    assert len(out["text"].split()) == 12
    body["sampling_params"]["ignore_eos"] = True
    out = httpx.post(emu.base_url + "/generate", json=body, timeout=30).json()
    assert out["meta_info"]["completion_tokens"] == 50
    assert out["meta_info"]["finish_reason"]["type"] == "length"


def test_speculative_mode_reports_spec_metrics(emulator_worktree, start_emulator) -> None:
    worktree = emulator_worktree(VERIFY_CYCLE_MS=0.5, SPEC_ACCEPT_LENGTH=2.5)
    flags = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2",
             "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
    emu = start_emulator(worktree, *flags)
    metas = [
        stream_generate(emu.base_url, {"text": f"prompt {i}", "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}})[-2]["meta_info"]
        for i in range(3)
    ]
    for meta in metas:
        assert meta["completion_tokens"] == 400
        assert meta["spec_accept_length"] == pytest.approx(400 / meta["spec_verify_ct"])
        assert 2.1 < meta["spec_accept_length"] < 2.9  # drawn around SPEC_ACCEPT_LENGTH
        assert 0.0 < meta["spec_accept_rate"] < 1.0
    info = httpx.get(emu.base_url + "/get_server_info").json()
    assert info["speculative_algorithm"] == "EAGLE3" and info["speculative_num_draft_tokens"] == 4
    assert info["internal_states"][0]["avg_spec_accept_length"] == pytest.approx(
        1200 / sum(m["spec_verify_ct"] for m in metas)
    )


def test_missing_capture_fix_lowers_accept_length(emulator_worktree, start_emulator) -> None:
    worktree = emulator_worktree(VERIFY_CYCLE_MS=0.5, EAGLE3_CAPTURE_FIX=False)
    emu = start_emulator(worktree, "--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "3")
    meta = stream_generate(emu.base_url, {"text": "x", "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}})[-2]["meta_info"]
    assert 1.15 < meta["spec_accept_length"] < 1.45


def test_openai_completions_and_chat(emulator_worktree, start_emulator) -> None:
    emu = start_emulator(emulator_worktree(DECODE_STEP_MS=0.5))
    body = {"model": "m", "prompt": "Say something.", "max_tokens": 20, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", emu.base_url + "/v1/completions", json=body, timeout=30) as resp:
        events = sse_events(resp)
    assert events[-1] == "[DONE]"
    assert events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == 20
    pieces = [e["choices"][0] for e in events[:-2]]
    assert all(e["object"] == "text_completion" for e in events[:-1])
    assert pieces[-1]["finish_reason"] == "length" and all(p["finish_reason"] is None for p in pieces[:-1])
    assert len("".join(p["text"] for p in pieces).split()) == 20

    chat = {"model": "m", "messages": [{"role": "user", "content": "Hi there."}], "max_tokens": 10, "stream": True}
    with httpx.stream("POST", emu.base_url + "/v1/chat/completions", json=chat, timeout=30) as resp:
        events = sse_events(resp)
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(e["object"] == "chat.completion.chunk" for e in events[:-1])
    assert len("".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1]).split()) == 10
    assert all("usage" not in e or e["usage"] is None for e in events[:-1])  # no include_usage asked

    out = httpx.post(emu.base_url + "/v1/chat/completions", json={**chat, "stream": False}, timeout=30).json()
    assert out["object"] == "chat.completion" and out["usage"]["completion_tokens"] == 10
    assert out["choices"][0]["message"]["role"] == "assistant"
    out = httpx.post(emu.base_url + "/v1/completions", json={**body, "stream": False, "ignore_eos": False}, timeout=30).json()
    assert out["usage"]["completion_tokens"] == 20  # natural EOS lies beyond 200 tokens


def test_decode_rate_follows_the_code(emulator_worktree, start_emulator) -> None:
    rates = {}
    for step in (1.0, 2.0):
        emu = start_emulator(emulator_worktree(f"wt{step}", DECODE_STEP_MS=step))
        seen = []
        for _ in range(3):
            stream_generate(emu.base_url, {"text": "x", "sampling_params": {"max_new_tokens": 100, "ignore_eos": True}})
            seen.append(httpx.get(emu.base_url + "/get_server_info").json()["last_decode_tok_s"])
        rates[step] = max(seen)  # a stall of the shared test machine slows a run, never speeds one up
        code = httpx.get(emu.base_url + "/get_server_info").json()["emulator_code"]
        assert code["DECODE_STEP_MS"] == step  # the emulator read the step from the checkout's code
        emu.kill_group()
    # No rate is asserted (a busy machine slows every run): the code's step is a ceiling a run never
    # beats, and the faster code decodes faster.
    assert rates[1.0] <= 1000 * 1.05 and rates[2.0] <= 500 * 1.05
    assert rates[1.0] > rates[2.0]


def test_session_drift_counter_slows_each_new_session(tmp_path: Path, emulator_worktree, start_emulator) -> None:
    worktree = emulator_worktree()
    env = {"PERFBISECT_DEMO_DRIFT_PER_SESSION": "0.05", "PERFBISECT_DEMO_DRIFT_FILE": str(tmp_path / "sessions")}
    factors = []
    for _ in range(3):
        emu = start_emulator(worktree, env=env)
        info = httpx.get(emu.base_url + "/get_server_info").json()
        factors.append((info["emulator_session_index"], info["emulator_session_factor"]))
        emu.kill_group()
    assert [i for i, _ in factors] == [0, 1, 2]
    assert [f for _, f in factors] == pytest.approx([1.0, 1.05, 1.05**2])


def test_session_factor_varies_between_sessions(emulator_worktree, start_emulator) -> None:
    worktree = emulator_worktree()
    env = {"PERFBISECT_DEMO_SESSION_SIGMA": "0.05", "PERFBISECT_DEMO_SEED": "7"}
    factors = set()
    for _ in range(2):
        emu = start_emulator(worktree, env=env)
        factors.add(httpx.get(emu.base_url + "/get_server_info").json()["emulator_session_factor"])
        emu.kill_group()
    assert len(factors) == 2 and all(0.7 < f < 1.4 for f in factors)


# ---------------------------------------------------------------------------------------------
# Process behaviour


def test_workers_share_the_group_and_miss_dropped_env(emulator_worktree, start_emulator) -> None:
    emu = start_emulator(
        emulator_worktree(), "--workers", "2", "--drop-env", "NCCL_PROTO",
        env={"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"},
    )
    deadline = time.monotonic() + 10
    while len(group_pids(emu.proc.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = group_pids(emu.proc.pid)
    assert emu.proc.pid in pids and len(pids) == 3
    for pid in pids:
        environ = dict(
            item.split(b"=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in item
        )
        assert environ[b"NCCL_ALGO"] == b"Ring"
        assert (b"NCCL_PROTO" in environ) == (pid == emu.proc.pid)
    # SIGTERM to the server alone: it stops cleanly and takes its workers with it.
    os.kill(emu.proc.pid, signal.SIGTERM)
    assert emu.proc.wait(timeout=10) == 0
    deadline = time.monotonic() + 5
    while group_pids(emu.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group_pids(emu.proc.pid) == []


def test_ignore_sigterm_needs_sigkill(emulator_worktree, start_emulator) -> None:
    emu = start_emulator(emulator_worktree(), "--ignore-sigterm")
    os.killpg(emu.proc.pid, signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        emu.proc.wait(timeout=0.7)
    assert httpx.get(emu.base_url + "/health").status_code == 200
    os.killpg(emu.proc.pid, signal.SIGKILL)
    assert emu.proc.wait(timeout=5) == -signal.SIGKILL


def test_die_after_requests_exits_mid_stream(emulator_worktree, start_emulator) -> None:
    emu = start_emulator(emulator_worktree(DECODE_STEP_MS=0.5), "--die-after-requests", "2")
    body = {"text": "x", "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}
    assert stream_generate(emu.base_url, body)[-1] == "[DONE]"
    seen = []
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        with httpx.stream("POST", emu.base_url + "/generate", json={**body, "stream": True}, timeout=30) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: {"):
                    seen.append(json.loads(line[6:])["meta_info"]["completion_tokens"])
    assert seen and max(seen) < 40
    assert emu.proc.wait(timeout=5) == 3
