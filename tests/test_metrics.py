"""Metrics in their own units, bisection on a chosen quantity, and SGLang's bench_serving workload.

Through the real CLI against the demo target (emulator servers on 127.0.0.1); durations are never asserted.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
from pathlib import Path

from perfbisect.config import parse_config
from perfbisect.errors import ConfigError
from perfbisect.metrics import describe_workload
from perfbisect.measure.external_workloads import parse_bench_serving
from perfbisect.demo.target import make_demo_target
from tests.cli_runner import run_cli, run_command

import pytest


def _config(target, tmp_path: Path, old: str, new: str, metric: str | None = None) -> Path:
    text = target.config.read_text()
    assert old in text
    text = text.replace(old, new)
    if metric:
        text = text.replace('metric = "eagle3"', f'metric = "{metric}"')
    path = tmp_path / "perfbisect.toml"
    path.write_text(text)
    return path


def test_a_seconds_metric_prints_seconds_and_a_sane_effect(tmp_path):
    """A command workload timing itself in seconds: progress, measure and compare speak seconds, and
    a commit that takes longer is a regression of a sane size (not "0.0 tok/s", not "+618785%")."""
    target = make_demo_target(tmp_path / "demo", commits=10)
    script = tmp_path / "bench.py"
    script.write_text(
        "import json, pathlib, re\n"
        "text = pathlib.Path('python/sglang/srt/model_executor/decode.py').read_text()\n"
        "step = float(re.search(r'DECODE_STEP_MS = ([0-9.]+)', text).group(1))\n"
        "print(json.dumps({'seconds': step / 1000.0 * 8}))\n"
    )
    config = _config(target, tmp_path, '[workload]\nkind = "sglang"',
                     f'[workload]\nkind = "command"\ncommand = ["{{python}}", "{script}"]\nmetric = "seconds"\n'
                     'higher_is_better = false', metric="baseline")
    db = tmp_path / "r.sqlite"
    proc = run_cli("measure", "HEAD", "-m", "baseline", "-n", "2", "-c", str(config), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert "tok/s" not in out, out
    assert re.search(r"\d ms[,\n]", proc.stdout), proc.stdout  # a time, in the unit that reads (64 ms, not 0.064 s)
    assert "lower is better" in proc.stdout
    data = json.loads(run_cli("measure", "HEAD", "-m", "baseline", "-n", "1", "-c", str(config), "--db", str(db),
                          "--json").stdout)
    assert data["metric"]["unit"] == "s" and data["metric"]["higher_is_better"] is False
    assert 0 < data["trials"]["baseline"][0]["value"] < 1


def test_known_quantities_are_validated_and_know_their_direction(tmp_path):
    base = {"server": {"command": ["x", "{port}"]}, "modes": {"baseline": {}}}
    cfg = parse_config({**base, "workload": {"metric": "itl_p99_ms"}}, tmp_path / "p.toml")
    assert cfg.workload.higher_is_better is False
    assert describe_workload(cfg.workload).format(12.3456) == "12.35 ms"
    assert parse_config({**base}, tmp_path / "p.toml").workload.higher_is_better is True  # tok_s: unchanged
    with pytest.raises(ConfigError, match="Known quantities: decode_tok_s.*itl_p99_ms"):
        parse_config({**base, "workload": {"metric": "itl_p42"}}, tmp_path / "p.toml")
    with pytest.raises(ConfigError, match="lower is better"):
        parse_config({**base, "workload": {"metric": "ttft_ms", "higher_is_better": True}}, tmp_path / "p.toml")


def test_bisect_on_itl_p99_names_the_planted_commit(tmp_path):
    """The planted commit slows the speculative verify cycle: ITL rises, a lower-is-better regression
    named, its effect positive, spoken in ms. Seeded (the emulator's ITL computed from the code with
    seeded noise): a live emulator's p99 gap is decided by a busy machine's stalls, and its bisection's
    outcome must not depend on the load. The live ITL path is measured in test_measure_shows_itl."""
    target = make_demo_target(tmp_path / "demo", commits=12, seeded=True)
    text = target.config.read_text()
    assert 'metric = "tok_s"' in text
    config = tmp_path / "perfbisect.toml"
    # which path regressed is not what this test is about: no baseline trials after naming it
    config.write_text(text.replace('metric = "tok_s"', 'metric = "itl_p99_ms"\nhigher_is_better = false')
                      .replace("[stats]\n", "[stats]\nmode_trials = 0\n", 1))
    db = tmp_path / "r.sqlite"
    proc = run_command("run", f"good={target.good}", f"bad={target.bad}", "-c", str(config), "--db", str(db), "--json",
                       timeout=540)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["verdict"] == "regressed" and result["culprit"] == target.planted, result
    assert result["effect_pct"] > 0  # ITL went up: the sign of the metric, called a regression
    assert result["metric"]["unit"] == "ms" and result["metric"]["higher_is_better"] is False, result["metric"]
    assert "ms" in proc.stderr and "tok/s" not in proc.stderr.split("→")[-1]


def test_measure_shows_itl(tmp_path):
    target = make_demo_target(tmp_path / "demo", commits=6)
    db = tmp_path / "r.sqlite"
    proc = run_cli("measure", "HEAD", "-m", "baseline", "-n", "1", "-c", str(target.config), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    assert "ITL p50" in proc.stdout and "p99" in proc.stdout and "tok/s" in proc.stdout
    data = json.loads(run_cli("measure", "HEAD", "-m", "baseline", "-n", "1", "-c", str(target.config), "--db", str(db),
                          "--json").stdout)
    row = data["trials"]["baseline"][0]
    assert row["itl_p50_ms"] > 0 and row["itl_p99_ms"] >= row["itl_p50_ms"]


# A STAND-IN for SGLang's `python -m sglang.bench_serving`: it takes the real flags (unknown ones are
# ignored), sends its requests to the server under test (the demo emulator), and appends one result line
# in the real JSON format to --output-file. It is not SGLang's benchmark.
FAKE_BENCH_SERVING = '''
import argparse, json, time, urllib.request
p = argparse.ArgumentParser()
p.add_argument("--base-url"); p.add_argument("--num-prompts", type=int); p.add_argument("--random-output-len", type=int)
p.add_argument("--max-concurrency", type=int); p.add_argument("--output-file"); p.add_argument("--warmup-requests", type=int)
args, _ = p.parse_known_args()
start = time.perf_counter(); ttfts = []; tokens = 0
for _ in range(args.num_prompts):
    body = json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": args.random_output_len,
                       "ignore_eos": True}}).encode()
    t0 = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(args.base_url + "/generate", data=body,
                                headers={"Content-Type": "application/json"}), timeout=60) as r:
        meta = json.loads(r.read())["meta_info"]
    ttfts.append(1000 * (time.perf_counter() - t0)); tokens += meta["completion_tokens"]
dur = time.perf_counter() - start
result = {"backend": "sglang", "dataset_name": "random", "request_rate": float("inf"), "max_concurrency": args.max_concurrency,
          "duration": dur, "completed": args.num_prompts, "total_input_tokens": 10 * args.num_prompts,
          "total_output_tokens": tokens, "request_throughput": args.num_prompts / dur,
          "output_throughput": tokens / dur, "mean_ttft_ms": sum(ttfts) / len(ttfts), "median_ttft_ms": sorted(ttfts)[len(ttfts) // 2],
          "p99_ttft_ms": max(ttfts), "median_itl_ms": 1.5, "p99_itl_ms": 2.5, "mean_itl_ms": 1.6, "concurrency": 1.0,
          "accept_length": None}
with open(args.output_file, "a") as f:
    f.write(json.dumps(result) + "\\n")
print("============ Serving Benchmark Result ============")
'''


def _commit_client(repo: Path, source: str, subject: str) -> str:
    """Commit ``source`` as the checkout's python/sglang/bench_serving.py (where SGLang keeps it)."""
    (repo / "python/sglang/bench_serving.py").write_text(source)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    import os

    run = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True, text=True,  # noqa: E731
                                    env={**os.environ, **env}).stdout.strip()
    run("add", "-A")
    run("commit", "-qm", subject)
    return run("rev-parse", "HEAD")


