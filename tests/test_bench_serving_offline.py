"""SGLang's real ``sglang.bench_serving`` on a machine without internet.

The client is a release wheel of ``sglang`` from PyPI, installed with ``--no-deps`` as a client checkout's
``python/`` (where perfbisect puts a pinned client's source on ``PYTHONPATH``), and run through
``run_bench_serving`` with an interpreter of its own (a venv under ``~/.cache/perfbisect-test-wheels``, built
once, never the project's venv) against the demo emulator on 127.0.0.1. The client's network is closed:
every proxy variable names 127.0.0.1:9, where nothing listens, and no HF_HUB_OFFLINE is set by the test
(perfbisect sets it). Its tokenizer is a directory made on the fly with ``tokenizers``, served by the emulator
as its model path, so nothing is fetched from the hub.

Without PyPI (first run) the real-client tests are skipped with the reason; reruns use the cache.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfbisect.errors import InfrastructureError, WorkloadError
from perfbisect.measure.external_workloads import bench_serving_argv, network_failure, run_bench_serving
from perfbisect.settings import WorkloadConfig

# The newest release whose `python -m sglang.bench_serving` imports without the GPU stack: from 0.5.10 on,
# importing it pulls in sglang.srt.utils.common (torch, triton, torchvision, at module level), and 0.5.23's
# reaches apache-tvm-ffi as well. random-ids is in every release since 0.4.5.post1.
SGLANG_VERSION = "0.5.9"
# What 0.5.9's bench_serving and the sglang package's __init__ import at module level (transformers at
# sglang 0.5.9's own pin); their own dependencies come with them.
CLIENT_REQUIREMENTS = (
    "transformers==4.57.1", "aiohttp==3.14.5", "numpy==2.4.6", "requests==2.34.2", "tqdm==4.70.1",
    "pybase64==1.5.1", "datasets==5.0.1", "pillow==13.0.0", "ipython==9.18.1", "pydantic==2.14.4",
)
CACHE = Path(os.environ.get("PERFBISECT_TEST_WHEELS") or Path.home() / ".cache" / "perfbisect-test-wheels")
# What pip prints when it cannot reach the index.
_UNREACHABLE = ("Max retries exceeded", "NewConnectionError", "Temporary failure in name resolution",
                "Name or service not known", "Network is unreachable", "ProxyError", "Connection refused",
                "Read timed out", "connection timed out")
# Closed network for the client: only loopback, and nothing listens on port 9.
BLOCKED = "http://127.0.0.1:9"
NO_NETWORK = {
    **{name: BLOCKED for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy")},
    "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
}

TOKENIZER_SCRIPT = r'''
import json, sys
from pathlib import Path
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i + 3 for i in range(997)}}
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
tok.save(str(out / "tokenizer.json"))
(out / "tokenizer_config.json").write_text(json.dumps({
    "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>",
    "model_max_length": 131072}))
'''


def _pip(python: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=timeout)


def _download(python: Path, wheels: Path, *args: str) -> None:
    """Wheels into the cache (network: PyPI); skip when PyPI cannot be reached."""
    proc = _pip(python, "download", "--retries", "2", "--timeout", "30", "--dest", str(wheels), *args)
    if proc.returncode != 0:
        out = proc.stdout + proc.stderr
        if any(m in out for m in _UNREACHABLE):
            pytest.skip(f"PyPI is unreachable, so sglang=={SGLANG_VERSION}'s client cannot be installed "
                        f"(pip download {' '.join(args)}): {out.strip().splitlines()[-1]}")
        pytest.fail(f"pip download {' '.join(args)} failed:\n{out[-3000:]}")


def _install(python: Path, wheels: Path, *args: str) -> bool:
    """Install from the cached wheels only (no network)."""
    return _pip(python, "install", "--no-index", "--find-links", str(wheels), *args).returncode == 0


def build_client() -> tuple[Path, Path]:
    """(an interpreter that can run sglang==SGLANG_VERSION's bench_serving, a client checkout whose
    python/ holds that sglang), built once under CACHE and reused."""
    key = hashlib.sha256(json.dumps([SGLANG_VERSION, CLIENT_REQUIREMENTS, sys.version_info[:2]]).encode()).hexdigest()[:12]
    root = CACHE / f"sglang-{SGLANG_VERSION}-py{sys.version_info[0]}{sys.version_info[1]}-{key}"
    python, client, ready = root / "venv" / "bin" / "python", root / "client", root / "ready"
    wheels = CACHE / "wheels"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:  # other test runs on this machine build the same thing
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.exists():
            return python, client
        shutil.rmtree(root, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, capture_output=True)
        if not _install(python, wheels, *CLIENT_REQUIREMENTS):
            _download(python, wheels, *CLIENT_REQUIREMENTS)
            assert _install(python, wheels, *CLIENT_REQUIREMENTS), "installing the client's requirements failed"
        target = ["--no-deps", "--target", str(client / "python"), f"sglang=={SGLANG_VERSION}"]
        if not _install(python, wheels, *target):
            _download(python, wheels, "--no-deps", f"sglang=={SGLANG_VERSION}")
            assert _install(python, wheels, *target), f"installing sglang=={SGLANG_VERSION} failed"
        ready.write_text(f"sglang=={SGLANG_VERSION}\n" + "\n".join(CLIENT_REQUIREMENTS) + "\n")
    return python, client


@pytest.fixture(scope="module")
def real_client(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(python, client checkout, tokenizer directory)."""
    python, client = build_client()
    tokenizer = tmp_path_factory.mktemp("tokenizer") / "tok"
    subprocess.run([str(python), "-c", TOKENIZER_SCRIPT, str(tokenizer)], check=True, capture_output=True,
                   env={**os.environ, **NO_NETWORK})
    return python, client, tokenizer


