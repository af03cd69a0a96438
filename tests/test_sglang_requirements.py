"""SGLang's own python/pyproject.toml files (tests/fixtures/sglang/pyproject/SOURCES.md says from which commits)
resolved by uv as perfbisect resolves a commit: dynamic version, static dependencies, [tool.uv] indexes and
sources, the kernel renamed (sgl-kernel → sglang-kernel at 0.5.10), the kernel sources moved (2026-07-28).
No network: every dependency is a stub wheel written here at the version the file asks for."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from packaging.requirements import Requirement

from perfbisect.demo.wheels import write_wheel
from perfbisect.git.requirements import read_requirements
from perfbisect.measure.environments import is_compiled
from tests.cli_runner import run_cli
from tests.repo_factory import RepoFactory, target_table

FIXTURES = Path(__file__).parent / "fixtures" / "sglang" / "pyproject"
# Oldest first, each with the kernel sources where that release keeps them.
RELEASES = [("0.5.9", "sgl-kernel/csrc/moe.cu"), ("0.5.10", "sgl-kernel/csrc/moe.cu"),
            ("2026-08", "python/sglang/kernels/aot/csrc/moe.cu")]
# What each file pins of the kernel, flashinfer and torch (read off the files by hand: the known answer).
EXPECTED = {
    "0.5.9": {"sgl-kernel": "0.3.21", "flashinfer-python": "0.6.3", "flashinfer-cubin": "0.6.3", "torch": "2.9.1"},
    "0.5.10": {"sglang-kernel": "0.4.1", "flashinfer-python": "0.6.7.post2", "flashinfer-cubin": "0.6.7.post2",
               "torch": "2.9.1"},
    "2026-08": {"sglang-kernel": "0.4.6.post1", "flashinfer-python": "0.6.17", "torch": "2.13.0"},
}


def stub_wheelhouse(where: Path) -> Path:
    """A wheel of every package the releases depend on, at the version each asks for (its == or >= bound)."""
    for label, _ in RELEASES:
        reqs = read_requirements("python/pyproject.toml", (FIXTURES / f"{label}.toml").read_text())
        for text in reqs.dependencies():
            req = Requirement(text)
            ops = {s.operator: s.version for s in req.specifier}
            version = ops.get("==") or ops.get("===") or ops.get(">=") or ops.get("~=") or "1.0"
            write_wheel(where, req.name, version, extras=tuple(req.extras))
    return where


def _history(tmp_path: Path) -> tuple[RepoFactory, list[str]]:
    r = RepoFactory(tmp_path / "sglang")
    shas, previous = [], None
    for label, kernel_src in RELEASES:
        files = {"python/pyproject.toml": (FIXTURES / f"{label}.toml").read_text(), kernel_src: f"// {label}\n",
                 "python/sglang/version.py": f'__version__ = "{label}"\n'}
        if previous and previous != kernel_src:
            files[previous] = None  # the kernels moved
        shas.append(r.commit(f"Release {label}", files))
        previous = kernel_src
    return r, shas


def _config(tmp_path: Path, repo: Path, wheels: Path) -> Path:
    path = tmp_path / "perfbisect.toml"
    path.write_text(f"""
{target_table(repo, tmp_path / "cache")}
[environment]
requirements = "python/pyproject.toml"
extras = ["srt"]   # SGLang's extra up to 0.5.x, gone by 2026: left out where a commit lacks it
find_links = [{json.dumps(str(wheels))}]
no_index = true
offline = true
no_sources = true  # SGLang's [tool.uv] sends torch to its own index; the wheelhouse replaces it

[[build.steps]]
name = "kernel"
sources = ["python/sglang/kernels/aot", "sgl-kernel"]
command = ["uv", "pip", "install", "--python", "{{python}}", "--no-deps", "-q", "--target", ".perfbisect/kernel-site", "{{source}}"]
artifacts = [".perfbisect/kernel-site"]

[server]
command = ["{{python}}", "-m", "sglang.launch_server", "--port", "{{port}}"]
""")
    return path


def test_each_release_file_is_read_as_uv_reads_it():
    for label, expected in EXPECTED.items():
        reqs = read_requirements("python/pyproject.toml", (FIXTURES / f"{label}.toml").read_text(), ["srt"])
        assert reqs.problem is None and reqs.requires_python == ">=3.10", label  # version dynamic, dependencies static
        assert reqs.missing_extras == ("srt",)  # none of the 2026 files has it
        pinned = {Requirement(d).name.replace("_", "-").lower(): str(Requirement(d).specifier) for d in reqs.dependencies()}
        for name, version in expected.items():
            assert pinned.get(name) == f"=={version}", (label, name, pinned.get(name))


def test_plan_resolves_real_sglang_releases_into_one_environment_each_and_names_what_moved(tmp_path):
    r, shas = _history(tmp_path)
    cfg = _config(tmp_path, r.path, stub_wheelhouse(tmp_path / "wheels"))
    done = run_cli("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(cfg), "--db", str(tmp_path / "r.db"),
                   "--no-patch-check", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    groups = data["environments"]
    assert [g["commits"] for g in groups] == [[s] for s in shas] and all(g["problem"] is None for g in groups)
    for g, (label, _) in zip(groups, RELEASES):
        assert {k: g["packages"].get(k) for k in EXPECTED[label]} == EXPECTED[label], label
        assert "sglang" not in g["packages"]  # the checkout is the server's, from the worktree
    moved = {m["name"]: (m["old"], m["new"]) for m in groups[1]["moves"]}
    assert moved["sgl-kernel"] == ("0.3.21", None) and moved["sglang-kernel"] == (None, "0.4.1")
    assert moved["flashinfer-python"] == ("0.6.3", "0.6.7.post2")
    names = [m["name"] for m in groups[2]["moves"]]
    assert names[:4] == ["torch", "transformers", "flashinfer-python", "sglang-kernel"]  # what a reader looks for first
    flags = [is_compiled(n) for n in names[4:]]
    assert flags == sorted(flags, reverse=True)  # then other compiled packages, then the rest
    (kernel_step,) = data["build_steps"]
    assert [(s["source"], len(s["commits"])) for s in kernel_step["spans"]] == [("sgl-kernel", 2),
                                                                                ("python/sglang/kernels/aot", 1)]
    text = run_cli("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(cfg), "--db", str(tmp_path / "r.db"),
                   "--no-patch-check").stdout
    assert "environments: 3 for 3 stretches of commits (python/pyproject.toml resolved by uv as of the bad endpoint's commit date" in text
    assert f"{shas[1][:10]}  " in text and "torch==2.9.1" in text and "sglang-kernel==0.4.1" in text
    assert f"at {shas[2][:10]} Release 2026-08: " in text and "torch 2.9.1 → 2.13.0" in text


def test_prepare_installs_every_release_environment_verified_against_its_lock(tmp_path):
    r, shas = _history(tmp_path)
    cfg = _config(tmp_path, r.path, stub_wheelhouse(tmp_path / "wheels"))
    done = run_cli("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(cfg), "--db", str(tmp_path / "r.db"),
                   "--no-patch-check", "--prepare", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [p["outcome"].split(" in ")[0] for p in data["prepared"]] == ["built"] * 3
    markers = [json.loads(p.read_text()) for p in (tmp_path / "cache" / "envs").glob("*/env.json")]
    assert sorted(m["packages"].get("torch") for m in markers) == ["2.13.0", "2.9.1", "2.9.1"]
    assert sorted(len(m["packages"]) for m in markers) == sorted(len(g["packages"]) for g in data["environments"])
