"""Pinned dependencies: each commit's pins read from git, one real venv per pin set built with real
pip or uv from real wheels, cached, and the user's interpreter left exactly as it was."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfbisect.demo.wheels import write_wheel
from perfbisect.measure.envs import EnvCache, pin_groups
from perfbisect.errors import EnvironmentBuildError
from perfbisect.git.gitrepo import TargetRepo
from perfbisect.git.pins import PinReader, PinSet, read_pins, wheel_problem
from tests.repo_factory import RepoFactory
from tests.cli_runner import run_command

PYPROJECT = """\
[project]
name = "sglang"
version = "0.5.0"
dependencies = ["requests", "Tiny_Kernel == {v}", "numpy>=1.26"]

[project.optional-dependencies]
srt = ["flashinfer_python==0.3.1 ; sys_platform == 'linux'", "torch==2.8.0"]
"""


def test_pins_come_from_dependency_lists_and_extras_normalized_and_only_for_named_packages():
    pins = read_pins({"python/pyproject.toml": PYPROJECT.format(v="1.0"), "missing.txt": None},
                     ["tiny-kernel", "flashinfer-python", "torch", "requests"])
    assert pins.as_dict() == {"flashinfer-python": "==0.3.1 ; sys_platform == 'linux'", "tiny-kernel": "==1.0",
                              "torch": "==2.8.0"}  # requests has no version: nothing to pin
    assert pins.requirements == ["flashinfer-python==0.3.1 ; sys_platform == 'linux'", "tiny-kernel==1.0", "torch==2.8.0"]
    assert read_pins({"requirements.txt": "# kernels\ntiny-kernel==2.0  # bumped\n-e .\n"}, ["tiny-kernel"]).requirements == ["tiny-kernel==2.0"]
    # The key is what is installed, not where it was declared.
    assert read_pins({"a/pyproject.toml": PYPROJECT.format(v="1.0")}, ["torch"]).key == \
        read_pins({"requirements.txt": "torch==2.8.0\n"}, ["torch"]).key
    assert read_pins({"p.toml": "not [valid"}, ["torch"]) == PinSet()


def _repo_with_a_pin_bump(tmp_path: Path) -> tuple[RepoFactory, list[str]]:
    r = RepoFactory(tmp_path / "target")
    shas = [r.commit("base", {"python/pyproject.toml": PYPROJECT.format(v="1.0"), "python/x.py": "a = 1\n"})]
    shas.append(r.commit("python change", {"python/x.py": "a = 2\n"}))
    shas.append(r.commit("bump tiny-kernel", {"python/pyproject.toml": PYPROJECT.format(v="2.0")}))
    shas.append(r.commit("another change", {"python/x.py": "a = 3\n"}))
    return r, shas


def test_a_range_is_grouped_by_pin_set_read_from_git_without_a_checkout(tmp_path):
    r, shas = _repo_with_a_pin_bump(tmp_path)
    repo = TargetRepo(r.path)
    reader = PinReader(repo, ("python/pyproject.toml",), ("tiny-kernel",))
    commits = repo.first_parent_range(shas[0], shas[-1])
    wheels = tmp_path / "wheels"
    write_wheel(wheels, "tiny-kernel", "1.0")
    groups = pin_groups(commits, reader, EnvCache(tmp_path / "envs", sys.executable), wheels, None)
    assert [g.commits for g in groups] == [tuple(shas[:2]), tuple(shas[2:])]
    assert [g.requirements for g in groups] == [("tiny-kernel==1.0",), ("tiny-kernel==2.0",)]
    assert groups[0].problem is None and not groups[0].built
    # No 2.0 wheel and no index: said before anything is built, with the fix.
    assert "no wheel for tiny-kernel==2.0 (it has 1.0)" in groups[1].problem and "index_url" in groups[1].problem
    assert wheel_problem(reader(shas[2]), wheels, "https://pypi.example.invalid/simple") is None


def _interpreter_with_pip() -> str | None:
    for python in (getattr(sys, "_base_executable", None), shutil.which("python3")):
        if python and subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode == 0:
            return python
    return None


def _state(python: str) -> tuple[list, list]:
    """What an interpreter has installed (pip's view) and the files of its site directories."""
    listed = subprocess.run([python, "-c", (
        "import json, sys\nfrom importlib import metadata\n"
        "print(json.dumps(sorted((d.metadata['Name'], d.version) for d in metadata.distributions())))"
    )], capture_output=True, text=True, check=True).stdout
    sites = json.loads(subprocess.run([python, "-c", "import json, site; print(json.dumps(site.getsitepackages()))"],
                                      capture_output=True, text=True, check=True).stdout)
    files = sorted(str(p) for d in sites for p in Path(d).rglob("*")
                   if "__pycache__" not in p.parts and p.is_file())
    return json.loads(listed), files


@pytest.mark.parametrize("installer", ["pip", "uv", "pip (ensurepip)"])
def test_one_environment_per_pin_set_with_real_installers_and_the_interpreter_untouched(tmp_path, installer, monkeypatch):
    python = _interpreter_with_pip() if installer == "pip" else sys.executable
    if installer == "pip" and python is None:
        pytest.skip("no interpreter with pip here")
    if installer != "pip" and subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode == 0:
        pytest.skip("this interpreter has pip, which is used before uv and ensurepip")
    if installer == "uv" and not (os.environ.get("UV") or shutil.which("uv")):
        pytest.skip("uv is not installed here")
    if installer == "pip (ensurepip)":  # no pip in the interpreter, no uv anywhere: the venv gets its own pip
        monkeypatch.delenv("UV", raising=False)
        monkeypatch.setenv("PATH", os.pathsep.join(d for d in ("/usr/bin", "/bin") if os.path.isdir(d)))
        if shutil.which("uv"):
            pytest.skip("uv is on the system PATH here")
    wheels = tmp_path / "wheels"
    for version in ("1.0", "2.0"):
        write_wheel(wheels, "tiny-kernel", version)
    before = _state(python)
    cache = EnvCache(tmp_path / "envs", python, wheels, None, log_dir=tmp_path / "logs")
    old, new = (read_pins({"requirements.txt": f"tiny-kernel=={v}\n"}, ["tiny-kernel"]) for v in ("1.0", "2.0"))
    built = [cache.ensure(old), cache.ensure(new)]
    assert [e.cached for e in built] == [False, False]
    assert built[0].installer.startswith(installer) and built[0].path != built[1].path
    for env, version in zip(built, ("1.0", "2.0")):
        seen = subprocess.run([env.python, "-c", "import tiny_kernel, json, sys; print(tiny_kernel.__version__); "
                               "import httpx" if python == sys.executable else "import tiny_kernel; print(tiny_kernel.__version__)"],
                              capture_output=True, text=True)
        assert seen.returncode == 0, seen.stderr  # the pinned package, and (layered) what the interpreter has
        assert seen.stdout.split()[0] == version
        assert env.versions == {"tiny-kernel": version}
    # The second time nothing is built: the same key is the same environment.
    marker = built[1].path / "env.json"
    stamp = marker.stat().st_mtime_ns
    again = EnvCache(tmp_path / "envs", python, wheels, None)
    assert again.ensure(new).cached and again.ensure(new).path == built[1].path
    assert marker.stat().st_mtime_ns == stamp and len(again.entries()) == 2
    # The user's interpreter: the same packages, the same files; the pinned package is not importable there.
    assert _state(python) == before
    assert subprocess.run([python, "-c", "import tiny_kernel"], capture_output=True).returncode != 0


def test_a_pin_that_cannot_be_installed_is_an_error_naming_it_and_is_not_retried(tmp_path):
    wheels = tmp_path / "wheels"
    write_wheel(wheels, "tiny-kernel", "1.0")
    cache = EnvCache(tmp_path / "envs", sys.executable, wheels, None, log_dir=tmp_path / "logs")
    missing = read_pins({"requirements.txt": "tiny-kernel==3.0\n"}, ["tiny-kernel"])
    with pytest.raises(EnvironmentBuildError) as err:
        cache.ensure(missing)
    text = str(err.value)
    assert "tiny-kernel==3.0" in text and "wheel_dir" in text and "never blamed" in text
    assert not cache.path(missing).exists() and cache.entries() == []  # nothing half-built left behind
    assert cache.failed(missing) == text
    with pytest.raises(EnvironmentBuildError):
        cache.ensure(missing)  # remembered: a pin set that failed is not installed again in this process


def test_a_patch_stack_that_bumps_a_pin_is_read_grouped_and_built_with_the_bumped_version(tmp_path):
    """The user's stack edits python/pyproject.toml (tiny-kernel 1.0 → 3.0): the pins are read from the
    file as the stack patches it, so the environment is the one the patched worktree declares."""
    from perfbisect.git.patches import PatchStack
    from perfbisect.settings import PatchesConfig

    r, shas = _repo_with_a_pin_bump(tmp_path)
    patches = tmp_path / "patches"
    r.make_patch(shas[0], {"python/pyproject.toml": PYPROJECT.format(v="3.0")}, patches, "bump tiny-kernel locally")
    r.make_patch(shas[0], {"python/y.py": "b = 1\n"}, patches, "an unrelated patch")
    r.make_patch(shas[0], {"python/y.py": "b = 1\n"}, tmp_path / "other", "an unrelated patch")
    repo = TargetRepo(r.path)
    stack = PatchStack.load(PatchesConfig(dir=patches), repo)
    reader = PinReader(repo, ("python/pyproject.toml",), ("tiny-kernel",), stack)
    commits = repo.first_parent_range(shas[0], shas[-1])
    # Where the stack applies (before the upstream bump) the patched pin; where it conflicts with the
    # upstream bump (1.0 → 2.0 against the patch's 1.0 → 3.0) the upstream one, and the commit is
    # untestable for the conflict, as before.
    assert [reader(c).requirements for c in commits] == [["tiny-kernel==3.0"]] * 2 + [["tiny-kernel==2.0"]] * 2
    assert [check.ok for check in stack.check_range(commits)] == [True, True, False, False]
    # Without the stack (or with a stack that touches no pin file) the upstream pins, as committed; and
    # as the checkout has them (`doctor --launch` starts the checkout as it is, unpatched).
    assert PinReader(repo, ("python/pyproject.toml",), ("tiny-kernel",))(shas[0]).requirements == ["tiny-kernel==1.0"]
    assert reader.upstream(shas[0]).requirements == ["tiny-kernel==1.0"]
    unrelated = PatchStack.load(PatchesConfig(dir=tmp_path / "other"), repo)
    assert PinReader(repo, ("python/pyproject.toml",), ("tiny-kernel",), unrelated).stack is None
    wheels = tmp_path / "wheels"
    for version in ("1.0", "3.0"):
        write_wheel(wheels, "tiny-kernel", version)
    cache = EnvCache(tmp_path / "envs", sys.executable, wheels, None, log_dir=tmp_path / "logs")
    groups = pin_groups(commits, reader, cache, wheels, None)
    assert [(g.requirements, g.commits) for g in groups] == [(("tiny-kernel==3.0",), tuple(shas[:2])),
                                                             (("tiny-kernel==2.0",), tuple(shas[2:]))]
    assert groups[0].problem is None
    env = cache.ensure(reader(commits[0]))
    assert env.versions == {"tiny-kernel": "3.0"}
    seen = subprocess.run([env.python, "-c", "import tiny_kernel; print(tiny_kernel.__version__)"],
                          capture_output=True, text=True)
    assert seen.returncode == 0 and seen.stdout.strip() == "3.0", seen.stderr


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_a_wheel_rebuilt_in_place_under_the_same_version_is_a_new_environment(tmp_path, installer):
    """The key hashes the bytes of the wheels it installs: the same file name with other bytes (a
    kernel rebuilt with a fix, same version) builds a new environment that has the new code (uv's
    cache, which knows a wheel by its name, is told to look again)."""
    python = _interpreter_with_pip() if installer == "pip" else sys.executable
    if python is None:
        pytest.skip("no interpreter with pip here")
    if installer == "uv" and subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode == 0:
        pytest.skip("this interpreter has pip, which is used before uv")
    if installer == "uv" and not (os.environ.get("UV") or shutil.which("uv")):
        pytest.skip("uv is not installed here")
    wheels = tmp_path / "wheels"
    write_wheel(wheels, "tiny-kernel", "1.0")
    write_wheel(wheels, "other-kernel", "1.0")  # not pinned here: its bytes are no part of the key
    cache = EnvCache(tmp_path / "envs", python, wheels, None, log_dir=tmp_path / "logs")
    pins = read_pins({"requirements.txt": "tiny-kernel==1.0\n"}, ["tiny-kernel"])
    first = cache.ensure(pins)
    assert first.installer == installer
    assert [name for name, _ in json.loads((first.path / "env.json").read_text())["wheels"]] == \
        ["tiny_kernel-1.0-py3-none-any.whl"]
    write_wheel(wheels, "other-kernel", "1.0", {"other_kernel/__init__.py": "changed = True\n"})
    assert cache.key(pins) == first.key and cache.ensure(pins).cached

    def key_in_a_new_process() -> str:  # no digest remembered in memory: the stored one, if still valid
        done = subprocess.run([sys.executable, "-c", (
            "import sys\nfrom perfbisect.measure.envs import EnvCache\nfrom perfbisect.git.pins import read_pins\n"
            "c = EnvCache(sys.argv[1], sys.argv[3], sys.argv[2], None)\n"
            "print(c.key(read_pins({'r.txt': 'tiny-kernel==1.0'}, ['tiny-kernel'])))"),
            str(tmp_path / "envs"), str(wheels), python], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert key_in_a_new_process() == first.key
    rebuilt = write_wheel(wheels, "tiny-kernel", "1.0", {"tiny_kernel/__init__.py": '__version__ = "1.0"\nREBUILT = "yes"\n'})
    assert rebuilt.name == "tiny_kernel-1.0-py3-none-any.whl"  # the same name, other bytes
    second = cache.ensure(pins)
    assert second.key != first.key and not second.cached and second.path != first.path
    seen = subprocess.run([second.python, "-c", "import tiny_kernel; print(tiny_kernel.REBUILT)"], capture_output=True, text=True)
    assert seen.returncode == 0 and seen.stdout.strip() == "yes", seen.stderr
    # A new process finds the rebuilt wheel's environment (the stored digest of the old bytes is not used),
    # and the stored digest is the sha256 of the file as it is now.
    assert key_in_a_new_process() == second.key
    stored = json.loads((tmp_path / "envs" / ".wheel-digests.json").read_text())[str(rebuilt.resolve())]
    assert stored["sha256"] == hashlib.sha256(rebuilt.read_bytes()).hexdigest()
    # A damaged digest file only costs a read of the wheel.
    (tmp_path / "envs" / ".wheel-digests.json").write_text("not json")
    assert key_in_a_new_process() == second.key


_HOLDER = """
import sys
from perfbisect.measure.envs import EnvCache
from perfbisect.git.pins import read_pins
cache = EnvCache(sys.argv[1], sys.argv[2], sys.argv[3], None)
env = cache.ensure(read_pins({"r.txt": "tiny-kernel==" + sys.argv[4]}, ["tiny-kernel"]))
print(env.key, flush=True)
sys.stdin.read()  # a running bisection: it holds the environment until it ends
"""


def test_environments_count_toward_cache_max_gb_and_are_evicted_lru_but_never_while_in_use(tmp_path):
    from perfbisect.measure.build import BuildCache

    wheels = tmp_path / "wheels"
    for version in ("1.0", "2.0", "3.0"):
        write_wheel(wheels, "tiny-kernel", version, {"tiny_kernel/__init__.py": f'__version__ = "{version}"\n' + "#" * 20000 + "\n"})
    envs_dir = tmp_path / "envs"
    pins = {v: read_pins({"requirements.txt": f"tiny-kernel=={v}\n"}, ["tiny-kernel"]) for v in ("1.0", "2.0", "3.0")}

    def caches(max_bytes: int) -> tuple[BuildCache, EnvCache]:
        build = BuildCache(tmp_path / "build-cache", max_bytes)
        envs = EnvCache(envs_dir, sys.executable, wheels, None, log_dir=tmp_path / "logs")
        build.share(envs)
        return build, envs

    # Measure one environment with no bound to speak of, then remove it.
    build, envs = caches(1 << 40)
    one = envs.ensure(pins["1.0"])
    size = envs.total_bytes()
    assert size > 20000 and json.loads((one.path / "env.json").read_text())["bytes"] == size
    envs.close()
    assert envs.remove(one.path) and envs.lru_entries() == []

    # A bound of about one and a half environments: a build artefact and environments share it.
    worktree = tmp_path / "wt"
    (worktree / "out").mkdir(parents=True)
    (worktree / "out" / "kernel.so").write_bytes(b"\0" * (size // 2))
    build, envs = caches(size * 3 // 2)
    artefact = build.put("k" * 16, worktree, ["out/kernel.so"], None, {})
    # Another process holds the 1.0 environment, as a running bisection does.
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(envs_dir), sys.executable, str(wheels), "1.0"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        held_key = holder.stdout.readline().strip()
        assert held_key == envs.key(pins["1.0"])
        # 2.0 is built: over the bound, the artefact (least recently used) goes; 1.0 is in use and stays.
        two = envs.ensure(pins["2.0"])
        assert not artefact.path.exists()
        assert envs.lookup(pins["1.0"]) is not None and envs.lookup(pins["2.0"]) is not None
        envs.close()  # this process is done with 2.0
        # 3.0 is built: 2.0 is the least recently used one no process holds: it goes; 1.0 still stays.
        three = envs.ensure(pins["3.0"])
        assert envs.lookup(pins["2.0"]) is None and not two.path.exists()
        assert envs.lookup(pins["1.0"]) is not None and three.path.exists()
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    # The bisection ended: the next eviction may remove 1.0 (the least recently used), never 3.0, in use here.
    assert build.evict() == [held_key]
    assert envs.lookup(pins["1.0"]) is None and envs.lookup(pins["3.0"]) is not None
    assert build.total_bytes() + envs.total_bytes() <= size * 3 // 2
    # A new process finds 3.0 in the cache (nothing half-removed is mistaken for built).
    assert EnvCache(envs_dir, sys.executable, wheels, None).ensure(pins["3.0"]).cached


def test_gc_build_cache_removes_the_environments_but_keeps_one_a_running_command_holds(tmp_path):
    from perfbisect.demo.target import make_demo_target

    target = make_demo_target(tmp_path / "demo", commits=4)
    envs_dir = target.root / "envs"  # the demo's cache_dir is its root
    pins = {v: read_pins({"requirements.txt": f"{name}=={v}\n"}, [name])  # the demo's kernel, before and after its rename
            for name, v in (("demo-kernel", "0.1.0"), ("demo-sglang-kernel", "0.2.0"))}
    cache = EnvCache(envs_dir, sys.executable, target.wheels, None)
    for p in pins.values():
        cache.ensure(p)
    cache.close()
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER.replace("tiny-kernel", "demo-sglang-kernel"), str(envs_dir),
                               sys.executable, str(target.wheels), "0.2.0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == cache.key(pins["0.2.0"])
        gc = run_command("gc", "--build-cache", "-c", str(target.config))
        assert gc.returncode == 0, gc.stderr
        assert "removed 1 pinned environment (" in gc.stdout and "1 in use by a running command kept" in gc.stdout, gc.stdout
        assert cache.lookup(pins["0.1.0"]) is None and cache.lookup(pins["0.2.0"]) is not None
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    gc = run_command("gc", "--build-cache", "-c", str(target.config))
    assert gc.returncode == 0 and "removed 1 pinned environment (" in gc.stdout and "kept" not in gc.stdout, gc.stdout
    assert cache.lru_entries() == []


def test_an_environment_is_built_with_no_pip_config_file_or_setting_read(tmp_path):
    """A pip.conf that says `target` or `prefix` (the user's ~/.config/pip/pip.conf, $PIP_CONFIG_FILE, or a
    PIP_* variable) used to send the pinned install into the user's own environment: the installer reads none."""
    python = _interpreter_with_pip()
    if python is None:
        pytest.skip("no interpreter with pip here")
    wheels = tmp_path / "wheels"
    write_wheel(wheels, "tiny-kernel", "1.0")
    home, leak_user, leak_env, leak_var = tmp_path / "home", tmp_path / "leak-user", tmp_path / "leak-env", tmp_path / "leak-var"
    (home / ".config" / "pip").mkdir(parents=True)
    (home / ".config" / "pip" / "pip.conf").write_text(f"[install]\ntarget = {leak_user}\n")
    env_conf = tmp_path / "env-pip.conf"
    env_conf.write_text(f"[install]\nprefix = {leak_env}\n[global]\nindex-url = http://127.0.0.1:9/simple\n")
    before = _state(python)
    saved = dict(os.environ)
    os.environ.update({"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")})
    try:
        # The user's pip really obeys that file: the same install by hand lands in the leak directory.
        by_hand = subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--find-links", str(wheels),
                                  "--disable-pip-version-check", "tiny-kernel==1.0"], capture_output=True, text=True)
        assert by_hand.returncode == 0 and (leak_user / "tiny_kernel").is_dir(), by_hand.stdout + by_hand.stderr
        shutil.rmtree(leak_user)
        os.environ.update({"PIP_CONFIG_FILE": str(env_conf), "PIP_TARGET": str(leak_var), "PIP_NO_INDEX": "0"})
        cache = EnvCache(tmp_path / "envs", python, wheels, None)
        assert cache.base.has_pip
        env = cache.ensure(read_pins({"requirements.txt": "tiny-kernel==1.0\n"}, ["tiny-kernel"]))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert env.installer == "pip"
    seen = subprocess.run([env.python, "-c", "import tiny_kernel; print(tiny_kernel.__file__)"], capture_output=True, text=True)
    assert seen.returncode == 0 and seen.stdout.strip().startswith(str(env.path)), seen.stdout + seen.stderr
    assert not leak_user.exists() and not leak_env.exists() and not leak_var.exists()
    assert _state(python) == before  # the user's interpreter: nothing added
