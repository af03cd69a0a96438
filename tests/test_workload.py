"""The workload client against real emulator subprocesses (and a tiny 404 server) on 127.0.0.1."""

from __future__ import annotations

import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from perfbisect.settings import WorkloadConfig
from perfbisect.errors import ConfigError, ServerDied, WorkloadError
from perfbisect.model import RunResult
from perfbisect.measure.workload import (
    DEFAULT_PROMPTS,
    avg_spec_accept_length,
    load_prompts,
    run_workload,
    server_info,
)
from perfbisect.measure.external_workloads import run_command_workload

from .conftest import free_port


def cfg(**kw) -> WorkloadConfig:
    base = dict(max_tokens=60, warmup=1, runs=3, request_timeout_s=30.0)
    base.update(kw)
    return WorkloadConfig(**base)


# ---------------------------------------------------------------------------------------------
# Streaming runs


def median(values):
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else 0.5 * (values[mid - 1] + values[mid])


# No test here asserts a rate or a duration: the machine is shared and its speed is not ours to
# know. They check behaviour instead: fields present, their ordering, their consistency with each
# other, and the direction of a change (a slower worktree gives a slower run).


def test_sglang_runs_fixed_length_with_honest_rates(emulator_worktree, start_emulator) -> None:
    emu = start_emulator(emulator_worktree(DECODE_STEP_MS=2.0))
    landed: list[RunResult] = []
    messages: list[str] = []
    runs = run_workload(emu.base_url, cfg(max_tokens=60), on_run=landed.append, progress=messages.append)
    assert runs == landed  # each run was handed over as it landed, in order
    assert [r.warmup for r in runs] == [True, False, False, False]
    assert [r.index for r in runs] == [0, 1, 2, 3]
    assert len(messages) == 4 and "warm-up 0" in messages[0] and "[4/4]" in messages[-1]
    for run in runs:
        assert run.output_tokens == run.requested_tokens == 60
        assert run.complete and run.error is None
        assert 26 <= run.prompt_tokens <= 34  # the default prompts (user's protocol)
        assert run.decode_tok_s > 0 and run.server_decode_tok_s > 0
        assert run.e2e_tok_s < run.decode_tok_s  # end to end includes the time to the first token
        assert run.ttft_s > 0
        assert run.itl_p99_ms >= run.itl_p50_ms > 0
        assert run.spec_verify_ct is None and run.spec_accept_length is None
    measured = runs[1:]
    # The client's clock and the server's own measurement describe the same streams (a loose band:
    # a descheduled client shifts its side, which is noise, not a different quantity).
    assert median(r.decode_tok_s / r.server_decode_tok_s for r in measured) == pytest.approx(1.0, rel=0.25)
    assert all(r.usable for r in measured) and not runs[0].usable


def test_speed_comes_from_the_worktree(emulator_worktree, start_emulator) -> None:
    medians = {}
    for step in (1.0, 2.5):
        emu = start_emulator(emulator_worktree(f"wt-{step}", DECODE_STEP_MS=step))
        runs = run_workload(emu.base_url, cfg(max_tokens=60, warmup=1, runs=3))[1:]
        medians[step] = median(r.decode_tok_s for r in runs)
        emu.kill_group()
    assert medians[1.0] > medians[2.5]  # the slower code in the worktree gives the slower runs


def test_batched_chunks_count_tokens_exactly(emulator_worktree, start_emulator) -> None:
    # 0.25 ms steps: the emulator packs 4 tokens per chunk; every token is counted, none per chunk.
    emu = start_emulator(emulator_worktree(DECODE_STEP_MS=0.25))
    runs = run_workload(emu.base_url, cfg(max_tokens=400, warmup=1, runs=2))[1:]
    assert [r.output_tokens for r in runs] == [400, 400]
    assert all(r.itl_p50_ms is not None and r.itl_p50_ms >= 0 and r.itl_p99_ms >= r.itl_p50_ms for r in runs)


