"""Config parsing: valid files load, every mistake names the file and the key."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from perfbisect import config as config_module
from perfbisect.config import known_keys, load_config, parse_config
from perfbisect.placeholders import expand
from perfbisect.git.targets import active_filters
from perfbisect.settings import (
    SGLANG_IGNORE_PATHS,
    BuildConfig,
    FiltersConfig,
    LayoutConfig,
    ServerConfig,
    StatsConfig,
    TargetConfig,
    WorkloadConfig,
)
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
    assert active_filters(cfg).patterns == SGLANG_IGNORE_PATHS  # an SGLang target: SGLang's defaults apply
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
        (("runs = 5", "runs = -1"), "integer ≥ 0"),  # 0 is auto (run_allocation)
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


@pytest.mark.parametrize("args", ['"--speculative-algorithm EAGLE3"', '["--speculative-algorithm", "EAGLE3"]'])
def test_speculative_is_read_from_the_parsed_args_whatever_their_form(tmp_path, args):
    """`args` as a command string used to leave `speculative` False: it was guessed from the raw value."""
    cfg = load_config(write(tmp_path, MINIMAL.replace('args = ["--speculative-algorithm", "EAGLE3"]', f"args = {args}")))
    assert cfg.modes["eagle3"].args == ("--speculative-algorithm", "EAGLE3")
    assert cfg.modes["eagle3"].speculative and not cfg.modes["baseline"].speculative


def test_speculative_said_outright_wins_over_the_args(tmp_path):
    text = MINIMAL.replace('args = ["--speculative-algorithm", "EAGLE3"]', 'args = "--speculative-algorithm EAGLE3"\nspeculative = false')
    assert not load_config(write(tmp_path, text)).modes["eagle3"].speculative


def test_defaults_are_the_settings_defaults(tmp_path):
    """Keys left out of the file take the dataclass defaults; the parser writes none of its own."""
    cfg = parse_config({"server": {"command": ["x", "{port}"]}}, base_dir=tmp_path)
    assert cfg.stats == StatsConfig()
    assert cfg.workload == WorkloadConfig()
    assert cfg.build == BuildConfig()
    assert cfg.server == ServerConfig(command=("x", "{port}"))
    assert cfg.target == TargetConfig(repo=tmp_path.resolve())
    assert cfg.filters == FiltersConfig()


def test_known_keys_are_every_settings_field():
    keys = known_keys()
    assert len(keys) == len(set(keys))
    for key in ("target.repo", "patches.variants.alternatives", "build.steps.command", "build.cache_max_gb",
                "server.check_env", "modes.NAME.speculative", "workload.higher_is_better", "stats.second_change_z",
                "filters.ignore", "filters.use_defaults"):
        assert key in keys
    assert "path" not in keys and "modes.NAME.name" not in keys
    assert all(f"stats.{f.name}" in keys for f in dataclasses.fields(StatsConfig))
    # The parser's per-key rules name keys that exist.
    assert set(config_module._NUMBER_CHECKS) | set(config_module._CHOICES) <= set(keys)


def test_known_keys_are_the_keys_each_table_accepts(tmp_path):
    """Per table, known_keys() and the keys the parser reads (its unknown-key message lists them) agree."""
    keys = known_keys()
    tables = {k.rsplit(".", 1)[0] for k in keys}
    for table in sorted(tables):
        data: dict = {"server": {"command": ["x", "{port}"]}, "modes": {"m": {}},
                      "build": {"steps": [{"command": ["make"]}]},
                      "patches": {"variants": [{"patch": "a", "alternatives": ["b"]}]}}
        where = data
        for part in table.replace("NAME", "m").split("."):
            where = where.setdefault(part, {})
            where = where[0] if isinstance(where, list) else where
        where["zz"] = 1
        with pytest.raises(ConfigError, match="unknown key 'zz'") as err:
            parse_config(data, base_dir=tmp_path)
        listed = str(err.value).split("Known keys there: ")[1].split(". Remove")[0].split(", ")
        leaves = {k.rpartition(".")[2] for k in keys if k.rpartition(".")[0] == table}
        inner = {t.rpartition(".")[2] for t in tables if t.rpartition(".")[0] == table}
        assert sorted(listed) == sorted(leaves | inner), table


def test_layout_table_defaults_and_values(tmp_path):
    assert load_config(write(tmp_path, MINIMAL)).layout == LayoutConfig()
    cfg = load_config(write(tmp_path, MINIMAL + "\n[layout]\nrandomize = false\nenv_pad_max = 0\npath_slots = 8\nhash_seed = false\n"))
    assert cfg.layout == LayoutConfig(randomize=False, env_pad_max=0, path_slots=8, hash_seed=False)


@pytest.mark.parametrize(
    "table, needle",
    [
        ("path_slots = 0", "layout.path_slots' must be a positive number"),
        ("path_slots = 9", "layout.path_slots' must be between 1 and 8"),
        ("env_pad_max = -1", "layout.env_pad_max' must be an integer ≥ 0"),
        ("env_pad_max = 200000", "layout.env_pad_max' must be at most 65536 bytes"),
        ('randomize = "yes"', "layout.randomize' must be true or false"),
        ("hash_seed = 1", "layout.hash_seed' must be true or false"),
        ("path_slot = 2", "unknown key 'path_slot' in [layout]"),
    ],
)
def test_a_bad_layout_value_is_one_paragraph_naming_file_and_key(tmp_path, table, needle):
    path = write(tmp_path, MINIMAL + f"\n[layout]\n{table}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert needle in message and str(path) in message
    assert "\n" not in message.strip()  # one paragraph, as the CLI prints it


def test_environment_keys_load_with_paths_from_the_files_folder(tmp_path):
    cfg = load_config(write(tmp_path, MINIMAL + '\n[environment]\nrequirements = "python/pyproject.toml"\nextras = ["tracing"]\n'
                                                'find_links = ["wheels", "https://example.invalid/w/"]\n'
                                                'index_url = "https://pypi.example.invalid/simple"\nresolve_date = "2026-08-01"\n'))
    env = cfg.environment
    assert env.enabled and env.requirements == "python/pyproject.toml" and env.extras == ("tracing",)
    assert env.find_links == (str(tmp_path / "wheels"), "https://example.invalid/w/")  # a URL is left as it is
    assert env.index_url == "https://pypi.example.invalid/simple" and env.resolve_date == "2026-08-01"
    assert not load_config(write(tmp_path, MINIMAL)).environment.enabled  # no table: target.python as it is
    cfg = load_config(write(tmp_path, MINIMAL.replace("max_tokens = 2048", 'max_tokens = 2048\nclient_rev = "v0.5.0"')))
    assert cfg.workload.client_rev == "v0.5.0"
    # A key that is not a list of names is one paragraph naming it.
    with pytest.raises(ConfigError, match="environment.extras"):
        load_config(write(tmp_path, MINIMAL + "\n[environment]\nextras = 3\n"))


def test_the_sglang_template_resolves_each_commits_pyproject(tmp_path):
    from perfbisect.init_template import render_sglang_config

    cfg = load_config(write(tmp_path, render_sglang_config("python3", "/models/m", "/models/d")))
    assert cfg.environment.requirements == "python/pyproject.toml" and cfg.environment.resolve_date == "bad"
    assert cfg.environment.find_links == () and not cfg.environment.offline
    # The commented kernel step, uncommented, is a valid step keyed on whichever source directory exists.
    text = render_sglang_config("python3", "/models/m", "/models/d")
    start = text.index("# [[build.steps]]\n# name = \"kernel\"")
    block = text[start:text.index("\n\n", start)]
    uncommented = text.replace(block, "\n".join(line[2:] for line in block.splitlines()))
    kernel = next(s for s in load_config(write(tmp_path, uncommented)).build.steps if s.name == "kernel")
    assert kernel.sources == ("python/sglang/kernels/aot", "sgl-kernel") and kernel.artifacts == (".perfbisect/kernel-site",)


def test_the_older_name_of_tolerance_pct_still_loads_and_is_said_to_go_in_0_3(tmp_path):
    """stats.stop_when_ruled_out_pct is a compatibility key: it still sets the tolerance, and plan, run and doctor
    say it is removed in perfbisect 0.3 and what to write instead; a negative one is refused with the same news."""
    assert config_module.deprecations(load_config(write(tmp_path, MINIMAL))) == []
    cfg = load_config(write(tmp_path, MINIMAL + "\n[stats]\nstop_when_ruled_out_pct = 7\n"))
    assert cfg.stats.stop_when_ruled_out_pct == 7
    (said,) = config_module.deprecations(cfg)
    assert "stats.stop_when_ruled_out_pct" in said and "removed in perfbisect 0.3" in said
    assert "tolerance_pct = 7" in said and str(cfg.path) in said
    with pytest.raises(ConfigError, match="older name of stats.tolerance_pct, removed in perfbisect 0.3"):
        load_config(write(tmp_path, MINIMAL + "\n[stats]\nstop_when_ruled_out_pct = -1\n"))
