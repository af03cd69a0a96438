"""Config parsing: valid files load, every mistake names the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfbisect.config import load_config
from perfbisect.placeholders import expand
from perfbisect.settings import SGLANG_IGNORE_PATHS
from perfbisect.errors import ConfigError

MINIMAL = """
[target]
repo = "sglang"

[server]
command = ["{python}", "-m", "sglang.launch_server", "--port", "{port}", "--tp", "8"]

[server.env]
NCCL_PROTO = "LL"

[modes.baseline]

[modes.eagle3]
args = ["--speculative-algorithm", "EAGLE3"]

[workload]
max_tokens = 2048
warmup = 2
runs = 5
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "perfbisect.toml"
    path.write_text(text)
    return path


def test_minimal_config_loads_with_defaults(tmp_path):
    cfg = load_config(write(tmp_path, MINIMAL))
    assert cfg.target.repo == (tmp_path / "sglang").resolve()
    assert cfg.workload.max_tokens == 2048 and cfg.workload.runs == 5
    assert cfg.modes["eagle3"].speculative and not cfg.modes["baseline"].speculative
    assert cfg.filters.ignore == SGLANG_IGNORE_PATHS
    assert cfg.default_db == cfg.target.repo / ".git" / "perfbisect" / "results.sqlite"
    # A mode's identity changes with its args and with the server env.
    base, spec = cfg.modes["baseline"], cfg.modes["eagle3"]
    assert base.config_hash(cfg.server) != spec.config_hash(cfg.server)


def test_directory_path_finds_perfbisect_toml(tmp_path):
    write(tmp_path, MINIMAL)
    assert load_config(tmp_path).path == (tmp_path / "perfbisect.toml").resolve()


@pytest.mark.parametrize(
    "edit, needle",
    [
        (("runs = 5", "runs = \"five\""), "workload.runs' must be an integer"),
        (("warmup = 2", "warmpu = 2"), "unknown key 'warmpu' in [workload]"),
        (("[workload]", "[workload]\nkind = \"grpc\""), "workload.kind"),
        (("\"--port\", \"{port}\", ", ""), "{port}"),
        (("runs = 5", "runs = 0"), "positive"),
        (("[modes.baseline]", "[modes.baseline]\nenv = [1]"), "modes.baseline.env"),
    ],
)
def test_mistakes_name_file_and_key(tmp_path, edit, needle):
    path = write(tmp_path, MINIMAL.replace(*edit))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert needle in str(err.value)
    assert str(path) in str(err.value)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="No config file at .*perfbisect init"):
        load_config(tmp_path / "nope.toml")
    bad = write(tmp_path, "[target\nrepo = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_metric_needs_its_modes(tmp_path):
    path = write(tmp_path, MINIMAL + '\n[stats]\nmetric = "ratio:eagle3/turbo"\n')
    with pytest.raises(ConfigError, match="needs mode 'turbo'"):
        load_config(path)
    ok = load_config(write(tmp_path, MINIMAL + '\n[stats]\nmetric = "ratio:eagle3/baseline"\n'))
    assert ok.metric_modes == ("baseline", "eagle3")


@pytest.mark.parametrize("metric", ["ratio:eagle3", "ratio:/baseline", "ratio:eagle3/", "ratio:eagle3/eagle3", "ratio:a/b/c"])
def test_malformed_ratio_metric_is_a_config_error(tmp_path, metric):
    path = write(tmp_path, MINIMAL + f'\n[stats]\nmetric = "{metric}"\n')
    with pytest.raises(ConfigError, match="ratio:SPEC/BASE"):
        load_config(path)


def test_placeholders_are_filled_in_one_pass():
    """A value that itself contains a placeholder (a repository under /srv/{host}/) is not expanded again."""
    argv = expand(("{python}", "--dir", "{worktree}/x", "--host", "{host}", "{unknown}", "{{port}}"),
                  python="/srv/{host}/py", worktree="/w/{port}", host="127.0.0.1", port="80")
    assert argv == ["/srv/{host}/py", "--dir", "/w/{port}/x", "--host", "127.0.0.1", "{unknown}", "{80}"]


def test_string_commands_are_split_not_shelled(tmp_path):
    text = MINIMAL.replace(
        'command = ["{python}", "-m", "sglang.launch_server", "--port", "{port}", "--tp", "8"]',
        "command = \"{python} -m sglang.launch_server --port {port} --model-path 'my model; rm -rf /'\"",
    )
    cfg = load_config(write(tmp_path, text))
    argv = expand(cfg.server.command, python="py", port="1234")
    assert argv == ["py", "-m", "sglang.launch_server", "--port", "1234", "--model-path", "my model; rm -rf /"]


def test_demo_config_is_valid(tmp_path):
    from perfbisect.demo.target import make_demo_target

    target = make_demo_target(tmp_path / "demo", commits=10)
    cfg = load_config(target.config)
    assert cfg.stats.metric == "eagle3"
    assert cfg.server.env["NCCL_PROTO"] == "LL"
    assert target.planted and target.good != target.bad