def test_itl_is_per_token_when_chunks_carry_several() -> None:
    """ITL is per token: a chunk of k tokens after a gap g is k gaps of g/k, so ITL agrees with the
    decode rate (per chunk it would be k× too long). Arrival times given, not timed: a busy machine's
    client reads chunks late and in bursts, which decides a live stream's gaps."""
    from perfbisect.measure.workload import _Stream, _summarise

    # one request: the prefill token at 10 ms, then 99 chunks of 4 tokens, one every 1 ms
    arrivals = [(0.010, 1.0)] + [(0.010 + 0.001 * i, 4.0) for i in range(1, 100)]
    rec = _Stream(t_request=0.0, arrivals=arrivals, reported_tokens=397, finished=True)
    r = _summarise(0, False, cfg(max_tokens=397), [rec])
    assert r.output_tokens == 397
    assert r.itl_p50_ms == pytest.approx(0.25) and r.itl_p99_ms == pytest.approx(0.25)
    assert r.decode_tok_s == pytest.approx(4000.0)
    assert (1000.0 / r.itl_p50_ms) / r.decode_tok_s == pytest.approx(1.0)
    # a stall of 5 ms before one chunk: that chunk's 4 tokens carry it, the median does not move
    stalled = [(t + (0.005 if i >= 50 else 0.0), k) for i, (t, k) in enumerate(arrivals)]
    r2 = _summarise(0, False, cfg(max_tokens=397), [_Stream(t_request=0.0, arrivals=stalled, reported_tokens=397, finished=True)])
    assert r2.itl_p50_ms == pytest.approx(0.25) and r2.itl_p99_ms == pytest.approx(1.5)


def test_early_eos_run_is_kept_but_flagged(emulator_worktree, start_emulator) -> None:
    emu = start_emulator(emulator_worktree(DECODE_STEP_MS=0.5), "--eos-after", "25")
    runs = run_workload(emu.base_url, cfg(max_tokens=60, warmup=0, runs=1), ignore_eos=False)
    assert runs[0].output_tokens == 25 and runs[0].requested_tokens == 60
    assert runs[0].error is None and not runs[0].complete and not runs[0].usable
    assert runs[0].decode_tok_s is not None  # measured, just not trusted
    # The default (ignore_eos=True) gets every token despite the EOS position.
    assert run_workload(emu.base_url, cfg(max_tokens=60, warmup=0, runs=1))[0].complete


def test_speculative_metrics_are_parsed(emulator_worktree, start_emulator) -> None:
    worktree = emulator_worktree(VERIFY_CYCLE_MS=2.0, SPEC_ACCEPT_LENGTH=2.0)
    emu = start_emulator(worktree, "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2",
                         "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3")
    runs = run_workload(emu.base_url, cfg(max_tokens=200, warmup=1, runs=2))[1:]
    for run in runs:
        assert run.complete and run.spec_verify_ct > 0
        assert run.spec_accept_length == pytest.approx(200 / run.spec_verify_ct)
        assert 1.6 < run.spec_accept_length < 2.4
        assert 0 < run.spec_accept_rate < 1
        assert run.cycle_time_ms > 0
        # throughput ≈ accept length / cycle time, so tokens per verify cycle = accept length
        tokens_per_cycle = run.decode_tok_s * run.cycle_time_ms / 1000.0
        assert tokens_per_cycle == pytest.approx(run.spec_accept_length, rel=0.05)
    info = server_info(emu.base_url)
    assert info["emulator"] is True
    assert 1.7 < avg_spec_accept_length(info) < 2.3  # server-wide, warm-up included


@pytest.mark.parametrize("kind", ["openai-completions", "openai-chat"])
def test_openai_endpoints(kind: str, emulator_worktree, start_emulator) -> None:
    emu = start_emulator(emulator_worktree(DECODE_STEP_MS=1.0))
    runs = run_workload(emu.base_url, cfg(kind=kind, max_tokens=80, warmup=1, runs=2, model="m"))[1:]
    for run in runs:
        assert run.complete and run.output_tokens == 80
        assert run.prompt_tokens is not None and run.ttft_s > 0
        assert run.itl_p50_ms is not None
        assert run.decode_tok_s > 0 and run.e2e_tok_s < run.decode_tok_s


