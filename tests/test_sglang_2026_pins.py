"""SGLang's pins as they moved from 0.4.6 to 2026: the kernel renamed (sgl-kernel → sglang-kernel at
0.5.10), flashinfer-cubin pinned beside flashinfer-python (0.5.6 on), the kernel sources moved
(sgl-kernel/ → python/sglang/kernels/aot/, 2026-07-28), and wheels whose own metadata pins what must
be installed with them. The pyproject files are SGLang's own, copied as data
(tests/fixtures/sglang/pyproject/SOURCES.md says from which commits)."""

from __future__ import annotations

import functools
import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from perfbisect.demo.wheels import write_wheel
from perfbisect.errors import EnvironmentBuildError
from perfbisect.git.pins import PinRules, read_pins, wheel_requirements
from perfbisect.measure.envs import EnvCache
from tests.cli_runner import run_cli
from tests.repo_factory import RepoFactory

FIXTURES = Path(__file__).parent / "fixtures" / "sglang" / "pyproject"
# Oldest first, each with the kernel sources where that release keeps them.
RELEASES = [("0.4.6", "sgl-kernel/csrc/moe.cu"), ("0.5.3", "sgl-kernel/csrc/moe.cu"), ("0.5.9", "sgl-kernel/csrc/moe.cu"),
            ("0.5.10", "sgl-kernel/csrc/moe.cu"), ("2026-08", "python/sglang/kernels/aot/csrc/moe.cu")]

# What each file pins of the kernel and flashinfer (read off the files by hand: the known answer).
EXPECTED = {
    "0.4.6": ("sgl-kernel==0.0.9.post2", ["flashinfer-python==0.2.3"], []),
    "0.5.3": ("sgl-kernel==0.3.14.post1", ["flashinfer-python==0.4.0rc3"], []),
    "0.5.9": ("sgl-kernel==0.3.21", ["flashinfer-python==0.6.3"], ["flashinfer-cubin==0.6.3"]),
    "0.5.10": ("sglang-kernel==0.4.1", ["flashinfer-python==0.6.7.post2"], ["flashinfer-cubin==0.6.7.post2"]),
    "2026-08": ("sglang-kernel==0.4.6.post1", ["flashinfer-python==0.6.17"], []),
}


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


def _config(tmp_path: Path, repo: Path, packages: list[str]) -> Path:
    path = tmp_path / "perfbisect.toml"
    path.write_text(f"""
[target]
repo = {json.dumps(str(repo))}
python = {json.dumps(sys.executable)}

[build]
pinned_packages = {json.dumps(packages)}
wheel_dir = {json.dumps(str(tmp_path / "wheels"))}

[[build.steps]]
name = "kernel"
sources = ["python/sglang/kernels/aot", "sgl-kernel"]
command = ["{{python}}", "-m", "pip", "install", "--isolated", "--no-deps", "-q", "--target", ".perfbisect/kernel-site", "{{source}}"]
artifacts = [".perfbisect/kernel-site"]

[server]
command = ["{{python}}", "-m", "sglang.launch_server", "--port", "{{port}}"]
""")
    (tmp_path / "wheels").mkdir(exist_ok=True)
    return path


def test_each_release_pins_its_kernel_under_either_name_with_flashinfer_cubin_beside_flashinfer():
    for label, (kernel, flashinfer, companions) in EXPECTED.items():
        text = (FIXTURES / f"{label}.toml").read_text()
        for configured in (["sglang-kernel", "flashinfer-python"], ["sgl-kernel", "flashinfer_python"]):
            pins = read_pins({"python/pyproject.toml": text}, configured)
            assert pins.kernel is not None and pins.kernel.requirement == kernel, label
            assert [p.requirement for p in pins.pins if p.name == "flashinfer-python"] == flashinfer, label
            assert [p.requirement for p in pins.companions] == companions, label
            assert all(p.companion_of == "flashinfer-python" for p in pins.companions) and not pins.problems
        # Naming only the old name used to find nothing from 0.5.10 on: the kernel ran on whatever was installed.
        assert read_pins({"python/pyproject.toml": text}, ["sgl-kernel"]).requirements == [kernel]


