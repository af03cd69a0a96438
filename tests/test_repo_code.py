"""No repository code runs inside perfbisect's own git calls: a target whose core.fsmonitor and hooks record every
run (post-checkout, post-index-change, reference-transaction, pre-commit ...) through plan, patches check, measure,
a bisection and a patch carry — none of them runs; the trial's own workload (the config's word) still does."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

from tests.cli_runner import run_command
from tests.repo_factory import RepoFactory, target_table

HOOKS = ("post-checkout", "post-index-change", "reference-transaction", "pre-commit", "post-commit", "pre-applypatch",
         "post-applypatch", "post-rewrite", "pre-auto-gc")


def _recorder(path: Path, log: Path, what: str) -> None:
    path.write_text(f"#!/bin/sh\necho {what} >> {log}\ncat > /dev/null 2>&1 || true\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def test_fsmonitor_and_hooks_planted_in_the_target_never_run(tmp_path):
    r = RepoFactory(tmp_path / "target")
    shas = [r.commit("base", {"bench.py": "print('{\"ops_per_s\": 100}')\n", "lib.py": "x = 0\n"})]
    for i in range(1, 6):
        shas.append(r.commit(f"change {i}", {"lib.py": f"x = {i}\n"}))
    patches = tmp_path / "patches"
    r.make_patch(shas[0], {"bench.py": "print('{\"ops_per_s\": 100}')\n# local\n"}, patches, "local patch", name="0001-local.patch")
    log = tmp_path / "ran.log"
    hooks = Path(r.git("rev-parse", "--git-common-dir").strip())
    hooks = (r.path / hooks if not hooks.is_absolute() else hooks) / "hooks"
    hooks.mkdir(exist_ok=True)
    for name in HOOKS:
        _recorder(hooks / name, log, name)
    monitor = tmp_path / "fsmonitor.sh"
    _recorder(monitor, log, "fsmonitor")
    r.git("config", "core.fsmonitor", str(monitor))
    r.git("status")  # the plant works: git itself runs it
    assert "fsmonitor" in log.read_text()
    log.unlink()
    cfg = tmp_path / "perfbisect.toml"
    cfg.write_text(f"""
{target_table(r.path, tmp_path / "cache")}
[patches]
dir = "patches"

[workload]
kind = "command"
command = ["{{python}}", "bench.py"]
metric = "ops_per_s"

[stats]
max_trials_total = 6
""")
    c, db = str(cfg), str(tmp_path / "r.sqlite")
    for args in (("plan", f"good={shas[0]}", f"bad={shas[-1]}"), ("patches", "check", f"good={shas[0]}", f"bad={shas[-1]}"),
                 ("measure", shas[-1], "-n", "1"), ("run", f"good={shas[0]}", f"bad={shas[-1]}"),
                 ("patches", "carry", f"good={shas[0]}", f"bad={shas[-1]}"), ("gc",)):
        proc = run_command(*args, "-c", c, *(("--db", db) if args[0] in ("measure", "run", "plan") else ()), timeout=600)
        assert proc.returncode in (0, 3), (args, proc.stderr)
        assert not log.exists(), f"{args[0]} ran repository code: {log.read_text()}"
    # What the config runs (the trial's workload) did run: the bisection measured.
    import sqlite3

    con = sqlite3.connect(db)
    assert con.execute("select count(*) from trials where status = 'ok'").fetchone()[0] >= 3
    con.close()