def test_concurrency_reports_aggregate_throughput(emulator_worktree, start_emulator) -> None:
    emu = start_emulator(emulator_worktree(DECODE_STEP_MS=2.0))
    run = run_workload(emu.base_url, cfg(max_tokens=80, warmup=1, runs=1, concurrency=3))[1]
    assert run.requested_tokens == run.output_tokens == 240 and run.complete
    assert run.decode_tok_s > 0
    assert run.server_decode_tok_s is None  # no single server-side stream to compare with


def test_request_errors_become_runs_not_exceptions(emulator_worktree, start_emulator) -> None:
    emu = start_emulator(emulator_worktree(), "--never-ready", wait_ready=False)
    landed: list[RunResult] = []
    deadline = time.monotonic() + 10
    while True:  # wait for the socket only
        try:
            server_info(emu.base_url)
            break
        except ServerDied:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    runs = run_workload(emu.base_url, cfg(warmup=0, runs=2), on_run=landed.append)
    assert len(runs) == 2 and landed == runs
    assert all(r.error and "HTTP 503" in r.error and not r.usable for r in runs)


def test_server_dying_mid_run_raises_after_recording(emulator_worktree, start_emulator) -> None:
    emu = start_emulator(emulator_worktree(DECODE_STEP_MS=0.5), "--die-after-requests", "3")
    landed: list[RunResult] = []
    with pytest.raises(ServerDied) as err:
        run_workload(emu.base_url, cfg(max_tokens=80, warmup=1, runs=5), on_run=landed.append)
    assert len(landed) == 3
    assert all(r.complete for r in landed[:2])
    partial = landed[2]
    assert partial.error and "mid-stream" in partial.error
    assert 0 < partial.output_tokens < 80 and not partial.usable
    assert "run 2" in str(err.value) and "kept" in str(err.value)


def test_connection_refused_raises_server_died() -> None:
    landed: list[RunResult] = []
    with pytest.raises(ServerDied):
        run_workload(f"http://127.0.0.1:{free_port()}", cfg(warmup=0, runs=3), on_run=landed.append)
    assert len(landed) == 1 and "refused" in landed[0].error


def test_command_kind_is_refused_by_run_workload() -> None:
    with pytest.raises(WorkloadError, match="run_command_workload"):
        run_workload("http://127.0.0.1:1", cfg(kind="command", command=("true",)))


# ---------------------------------------------------------------------------------------------
# Server info