def test_plan_shows_the_kernel_companions_and_build_source_per_pin_set_of_real_sglang_releases(tmp_path):
    r, shas = _history(tmp_path)
    cfg = _config(tmp_path, r.path, ["sglang-kernel", "flashinfer-python"])
    done = run_cli("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(cfg), "--db", str(tmp_path / "r.db"),
                   "--no-patch-check", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    groups = data["pin_groups"]
    assert [g["kernel"] for g in groups] == [EXPECTED[label][0] for label, _ in RELEASES]
    assert [list(g["companions"]) for g in groups] == [EXPECTED[label][2] for label, _ in RELEASES]
    for g, (label, _) in zip(groups, RELEASES):
        kernel, flashinfer, companions = EXPECTED[label]
        assert sorted(g["requirements"]) == sorted([kernel, *flashinfer, *companions])
        assert g["problem"] and "no wheel for" in g["problem"]  # an empty wheel_dir: said ahead, per set
    (kernel_step,) = data["build_steps"]
    assert [(s["source"], len(s["commits"])) for s in kernel_step["spans"]] == [("sgl-kernel", 4),
                                                                                ("python/sglang/kernels/aot", 1)]
    assert kernel_step["cached"] is True

    text = run_cli("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(cfg), "--db", str(tmp_path / "r.db"),
                   "--no-patch-check").stdout
    assert "environments: 5 pin sets" in text
    assert f"{shas[3][:10]}  kernel sglang-kernel==0.4.1 · flashinfer-python==0.6.7.post2 · with flashinfer-cubin==0.6.7.post2" in text
    assert f"{shas[0][:10]}..{shas[3][:10]} (4 commits)  builds sgl-kernel/" in text
    assert f"{shas[4][:10]}  builds python/sglang/kernels/aot/" in text
    assert "pin-not-found" not in done.stdout

    # The old config (naming sgl-kernel) reads the same pin sets: the rename is followed.
    old = _config(tmp_path, r.path, ["sgl-kernel", "flashinfer-python"])
    again = json.loads(run_cli("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(old), "--db",
                               str(tmp_path / "r.db"), "--no-patch-check", "--json").stdout)
    assert [g["key"] for g in again["pin_groups"]] == [g["key"] for g in groups]


def test_a_pinned_package_no_commit_pins_is_a_plan_warning_naming_the_rename_fix(tmp_path):
    r, shas = _history(tmp_path)
    cfg = _config(tmp_path, r.path, ["sglang-kernel", "flashinfer-python", "deep-gemm"])
    data = json.loads(run_cli("plan", f"good={shas[0]}", f"bad={shas[-1]}", "-c", str(cfg), "--db",
                              str(tmp_path / "r.db"), "--no-patch-check", "--json").stdout)
    (warning,) = [w for w in data["warnings"] if w["kind"] == "pin-not-found"]
    assert "deep-gemm" in warning["message"] and "package_aliases" in warning["message"]


def test_a_companion_pinned_at_another_version_makes_its_pin_set_unbuildable_before_anything_is_installed(tmp_path):
    text = (FIXTURES / "0.5.9.toml").read_text().replace('"flashinfer_cubin==0.6.3"', '"flashinfer_cubin==0.6.2"')
    pins = read_pins({"python/pyproject.toml": text}, ["sglang-kernel", "flashinfer-python"])
    assert len(pins.problems) == 1 and "flashinfer-cubin==0.6.2 beside flashinfer-python==0.6.3" in pins.problems[0]
    cache = EnvCache(tmp_path / "envs", sys.executable, wheel_dir=tmp_path)
    with pytest.raises(EnvironmentBuildError, match="must be the same version"):
        cache.ensure(pins)
    assert not (tmp_path / "envs").exists() or not cache.entries()  # nothing was installed


def test_a_pinned_wheels_own_exact_requirements_travel_with_its_pin_set_and_are_installed(tmp_path):
    """torch pins its CUDA packages ==: with --no-deps they would be missing (or the user's other
    version would be seen). Read from the wheel's METADATA, installed beside it, checked after."""
    wheels = tmp_path / "wheels"
    write_wheel(wheels, "tiny-torch", "2.8.0", requires=("tiny-cublas==12.8.4 ; sys_platform == 'linux'",
                                                         "tiny-optional==1.0 ; extra == 'opt'", "filelock"))
    write_wheel(wheels, "tiny-cublas", "12.8.4")
    pins = read_pins({"requirements.txt": "tiny-torch==2.8.0\n"}, ["tiny-torch"])
    extra = wheel_requirements(pins, wheels)
    assert [(p.name, p.spec, p.companion_of) for p in extra] == [("tiny-cublas", "==12.8.4", "tiny-torch")]
    cache = EnvCache(tmp_path / "envs", sys.executable, wheel_dir=wheels)
    assert cache.complete(pins).requirements == ["tiny-cublas==12.8.4 ; sys_platform == 'linux'", "tiny-torch==2.8.0"]
    env = cache.ensure(pins)
    seen = subprocess.run([env.python, "-c", "from importlib import metadata; print(metadata.version('tiny-cublas'))"],
                          capture_output=True, text=True)
    assert seen.stdout.strip() == "12.8.4", seen.stderr

    # Without the companion's wheel anywhere, the set is unbuildable, said before installing.
    (wheels / "tiny_cublas-12.8.4-py3-none-any.whl").unlink()
    lonely = EnvCache(tmp_path / "envs2", sys.executable, wheel_dir=wheels)
    problem = lonely.problem(pins)
    assert problem and "tiny-torch needs tiny-cublas==12.8.4" in problem and "wheel_dir" in problem


def test_an_index_install_gets_the_wheels_exact_requirements_and_a_missing_one_is_refused(tmp_path):
    """From an index, a wheel's metadata is only known once installed: the environment installs what
    it asks for exactly, and refuses the set when that cannot be had (SGLang's own check would not)."""
    simple = tmp_path / "simple"
    for name, version, requires in (("tiny-torch", "2.8.0", ("tiny-cublas==12.8.4",)), ("tiny-cublas", "12.8.4", ()),
                                    ("lonely-kernel", "1.0", ("tiny-absent==9.9",))):
        write_wheel(simple / name, name, version, requires=requires)
    # A real package index on loopback: a directory listing per project is a PEP 503 page.
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        cache = EnvCache(tmp_path / "envs", sys.executable, index_url=f"http://127.0.0.1:{server.server_port}/simple/")
        pins = read_pins({"requirements.txt": "tiny-torch==2.8.0\n"}, ["tiny-torch"])
        env = cache.ensure(pins)
        seen = subprocess.run([env.python, "-c", "from importlib import metadata; print(metadata.version('tiny-cublas'))"],
                              capture_output=True, text=True)
        assert seen.stdout.strip() == "12.8.4", seen.stderr
        lonely = read_pins({"requirements.txt": "lonely-kernel==1.0\n"}, ["lonely-kernel"])
        with pytest.raises(EnvironmentBuildError) as err:
            cache.ensure(lonely)
        assert "tiny-absent" in str(err.value)
    finally:
        server.shutdown()
        server.server_close()