@pytest.fixture
def offline(monkeypatch, tmp_path) -> dict[str, str]:
    """The client's env: no network, an empty Hugging Face cache, and no *_OFFLINE of the test's own
    (so what perfbisect sets is what the client gets)."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    return {**NO_NETWORK, "HF_HOME": str(tmp_path / "hf-home")}


def _cfg(**kw) -> WorkloadConfig:
    return WorkloadConfig(kind="bench_serving", metric="output_throughput", runs=3, warmup=1, max_tokens=32,
                          request_timeout_s=180.0, **kw)


@pytest.mark.slow
def test_the_real_client_measures_random_ids_with_no_network(real_client, offline, emulator_worktree,
                                                              start_emulator, tmp_path):
    python, client, tokenizer = real_client
    server = start_emulator(emulator_worktree(), "--model-path", str(tokenizer))
    log = tmp_path / "trial.log"
    [run] = run_bench_serving(server.base_url, _cfg(), client, str(python), offline, log)
    assert run.error is None and run.metric_value > 0, log.read_text()[-3000:]
    assert run.output_tokens == 3 * 32  # runs × concurrency requests of max_tokens, every one in full
    assert run.ttft_s > 0 and run.itl_p50_ms > 0
    result = json.loads(log.with_name("trial.bench_serving.jsonl").read_text().splitlines()[-1])
    assert result["dataset_name"] == "random-ids" and result["completed"] == 3
    assert "--dataset-name random-ids" in log.read_text()


@pytest.mark.slow
def test_a_dataset_path_is_sampled_with_no_network(real_client, offline, emulator_worktree, start_emulator, tmp_path):
    python, client, tokenizer = real_client
    dataset = tmp_path / "sharegpt.json"
    dataset.write_text(json.dumps([
        {"id": str(i), "conversations": [{"from": "human", "value": " ".join(f"w{(i * 7 + j) % 900}" for j in range(40))},
                                         {"from": "gpt", "value": "w1 w2 w3"}]}
        for i in range(8)
    ]))
    server = start_emulator(emulator_worktree(), "--model-path", str(tokenizer))
    log = tmp_path / "trial.log"
    [run] = run_bench_serving(server.base_url, _cfg(dataset_path=dataset), client, str(python), offline, log)
    assert run.error is None and run.metric_value > 0, log.read_text()[-3000:]
    result = json.loads(log.with_name("trial.bench_serving.jsonl").read_text().splitlines()[-1])
    assert result["dataset_name"] == "random" and result["completed"] == 3
    assert f"--dataset-name random --dataset-path {dataset}" in log.read_text()


@pytest.mark.slow
def test_random_without_a_dataset_path_offline_is_the_machines_failure(real_client, offline, emulator_worktree,
                                                                       start_emulator, tmp_path):
    """`--dataset-name random` downloads ShareGPT from the hub: with no network that is an
    InfrastructureError naming the fixes, never a WorkloadError that would skip the commit."""
    python, client, tokenizer = real_client
    server = start_emulator(emulator_worktree(), "--model-path", str(tokenizer))
    log = tmp_path / "trial.log"
    with pytest.raises(InfrastructureError) as info:
        run_bench_serving(server.base_url, _cfg(command=("--dataset-name", "random")), client, str(python), offline, log)
    assert not isinstance(info.value, WorkloadError)
    message = str(info.value)
    assert "\n" not in message
    assert "could not fetch its dataset" in message and "LocalEntryNotFoundError" in message
    for fix in ("--dataset-name random-ids", "workload.dataset_path", "Hugging Face cache", "HF_HUB_OFFLINE=1"):
        assert fix in message
    assert str(log) in message
    assert "LocalEntryNotFoundError" in log.read_text()


# -- the command line and the classification, without the wheel ------------------------------------


def test_the_dataset_flags_come_before_the_users_command(tmp_path):
    out = tmp_path / "o.jsonl"
    argv = bench_serving_argv("http://h:1/", _cfg(command=("--dataset-name", "sharegpt")), "py", tmp_path, out)
    at = argv.index("--dataset-name")
    assert argv[at + 1] == "random-ids" and argv[-2:] == ["--dataset-name", "sharegpt"]
    assert "--dataset-path" not in argv
    argv = bench_serving_argv("http://h:1", _cfg(dataset_path=tmp_path / "d.json"), "py", tmp_path, out)
    at = argv.index("--dataset-name")
    assert argv[at:at + 4] == ["--dataset-name", "random", "--dataset-path", str(tmp_path / "d.json")]
    for flag in ("--random-output-len", "--random-range-ratio", "--num-prompts"):  # what random-ids reads
        assert flag in argv


def test_the_dataset_is_part_of_the_workloads_identity(tmp_path):
    plain = WorkloadConfig(kind="bench_serving")
    assert plain.config_hash() != WorkloadConfig(kind="bench_serving", dataset_path=tmp_path / "d.json").config_hash()
    assert WorkloadConfig().config_hash() == "5e4dd7e702c4a922"  # other kinds keep their stored identity


def test_a_refused_server_is_not_the_network():
    refused = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
               "requests.exceptions.ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=30000): Max retries "
               "exceeded with url: /v1/models (Caused by NewConnectionError('Failed to establish a new connection: "
               "[Errno 111] Connection refused'))\n")
    assert network_failure(refused, "http://127.0.0.1:30000") is None
    hub = refused.replace("host='127.0.0.1', port=30000", "host='huggingface.co', port=443").replace(
        "requests.exceptions.ConnectionError", "requests.exceptions.ProxyError")
    why = network_failure(hub, "http://127.0.0.1:30000")
    assert why and why.startswith("requests.exceptions.ProxyError")
    # As huggingface_hub 0.36 re-raises it with HF_HUB_OFFLINE=0 behind a dead proxy (a repr inside a repr).
    proxied = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
               "requests.exceptions.ProxyError: (MaxRetryError('HTTPSConnectionPool(host=\\'huggingface.co\\', "
               "port=443): Max retries exceeded with url: /datasets/x/y.json (Caused by ProxyError(\\'Unable to "
               "connect to proxy\\', NewConnectionError(\"HTTPSConnection(host=\\'127.0.0.1\\', port=9): Failed to "
               "establish a new connection: [Errno 111] Connection refused\")))'), '(Request ID: 1)')\n")
    assert network_failure(proxied, "http://127.0.0.1:9") is not None


STAND_IN_CLIENT = '''
import argparse, json, os
p = argparse.ArgumentParser(); p.add_argument("--output-file"); p.add_argument("--num-prompts", type=int)
args, _ = p.parse_known_args()
with open(args.output_file, "a") as f:
    f.write(json.dumps({"completed": args.num_prompts, "output_throughput": 100.0, "total_output_tokens": 10,
                        "env": {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}}) + "\\n")
'''


@pytest.mark.parametrize("user, seen", [({}, {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}),
                                         ({"HF_HUB_OFFLINE": "0"}, {"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": None})])
def test_the_client_runs_offline_unless_its_env_says(tmp_path, monkeypatch, user, seen):
    """A STAND-IN client (not SGLang's) that records the two variables it was given."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "client/python/sglang").mkdir(parents=True)
    (tmp_path / "client/python/sglang/__init__.py").write_text("")
    (tmp_path / "client/python/sglang/bench_serving.py").write_text(STAND_IN_CLIENT)
    log = tmp_path / "t.log"
    run_bench_serving("http://127.0.0.1:9", _cfg(), tmp_path / "client", sys.executable, user, log)
    assert json.loads(log.with_name("t.bench_serving.jsonl").read_text())["env"] == seen


def test_a_dataset_path_that_is_not_a_file_is_the_configs_error(tmp_path):
    from perfbisect.errors import ConfigError

    with pytest.raises(ConfigError, match="workload.dataset_path"):
        run_bench_serving("http://127.0.0.1:9", _cfg(dataset_path=tmp_path / "missing.json"), tmp_path,
                          sys.executable, {}, tmp_path / "t.log")