class _NotFound(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_server_info_404_is_empty() -> None:
    httpd = HTTPServer(("127.0.0.1", 0), _NotFound)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        assert server_info(f"http://127.0.0.1:{httpd.server_address[1]}") == {}
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_avg_spec_accept_length_shapes() -> None:
    assert avg_spec_accept_length({"internal_states": [{"avg_spec_accept_length": 2.0}, {"avg_spec_accept_length": 3.0}]}) == 2.5
    assert avg_spec_accept_length({"avg_spec_accept_length": 1.8}) == 1.8  # older builds
    assert avg_spec_accept_length({"internal_states": [{"last_gen_throughput": 80.0}]}) is None
    assert avg_spec_accept_length({}) is None


# ---------------------------------------------------------------------------------------------
# Prompts


def test_default_prompts() -> None:
    prompts = load_prompts(WorkloadConfig())
    assert prompts == list(DEFAULT_PROMPTS) and len(prompts) == 8
    assert load_prompts(WorkloadConfig(prompts=("a", "b"))) == ["a", "b"]


def test_prompts_file_jsonl_and_plain_lines(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "first"}\n\n  plain second  \n{"prompt": "third", "id": 3}\n')
    assert load_prompts(WorkloadConfig(prompts_file=f)) == ["first", "plain second", "third"]


@pytest.mark.parametrize(
    "content, needle",
    [
        ('{"prompt": "ok"}\n{"prompt": oops}\n', "p.jsonl:2"),
        ('{"text": "no prompt key"}\n', "p.jsonl:1"),
        ("\n  \n", "holds no prompts"),
    ],
)
def test_prompts_file_errors_name_file_and_line(tmp_path: Path, content: str, needle: str) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(content)
    with pytest.raises(ConfigError, match=needle):
        load_prompts(WorkloadConfig(prompts_file=f))


def test_missing_prompts_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_prompts(WorkloadConfig(prompts_file=tmp_path / "nope.jsonl"))


# ---------------------------------------------------------------------------------------------
# Command workloads


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "bench.py"
    path.write_text(body)
    return path


def test_command_workload_success(tmp_path: Path) -> None:
    worktree = tmp_path / "wt"
    worktree.mkdir()
    (worktree / "speed.txt").write_text("42.5")
    script = _script(
        tmp_path,
        "import json, os, sys\n"
        "print('progress noise')\n"
        "print(json.dumps({'tok_s': 1.0}))\n"
        "print(json.dumps({'tok_s': float(open('speed.txt').read()), 'env': os.environ['BENCH_FLAG'], 'wt': sys.argv[1]}))\n"
        "print('trailing text')\n",
    )
    w = cfg(kind="command", command=("{python}", str(script), "{worktree}"), metric="tok_s", warmup=2)
    log = tmp_path / "logs" / "cmd.log"
    runs = run_command_workload(w, worktree, sys.executable, {"BENCH_FLAG": "on"}, log)
    assert [r.warmup for r in runs] == [True, True, False]
    measured = runs[-1]
    assert measured.metric_value == 42.5 and measured.value == 42.5 and measured.usable
    assert not runs[0].usable
    text = log.read_text()
    assert text.count("=== ") == 3 and "progress noise" in text


def test_command_workload_missing_metric(tmp_path: Path) -> None:
    script = _script(tmp_path, "import json; print(json.dumps({'latency_ms': 3.0}))\n")
    w = cfg(kind="command", command=("{python}", str(script)), metric="tok_s", warmup=0)
    with pytest.raises(ConfigError, match="without the key 'tok_s'.*latency_ms"):  # every commit would fail
        run_command_workload(w, tmp_path, sys.executable, {}, tmp_path / "cmd.log")


@pytest.mark.parametrize("printed", ["float('inf')", "float('nan')", "0", "-5.0", "None"])
def test_command_workload_broken_metric_is_flagged_not_used(tmp_path: Path, printed: str) -> None:
    script = _script(tmp_path, f"import json; print(json.dumps({{'tok_s': {printed}}}))\n")
    w = cfg(kind="command", command=("{python}", str(script)), metric="tok_s", warmup=0)
    (run,) = run_command_workload(w, tmp_path, sys.executable, {}, tmp_path / "cmd.log")
    assert not run.usable and "not a finite positive number" in run.error
    assert run.value is None or run.value <= 0


def test_command_workload_no_json(tmp_path: Path) -> None:
    script = _script(tmp_path, "print('42 tok/s')\n")
    w = cfg(kind="command", command=("{python}", str(script)), warmup=0)
    with pytest.raises(WorkloadError, match="no JSON object"):
        run_command_workload(w, tmp_path, sys.executable, {}, tmp_path / "cmd.log")


def test_command_workload_failing_command(tmp_path: Path) -> None:
    script = _script(tmp_path, "import sys\nprint('cuda out of memory', file=sys.stderr)\nsys.exit(7)\n")
    w = cfg(kind="command", command=("{python}", str(script)), warmup=0)
    with pytest.raises(WorkloadError, match="status 7") as err:
        run_command_workload(w, tmp_path, sys.executable, {}, tmp_path / "cmd.log")
    assert "cuda out of memory" in str(err.value)


def test_command_workload_missing_program(tmp_path: Path) -> None:
    w = cfg(kind="command", command=("no-such-benchmark-program",), warmup=0)
    with pytest.raises(WorkloadError, match="not found"):
        run_command_workload(w, tmp_path, sys.executable, {}, tmp_path / "cmd.log")


def test_command_workload_timeout(tmp_path: Path) -> None:
    script = _script(tmp_path, "import time\ntime.sleep(30)\n")
    w = cfg(kind="command", command=("{python}", str(script)), warmup=0, request_timeout_s=0.5)
    with pytest.raises(WorkloadError, match="longer than"):
        run_command_workload(w, tmp_path, sys.executable, {}, tmp_path / "cmd.log")
