"""`perfbisect status` and `perfbisect log`, what a user types after every pull, import neither the
statistics (scipy, numpy) nor Alembic, nor the report's templates: the modules a real process loaded
are read back, not timed (benchmarks/cli_startup.py times them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from perfbisect.demo.target import make_demo_target
from perfbisect.store import open_store

NEVER = ("scipy", "numpy", "alembic", "jinja2")

PROBE = """
import json, sys
sys.argv = ["perfbisect", *json.loads(sys.argv[1])]
from perfbisect.cli.main import main
try:
    main()
    code = 0
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """A demo repository and config whose results database exists, at the schema's head."""
    target = make_demo_target(tmp_path_factory.mktemp("startup") / "demo", commits=10)
    from perfbisect.config import load_config

    with open_store(load_config(target.config).results_db):
        pass
    return target


def loaded(target, *args: str) -> tuple[int, set[str], str]:
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(list(args))], capture_output=True, text=True,
                          cwd=target.root, timeout=120, env={**os.environ, "COLUMNS": "200"})
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return data["code"], {m.split(".")[0] for m in data["modules"]}, proc.stdout


def test_status_reads_files_only(target):
    code, modules, out = loaded(target, "status", "-c", str(target.config))
    assert code == 0, out
    assert "no check running" in out
    assert sorted(modules & {*NEVER, "sqlalchemy", "git", "httpx"}) == []


def test_log_reads_the_store_without_the_engine_or_alembic(target):
    code, modules, out = loaded(target, "log", "-c", str(target.config))
    assert code == 0, out
    assert "no bisections or comparisons stored yet" in out
    assert "sqlalchemy" in modules  # it did read the database
    assert sorted(modules & {*NEVER, "git"}) == []


def test_an_old_database_is_still_migrated_on_the_log_path(tmp_path, target):
    """The plain read of the schema version must not skip a needed upgrade: a file at an older
    revision gets Alembic and ends at head."""
    import sqlite3

    from alembic import command
    from sqlalchemy import create_engine

    from perfbisect.store.migrations import alembic_config, head_revision, plain_head_revision

    assert plain_head_revision() == head_revision()
    db = tmp_path / "old.sqlite"
    engine = create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0003")
    engine.dispose()
    code, modules, out = loaded(target, "log", "--db", str(db))
    assert code == 0, out
    assert "alembic" in modules
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(head_revision(),)]