def test_bench_serving_workload_runs_the_targets_module_and_reads_its_json(tmp_path):
    target = make_demo_target(tmp_path / "demo", commits=6)
    _commit_client(target.repo, FAKE_BENCH_SERVING, "Add bench_serving")
    config = _config(target, tmp_path, '[workload]\nkind = "sglang"',
                     '[workload]\nkind = "bench_serving"\nmetric = "median_ttft_ms"\ncommand = ["--tokenizer", "demo/tok"]',
                     metric="baseline")
    db = tmp_path / "r.sqlite"
    proc = run_cli("measure", "HEAD", "-m", "baseline", "-n", "1", "-c", str(config), "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["metric"]["name"] == "median_ttft_ms" and data["metric"]["unit"] == "ms"
    row = data["trials"]["baseline"][0]
    assert row["value"] > 0 and row["itl_p50_ms"] == 1.5 and row["itl_p99_ms"] == 2.5
    from perfbisect.config import load_config

    logs = list(load_config(target.config).cache_dir.rglob("*.bench_serving.jsonl"))
    assert logs and json.loads(logs[0].read_text().splitlines()[-1])["completed"] == 5 * 1  # runs × concurrency (the demo: 5 runs)


# A STAND-IN client whose reported throughput is its own constant (CLIENT_SPEED), varied by ±3% with
# the trial's layout padding: what it reports depends on the client's code and on nothing else.
FIXED_CLIENT = '''
import argparse, json, os
CLIENT_SPEED = {speed}
p = argparse.ArgumentParser(); p.add_argument("--output-file"); p.add_argument("--num-prompts", type=int)
args, _ = p.parse_known_args()
jitter = 1 + 0.01 * (len(os.environ.get("PERFBISECT_LAYOUT_PAD", "")) % 7 - 3)
with open(args.output_file, "a") as f:
    f.write(json.dumps({{"completed": args.num_prompts, "output_throughput": CLIENT_SPEED * jitter,
                        "total_output_tokens": 100, "median_ttft_ms": 5.0}}) + "\\n")
'''


def test_a_change_to_the_benchmark_client_inside_the_range_cannot_be_blamed(tmp_path):
    """bench_serving runs from the good endpoint's checkout at every trial: a commit that halves what
    the client reports is not a regression of the server (the range holds no server change)."""
    target = make_demo_target(tmp_path / "demo", commits=6, drift_only=True, pins=False)
    good = _commit_client(target.repo, FIXED_CLIENT.format(speed=100.0), "Add bench_serving")
    halved = _commit_client(target.repo, FIXED_CLIENT.format(speed=50.0), "bench_serving: count tokens differently")
    (target.repo / "python/sglang/srt/managers/scheduler.py").open("a").write("\n\ndef later():\n    pass\n")
    bad = _commit_client(target.repo, FIXED_CLIENT.format(speed=50.0), "Scheduler: later")
    config = _config(target, tmp_path, '[workload]\nkind = "sglang"',
                     '[workload]\nkind = "bench_serving"\nmetric = "output_throughput"', metric="baseline")
    config.write_text(config.read_text() + "max_trials_total = 12\n")
    db = tmp_path / "r.sqlite"
    proc = run_cli("run", f"good={good}", f"bad={bad}", "-c", str(config), "--db", str(db), "--json")
    assert proc.returncode in (0, 3), proc.stderr
    result = json.loads(proc.stdout)
    assert result["culprit"] is None and halved not in result.get("culprit_set", [])
    assert f"benchmark client: sglang.bench_serving of {good[:10]}" in proc.stderr
    with sqlite3.connect(db) as con:
        values = [v for (v,) in con.execute("select r.metric_value from runs r join trials t on r.trial_id = t.id "
                                            "where t.status = 'ok' and r.warmup = 0")]
        at_bad = con.execute("select count(*) from trials where commit_sha = ? and status = 'ok'", (bad,)).fetchone()[0]
    assert at_bad >= 1 and values and all(96 <= v <= 104 for v in values)  # the good endpoint's client, every time
    # workload.client_rev names another revision: that client measures instead (here the halved one).
    pinned = config.read_text().replace('metric = "output_throughput"', f'metric = "output_throughput"\nclient_rev = "{halved}"')
    config.write_text(pinned)
    measured = run_cli("measure", good, "-m", "baseline", "-n", "1", "-c", str(config), "--db", str(tmp_path / "m.sqlite"), "--json")
    assert measured.returncode == 0, measured.stderr
    assert 48 <= json.loads(measured.stdout)["trials"]["baseline"][0]["value"] <= 52


def test_parse_bench_serving_flags_a_result_without_requests():
    run = parse_bench_serving({"completed": 0, "output_throughput": 0.0}, "output_throughput")
    assert not run.usable and "completed no request" in (run.error or "")
    ok = parse_bench_serving({"completed": 4, "output_throughput": 812.5, "p99_itl_ms": 3.0}, "output_throughput")
    assert ok.usable and ok.value == 812.5 and ok.itl_p99_ms == 3.0


def test_output_throughput_at_a_concurrency_with_the_built_in_client(tmp_path):
    """`concurrency = 4` + `metric = "output_tok_s"`: each run is four requests at once, its value their
    output tokens over the run's wall time, printed in tok/s (bench_serving's output_throughput)."""
    target = make_demo_target(tmp_path / "demo", commits=4)
    config = _config(target, tmp_path, '[workload]\nkind = "sglang"',
                     '[workload]\nkind = "sglang"\nmetric = "output_tok_s"\nconcurrency = 4')
    db = tmp_path / "r.sqlite"
    proc = run_cli("measure", "HEAD", "-m", "baseline", "-n", "1", "-c", str(config), "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["metric"]["name"] == "output_tok_s" and data["metric"]["unit"] == "tok/s"
    trial = data["trials"]["baseline"][0]
    runs = sqlite3.connect(db).execute(
        "select output_tokens, requested_tokens, e2e_tok_s, metric_value from runs where warmup = 0").fetchall()
    assert runs and all(out == req == 4 * 96 for out, req, _, _ in runs)  # four requests of 96 tokens per run
    assert all(value == pytest.approx(e2e) for _, _, e2e, value in runs)  # the run's value is its output throughput
    assert trial["value"] > 0


def test_a_probability_short_of_its_threshold_never_reads_as_reaching_it():
    from perfbisect.metrics import short_probability

    assert short_probability(0.985) == "0.98" and short_probability(0.9849, 3) == "0.984"
    assert short_probability(0.29) == "0.29" and short_probability(0.2) == "0.20"  # no float fuzz downwards
    assert short_probability(0.999999) == "0.99" and short_probability(1.0) == "1.00"
