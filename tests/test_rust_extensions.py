"""SGLang's Rust extensions are built before the server starts, never inside it. The checkout here is shaped like
SGLang from 2026-08-16 on (a Cargo workspace under rust/, `sglang.srt.rust_extensions.loader` building a crate with
cargo unless its cache holds it, SGLANG_RUST_BUILD_MODE choosing), with a stand-in `cargo` on PATH that records
who ran it; the "server start" is the workload command, which loads the extension as SGLang's server does."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import sys
from pathlib import Path

import pytest

from tests.cli_runner import run_command
from tests.repo_factory import RepoFactory, target_table

# The loader's contract as SGLang's has it (python/sglang/srt/rust_extensions/loader.py at 67e12131df): a module in
# the cache under SGLANG_CACHE_DIR/rust_extensions, keyed by a digest of the sources; "never" refuses to build.
LOADER = '''
import hashlib, os, pathlib, subprocess, types

RUST = pathlib.Path(__file__).resolve().parents[4] / "rust"


def load_rust_extension(python_module, *, mode=None):
    mode = mode or os.environ.get("SGLANG_RUST_BUILD_MODE", "auto")
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(RUST.rglob("*.rs")))).hexdigest()[:16]
    root = pathlib.Path(os.environ.get("SGLANG_CACHE_DIR", pathlib.Path.home() / ".cache" / "sglang")) / "rust_extensions"
    artifact = root / "artifacts" / python_module / digest / "ext.so"
    if mode != "force" and artifact.is_file():
        return types.SimpleNamespace(path=str(artifact))
    if mode == "never":
        raise ModuleNotFoundError(f"{python_module} is not bundled or cached, and Rust extension build mode is 'never'")
    subprocess.run(["cargo", "build", "--release", "--locked"], cwd=RUST, check=True)
    artifact.parent.mkdir(parents=True, exist_ok=True)
    artifact.write_text(digest)
    return types.SimpleNamespace(path=str(artifact))
'''

CARGO_TOML = '[package]\nname = "sglang-radix"\nversion = "0.1.0"\n\n[package.metadata.sglang]\npython-module = "sglang.srt.rust_extensions._radix"\n'

# What the server's start does: load the radix-tree core (compiling it, were it allowed and missing).
SERVE = ("import json; from sglang.srt.rust_extensions.loader import load_rust_extension; "
         "load_rust_extension('sglang.srt.rust_extensions._radix'); print(json.dumps({'ops_per_s': 100.0}))")


@pytest.fixture
def cargo(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in cargo on PATH: records each run (who ran it: perfbisect's prebuild or the server) and succeeds."""
    bin_dir, log = tmp_path / "bin", tmp_path / "cargo.log"
    bin_dir.mkdir()
    script = bin_dir / "cargo"
    script.write_text(f"#!{sys.executable}\nimport os, sys\n"
                      "if sys.argv[1:] == ['--version']:\n    print('cargo 1.92.0 (stand-in)'); sys.exit(0)\n"
                      f"with open({str(log)!r}, 'a') as f:\n"
                      "    f.write(('prebuild' if os.environ.get('PERFBISECT_RUST_PREBUILD') else 'server') + ' ' + ' '.join(sys.argv[1:]) + '\\n')\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_dir, log


def _target(tmp_path: Path, rust_extensions: str) -> tuple[Path, list[str]]:
    r = RepoFactory(tmp_path / "sglang")
    files = {"python/sglang/__init__.py": "", "python/sglang/srt/__init__.py": "",
             "python/sglang/srt/rust_extensions/__init__.py": "", "python/sglang/srt/rust_extensions/loader.py": LOADER,
             "rust/Cargo.toml": '[workspace]\nmembers = ["sglang-radix"]\n', "rust/sglang-radix/Cargo.toml": CARGO_TOML,
             "rust/sglang-radix/src/lib.rs": "// radix tree v1\n"}
    shas = [r.commit("0.5.22-shaped", files)]
    shas.append(r.commit("radix: faster match", {"rust/sglang-radix/src/lib.rs": "// radix tree v2\n"}))
    cfg = tmp_path / "perfbisect.toml"
    cfg.write_text(f"""
{target_table(r.path, tmp_path / "cache")}
[environment]
rust_extensions = "{rust_extensions}"

[server.env]
SGLANG_CACHE_DIR = {json.dumps(str(tmp_path / "sglang-cache"))}
PYTHONPATH = "{{worktree}}/python"

[workload]
kind = "command"
command = ["{{python}}", "-c", {json.dumps(SERVE)}]
metric = "ops_per_s"
""")
    return cfg, shas


def test_the_extensions_are_built_before_the_server_which_never_compiles(tmp_path, cargo):
    bin_dir, log = cargo
    cfg, shas = _target(tmp_path, "prebuild")
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    db = tmp_path / "r.sqlite"
    for sha in (shas[0], shas[0], shas[1]):
        proc = run_command("measure", sha, "-n", "1", "-c", str(cfg), "--db", str(db), env=env)
        assert proc.returncode == 0, proc.stderr
    # cargo ran once per source state, always from perfbisect's step, never from a server start.
    assert log.read_text().splitlines() == ["prebuild build --release --locked"] * 2
    con = sqlite3.connect(db)
    rows = con.execute("select status, versions from trials order by id").fetchall()
    con.close()
    assert [s for s, _ in rows] == ["ok"] * 3
    assert {json.loads(v)["rust_extensions"] for _, v in rows} == {"prebuilt: sglang.srt.rust_extensions._radix"}


def test_left_to_the_server_it_compiles_at_start_and_never_builds_nothing(tmp_path, cargo):
    bin_dir, log = cargo
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    cfg, shas = _target(tmp_path, "server")
    assert run_command("measure", shas[0], "-n", "1", "-c", str(cfg), "--db", str(tmp_path / "a.sqlite"), env=env).returncode == 0
    assert log.read_text().splitlines() == ["server build --release --locked"]  # what prebuild keeps out of a trial
    cfg, shas = _target(tmp_path / "never", "never")
    proc = run_command("measure", shas[0], "-n", "1", "-c", str(cfg), "--db", str(tmp_path / "b.sqlite"), env=env)
    assert log.read_text().splitlines() == ["server build --release --locked"]  # nothing more ran cargo
    assert proc.returncode != 0 or "not bundled or cached" in proc.stderr


def test_a_build_that_fails_makes_the_commit_untestable_with_cargos_words(tmp_path, cargo):
    bin_dir, log = cargo
    (bin_dir / "cargo").write_text(f"#!{sys.executable}\nimport sys\nsys.stderr.write('error[E0425]: cannot find value `x`\\n')\nsys.exit(101)\n")
    cfg, shas = _target(tmp_path, "prebuild")
    db = tmp_path / "r.sqlite"
    proc = run_command("measure", shas[0], "-n", "1", "-c", str(cfg), "--db", str(db),
                       env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    con = sqlite3.connect(db)
    (status, error), = con.execute("select status, error from trials").fetchall()
    con.close()
    assert status == "skipped" and "Rust extensions did not build" in error and "E0425" in error, (proc.stderr, error)


def test_plan_warns_without_cargo_and_refuses_offline_with_it(tmp_path, cargo):
    bin_dir, _ = cargo
    cfg, shas = _target(tmp_path, "prebuild")
    bare = {"PATH": os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "cargo").exists())}
    plan = run_command("plan", f"good={shas[0]}", f"bad={shas[1]}", "-c", str(cfg), env=bare)
    assert plan.returncode == 0 and "cargo is not on PATH here" in plan.stdout, plan.stdout + plan.stderr
    cfg.write_text(cfg.read_text().replace('rust_extensions = "prebuild"', 'rust_extensions = "prebuild"\noffline = true'))
    with_cargo = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    plan = run_command("plan", f"good={shas[0]}", f"bad={shas[1]}", "-c", str(cfg), env=with_cargo)
    assert plan.returncode == 2 and "fetches crates from crates.io" in plan.stderr and 'rust_extensions = "never"' in plan.stderr
    run = run_command("run", f"good={shas[0]}", f"bad={shas[1]}", "-c", str(cfg), "--db", str(tmp_path / "r.sqlite"), env=with_cargo)
    assert run.returncode == 2 and "fetches crates from crates.io" in run.stderr
