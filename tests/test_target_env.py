"""perfbisect leaves the user's environment as it found it: the config `init` writes never installs
into the target interpreter, the server still imports the checkout under test, and `init` asks
which interpreter has sglang instead of writing its own.

Real parts: a real venv stands for the user's environment (with an "installed" sglang), a real git
checkout for SGLang, the build steps and a server session run as real subprocesses.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path


from perfbisect.measure.build import run_build
from perfbisect.config import load_config
from perfbisect.git.gitrepo import TargetRepo
from perfbisect.git.worktrees import WorktreePool
from perfbisect.init_template import render_sglang_config
from perfbisect.measure.server import ServerSession
from tests.repo_factory import RepoFactory

IMPORT_SGLANG = "import sglang, sys; print(sglang.WHERE, sglang.__file__)"


def _user_env(root: Path) -> str:
    """A venv whose site-packages holds the user's own sglang; returns its interpreter."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    python = str(root / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    pkg = Path(site) / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("WHERE = 'installed'\n")
    return python


def _imports(python: str, env: dict | None = None, cwd: Path | None = None) -> str:
    return subprocess.run([python, "-c", IMPORT_SGLANG], capture_output=True, text=True, check=True,
                          env=env, cwd=cwd).stdout.strip()


def test_init_config_never_repoints_the_users_import_and_serves_the_checkout(tmp_path):
    python = _user_env(tmp_path / "userenv")
    before = _imports(python, cwd=tmp_path)
    assert before.startswith("installed ")

    repo = RepoFactory(tmp_path / "sglang")
    sha = repo.commit("base", {"python/sglang/__init__.py": "WHERE = 'checkout'\n",
                               "python/pyproject.toml": "[project]\nname = 'sglang'\nversion = '0'\n"})
    config_path = tmp_path / "sglang" / "perfbisect.toml"
    config_path.write_text(render_sglang_config(python, "/models/m", "/models/d"))
    cfg = load_config(config_path)
    worktree = WorktreePool(TargetRepo(repo.path), tmp_path / "cache").checkout(sha)

    # The build steps `init` writes, for real, with the user's interpreter.
    run_build(cfg.build.steps, worktree, sha, "none", None, cfg.target.python, tmp_path / "logs")
    assert _imports(python, cwd=tmp_path) == before  # the user's `import sglang` is what it was

    # The server session (its env from the same config) imports the checkout under test.
    server = type(cfg.server)(**{**cfg.server.__dict__, "command": (
        "{python}", "-c", IMPORT_SGLANG.replace("print(", "print('SERVER', ") + "; import time; sys.stdout.flush(); time.sleep(60)",
        "{port}")})
    log = tmp_path / "server.log"
    with ServerSession(server, cfg.modes["baseline"], worktree, python, log) as session:
        import time

        deadline = time.monotonic() + 120
        while "\nSERVER " not in log.read_text() and session.alive():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        checks = session.check_env()
    line = next(l for l in log.read_text().splitlines() if l.startswith("SERVER"))
    assert line == f"SERVER checkout {worktree / 'python' / 'sglang' / '__init__.py'}"
    # The env check compares the filled-in value, so the placeholder does not read as a mismatch.
    assert checks and all(not c.mismatched for c in checks), checks
    assert _imports(python, cwd=tmp_path) == before


def _wrapper(bindir: Path, sglang_dir: Path | None) -> Path:
    """A `python` on PATH: the real interpreter, with a sglang importable or not."""
    bindir.mkdir(parents=True)
    script = bindir / "python"
    pythonpath = f"PYTHONPATH={sglang_dir} " if sglang_dir else "PYTHONPATH= "
    script.write_text(f"#!/bin/sh\n{pythonpath}exec {sys.executable} \"$@\"\n")
    script.chmod(0o755)
    return script


def _init(tmp_path: Path, path_dirs: list[Path]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join([*map(str, path_dirs), env.get("PATH", "")])
    return subprocess.run([sys.executable, "-m", "perfbisect.cli", "init", "--path", str(tmp_path / "p.toml")],
                          capture_output=True, text=True, timeout=120, env=env)


def test_init_writes_the_interpreter_that_imports_sglang(tmp_path):
    lib = tmp_path / "lib"
    (lib / "sglang").mkdir(parents=True)
    (lib / "sglang" / "__init__.py").write_text("")
    with_sglang = _wrapper(tmp_path / "with", lib)
    without = _wrapper(tmp_path / "without", None)
    proc = _init(tmp_path, [without.parent, with_sglang.parent])
    assert proc.returncode == 0, proc.stderr
    assert load_config(tmp_path / "p.toml").target.python == str(with_sglang)
    assert "warning" not in proc.stderr


def test_init_without_any_sglang_says_so_and_does_not_write_its_own_interpreter(tmp_path):
    without = _wrapper(tmp_path / "without", None)
    proc = _init(tmp_path, [without.parent])
    assert proc.returncode == 0, proc.stderr
    written = load_config(tmp_path / "p.toml").target.python
    assert written == str(without) and written != sys.executable
    assert "no interpreter that imports sglang" in " ".join(proc.stderr.split())


def test_an_env_gap_names_the_worker_by_the_end_of_its_command_line():
    """Workers of one server share the start of their command line; the end tells them apart."""
    from perfbisect.model import EnvCheck

    cmd = ("/opt/torch/.venv/bin/python3 /work/main/tools/gpu_target/tp_server.py --tp 2 --backend nccl "
           "--host 127.0.0.1 --port 39573 --drop-env NCCL_DEBUG --rank 1 --dist-port 43211")
    gap = EnvCheck(639, cmd, ("NCCL_DEBUG",)).gap()
    assert gap.startswith("pid 639 (/opt/torch/.venv/bin/python3") and "--rank 1 --dist-port 43211): NCCL_DEBUG" in gap
    assert EnvCheck(7, "python -m x", ("A",)).gap() == "pid 7 (python -m x): A"
