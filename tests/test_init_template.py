"""`perfbisect init`: templates that launch. The SGLang template's server command and env are checked
against the flags of current SGLang (tests/fixtures/sglang/flags.json, read from SGLang's source: see
its "source" entries), --trust-remote-code follows the model's own config, NCCL variables come from
what the user's environment really sets (the shell, a sitecustomize.py read without running it), and
each template loads and `plan`s against a repository shaped like its engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfbisect.config import load_config
from perfbisect.measure.external_workloads import bench_serving_argv, parse_bench_serving
from perfbisect.init_template import (
    nccl_settings, parse_sitecustomize, remote_code, render_sglang_config, site_dirs_of,
)
from perfbisect.metrics import BENCH_SERVING_DEFAULT
from perfbisect.settings import WorkloadConfig
from tests.cli_runner import run_command

FLAGS = json.loads((Path(__file__).parent / "fixtures" / "sglang" / "flags.json").read_text())
ROOT = Path(__file__).resolve().parent.parent
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def model_dir(tmp_path: Path, auto_map: bool) -> Path:
    d = tmp_path / ("kimi" if auto_map else "llama")
    d.mkdir()
    config = {"architectures": ["KimiK25ForConditionalGeneration" if auto_map else "LlamaForCausalLM"]}
    if auto_map:
        config["auto_map"] = {"AutoConfig": "configuration_kimi_k25.KimiK25Config"}
        (d / "tokenization_kimi.py").write_text("class TikTokenTokenizer: pass\n")
    (d / "config.json").write_text(json.dumps(config))
    return d


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "perfbisect.toml"
    path.write_text(text)
    return path


def flags_in(argv) -> list[str]:
    return [a for a in argv if a.startswith("--")]


def test_sglang_server_command_and_modes_use_flags_sglang_has(tmp_path):
    known = set(FLAGS["launch_server"]["flags"])
    model = model_dir(tmp_path, auto_map=True)
    cfg = load_config(write_config(tmp_path, render_sglang_config(sys.executable, str(model), "/m/eagle", environ={},
                                                                  site_dirs=[])))
    used = flags_in(cfg.server.command) + [f for m in cfg.modes.values() for f in flags_in(m.args)]
    assert used and set(used) <= known, sorted(set(used) - known)
    assert "--trust-remote-code" in cfg.server.command and "--tp-size" in cfg.server.command
    spec = cfg.modes["eagle3"].args
    assert spec[spec.index("--speculative-algorithm") + 1] in FLAGS["launch_server"]["speculative_algorithms"]
    assert spec[spec.index("--speculative-algorithm") + 1] == "EAGLE3" and cfg.modes["eagle3"].speculative
    assert cfg.server.ready_path == FLAGS["launch_server"]["ready_path"]
    assert cfg.server.env["PYTHONPATH"] == "{worktree}/python:{worktree}/.perfbisect/kernel-site"


def test_bench_serving_client_uses_options_and_keys_bench_serving_has(tmp_path):
    bench = FLAGS["bench_serving"]
    argv = bench_serving_argv("http://127.0.0.1:1234", WorkloadConfig(kind="bench_serving", metric=BENCH_SERVING_DEFAULT),
                              sys.executable, tmp_path, tmp_path / "out.jsonl")
    assert argv[1:3] == ["-m", "sglang.bench_serving"]
    used = set(flags_in(argv))
    assert used <= set(bench["options"]), sorted(used - set(bench["options"]))
    assert argv[argv.index("--backend") + 1] in bench["backends_include"]
    assert argv[argv.index("--dataset-name") + 1] in bench["datasets"]
    # Every key the client reads back is one bench_serving writes: a line with only those keys parses.
    line = {k: 1.5 for k in bench["output_keys"]}
    line["completed"] = 5
    run = parse_bench_serving(line, BENCH_SERVING_DEFAULT)
    assert run.error is None and run.metric_value == 1.5
    assert run.ttft_s == pytest.approx(0.0015) and run.itl_p50_ms == 1.5 and run.itl_p99_ms == 1.5
    assert run.spec_accept_length == 1.5 and run.output_tokens == 1 and run.prompt_tokens == 1


def test_trust_remote_code_follows_the_models_config(tmp_path):
    assert remote_code(str(model_dir(tmp_path, auto_map=True)))[0] is True
    plain = model_dir(tmp_path, auto_map=False)
    needed, why = remote_code(str(plain))
    assert needed is False and "no auto_map" in why
    needed, why = remote_code(str(tmp_path / "elsewhere"))
    assert needed is None and "not a directory on this machine" in why
    for model, on in ((plain, False), (tmp_path / "elsewhere", False)):
        text = render_sglang_config(sys.executable, str(model), "/m/eagle", environ={}, site_dirs=[])
        cfg = load_config(write_config(tmp_path, text))
        assert ("--trust-remote-code" in cfg.server.command) is on
        assert "--trust-remote-code" in text  # as a comment saying why not


SITECUSTOMIZE = '''\
import os
from pathlib import Path

Path(os.environ.get("MARKER", "/nonexistent/marker")).write_text("ran")  # proves it was executed
os.environ["NCCL_PROTO"] = "Simple"
os.environ.setdefault("NCCL_IB_HCA", "mlx5_0")
os.environ.update({"NCCL_BUFFSIZE": "8388608"})
TUNING = {"NCCL_MIN_NCHANNELS": 8, "NCCL_ALGO": "Tree"}
for k, v in TUNING.items():
    os.environ[k] = str(v)
os.environ["NCCL_DEBUG"] = os.environ.get("LEVEL", "WARN")  # an expression: not a value to copy
os.environ["OTHER"] = "not nccl"
'''


def test_nccl_variables_come_from_the_shell_and_sitecustomize_without_running_it(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    marker = tmp_path / "marker"
    environ = {"PYTHONPATH": str(site), "MARKER": str(marker), "NCCL_ALGO": "Ring", "NCCL_NTHREADS": "256"}
    dirs = site_dirs_of(sys.executable, environ)
    assert site in dirs
    found = {s.name: s for s in nccl_settings(environ, dirs)}
    assert not marker.exists()  # read, never imported or executed
    assert found["NCCL_PROTO"].value == "Simple" and found["NCCL_PROTO"].overrides_config
    assert found["NCCL_NTHREADS"].value == "256" and found["NCCL_NTHREADS"].source.startswith("your shell")
    # sitecustomize assigns NCCL_ALGO after the shell set it: its value is the one the server gets.
    assert found["NCCL_ALGO"].value == "Tree" and "sitecustomize.py:" in found["NCCL_ALGO"].source
    assert found["NCCL_IB_HCA"].value == "mlx5_0" and "setdefault" in found["NCCL_IB_HCA"].source
    assert found["NCCL_BUFFSIZE"].value == "8388608" and found["NCCL_MIN_NCHANNELS"].value == "8"
    assert "NCCL_DEBUG" not in found and "OTHER" not in found
    text = render_sglang_config(sys.executable, "/m/kimi", "/m/eagle", environ=environ, site_dirs=dirs)
    cfg = load_config(write_config(tmp_path, text))
    env = cfg.server.env
    assert {k: env[k] for k in found} == {k: s.value for k, s in found.items()}
    for name, setting in found.items():  # each line says where its value came from
        line = next(line for line in text.splitlines() if line.startswith(f"{name} = "))
        assert "# from " in line and (str(site) in line or "your shell" in line)
    assert not marker.exists()


def test_no_nccl_in_the_environment_writes_commented_examples_not_one_nodes_tuning(tmp_path):
    text = render_sglang_config(sys.executable, "/m/kimi", "/m/eagle", environ={}, site_dirs=[])
    cfg = load_config(write_config(tmp_path, text))
    assert not [k for k in cfg.server.env if k.startswith("NCCL_")]
    assert '# NCCL_PROTO = "LL"' in text and "No NCCL_* variable is set" in text
    assert "NCCL_NTHREADS" not in text


def test_parse_sitecustomize_ignores_what_it_cannot_read(tmp_path):
    bad = tmp_path / "sitecustomize.py"
    bad.write_text("this is not python (\n")
    assert parse_sitecustomize(bad) == []
    assert parse_sitecustomize(tmp_path / "missing.py") == []


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


def test_sglang_init_output_plans_against_an_sglang_shaped_repository(tmp_path):
    repo = tmp_path / "sglang"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_sglang_like_repo.py"), str(repo),
                    "--commits", "40", "--files", "300"], check=True, capture_output=True, timeout=300)
    _git(repo, "checkout", "-q", "main")
    model = model_dir(tmp_path, auto_map=True)
    proc = run_command("init", "--model", str(model), "--draft", "/m/eagle", "--python", sys.executable, cwd=repo,
               env={"NCCL_PROTO": "LL"})
    assert proc.returncode == 0, proc.stderr
    assert "--trust-remote-code" in proc.stdout and "NCCL_PROTO" in proc.stdout
    # The user's patch stack, as the template expects it: a local patch exported with format-patch.
    _git(repo, "checkout", "-q", "-b", "local")
    (repo / "python" / "sglang" / "local_patch.py").write_text("LOCAL = True\n")
    _git(repo, "add", "python/sglang/local_patch.py")
    _git(repo, "commit", "-qm", "local: a patch of ours")
    _git(repo, "format-patch", "-q", "-o", str(repo / "perfbisect-patches"), "main..local")
    _git(repo, "checkout", "-q", "main")
    cfg = load_config(repo / "perfbisect.toml")
    assert cfg.server.env["NCCL_PROTO"] == "LL" and "--trust-remote-code" in cfg.server.command
    plan = run_command("plan", "good=HEAD~30", "bad=HEAD", "--json", cwd=repo)
    assert plan.returncode == 0, plan.stderr
    data = json.loads(plan.stdout)
    entries = data["entries"] if isinstance(data, dict) else data
    assert len(entries) == 31 and any(e["measure"] for e in entries) and any(not e["measure"] for e in entries)


def test_vllm_init_builds_by_default_and_plans_against_a_vllm_shaped_repository(tmp_path):
    repo = tmp_path / "vllm"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    for rel, text in {"setup.py": "from setuptools import setup\nsetup()\n", "pyproject.toml": "[project]\nname = 'vllm'\n",
                      "CMakeLists.txt": "project(vllm)\n", "csrc/attention.cu": "// kernel\n",
                      "vllm/__init__.py": "", "vllm/engine.py": "STEP = 1\n", "docs/index.md": "# vLLM\n"}.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "import")
    for i in range(6):
        rel = ("vllm/engine.py", "docs/index.md", "csrc/attention.cu")[i % 3]
        (repo / rel).write_text((repo / rel).read_text() + f"# change {i}\n")
        _git(repo, "commit", "-qam", f"change {i}")
    proc = run_command("init", "--openai", "--model", "/m/llama", "--python", sys.executable, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    cfg = load_config(repo / "perfbisect.toml")
    steps = {s.name: s for s in cfg.build.steps}
    kernels = steps["vllm-kernels"]
    assert kernels.command[:2] == ("env", "VLLM_USE_PRECOMPILED=1") and "-e" in kernels.command
    # Installed into a venv of perfbisect's inside the worktree, never into target.python's environment.
    assert kernels.command[2] == "{worktree}/.perfbisect-build-venv/bin/python"
    assert "--system-site-packages" in steps["build-venv"].command and "vllm/**/*.so" in kernels.artifacts
    assert cfg.server.env["PYTHONPATH"] == "{worktree}"
    plan = run_command("plan", "good=HEAD~6", "bad=HEAD", "--json", cwd=repo)
    assert plan.returncode == 0, plan.stderr
