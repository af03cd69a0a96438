"""Alembic, driven from code: the results schema is created and upgraded only by ``db/versions``.

No ``alembic.ini``: the script location comes from ``perfbisect.resources.data_dir("db")`` (a
checkout or an installed wheel) and the connection is handed to ``db/env.py`` through
``config.attributes["connection"]``.

Developers add a migration after changing ``schema.py`` with::

    python -m perfbisect.store.migrations revision "add trials.foo"

Alembic (and the models, which only autogenerate compares with) is imported only when a database is
not at head: a command that reads an up-to-date store (``perfbisect log``) reads the stamped revision
with one plain query and compares it with the head found by reading ``db/versions`` as text.
"""

from __future__ import annotations

import ast
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, create_engine, inspect, text

from ..errors import StoreError
from ..resources import data_dir

if TYPE_CHECKING:
    from alembic.config import Config


def alembic_config(connection: Connection | None = None) -> "Config":
    """An in-memory Alembic config pointing at perfbisect's db/ migrations."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(data_dir("db")))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The newest schema revision this perfbisect knows."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "db/versions has no migrations"
    return head


def plain_head_revision() -> str | None:
    """The head of ``db/versions`` read as text (each file's ``revision`` and ``down_revision``
    assignments), without Alembic; None when that reading is not certain (several heads, an
    unreadable file), and then the caller asks Alembic."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in sorted((data_dir("db") / "versions").glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            return None
        found: dict[str, object] = {}
        for node in tree.body:
            target = node.target if isinstance(node, ast.AnnAssign) else (
                node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
            if isinstance(target, ast.Name) and target.id in ("revision", "down_revision") and node.value is not None:
                try:
                    found[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    return None
        rev, down = found.get("revision"), found.get("down_revision")
        if not isinstance(rev, str):
            return None
        revisions.add(rev)
        parents.update([down] if isinstance(down, str) else list(down or ()))
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def stamped_revision(connection: Connection) -> str | None:
    """The one revision in ``alembic_version`` by a plain query; None for none, or for several
    (a branched history: Alembic then tells what it is)."""
    if not inspect(connection).has_table("alembic_version"):
        return None
    rows = connection.execute(text("SELECT version_num FROM alembic_version")).fetchall()
    return rows[0][0] if len(rows) == 1 else None


def current_revision(connection: Connection) -> str | None:
    """The schema revision stamped in the database (None for an empty file)."""
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


def upgrade_to_head(engine: Engine, db_path: object) -> tuple[str | None, str]:
    """Bring the database to the head revision; return (revision before, revision after).
    ``db_path`` (a path or a ``StoreLocation``) only names the database in messages.

    At head this only reads. Otherwise the upgrade runs in one write transaction. SQLite: with
    foreign keys off, because batch migrations drop and recreate tables, and with foreign keys on a
    DROP TABLE would first delete the rows that reference it (or refuse), which must never happen to
    results. PostgreSQL (transactional DDL, real ALTER TABLE): under an advisory transaction lock, so
    processes that open a new or old database at once migrate it one after the other.
    """
    plain_head = plain_head_revision()
    if plain_head is not None:
        with engine.connect() as conn:
            stamped = stamped_revision(conn)
            conn.rollback()
        if stamped == plain_head:  # the common case, read without importing Alembic
            return stamped, plain_head
    from alembic import command
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    head = script.get_current_head()
    assert head is not None, "db/versions has no migrations"
    known = {rev.revision for rev in script.walk_revisions()}
    with engine.connect() as conn:
        before = current_revision(conn)
        if conn.dialect.name == "sqlite":
            _check_known(conn, before, known, head, db_path)
        # (PostgreSQL: checked under the lock below only; reading the version, then the tables,
        # outside it can see another process's migration commit in between.)
        conn.rollback()
        if before == head:
            return before, head
        if conn.dialect.name != "sqlite":
            from .shared import MIGRATION_KEY

            with conn.begin():
                # Wait for another migrator however long its migration takes (not lock_timeout).
                conn.execute(text("SET LOCAL lock_timeout = 0"))
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_KEY})
                # Re-read under the lock: another process may have migrated meanwhile.
                before = current_revision(conn)
                _check_known(conn, before, known, head, db_path)
                if before != head:
                    command.upgrade(alembic_config(conn), "head")
            return before, head
        # PRAGMA foreign_keys is ignored inside a transaction: set it on the raw connection, which
        # (isolation_level None) is in autocommit between SQLAlchemy transactions.
        raw = conn.connection.dbapi_connection
        raw.execute("PRAGMA foreign_keys = OFF")
        try:
            with conn.execution_options(sqlite_begin="IMMEDIATE").begin():
                # Re-read under the write lock: another process may have migrated meanwhile.
                before = current_revision(conn)
                _check_known(conn, before, known, head, db_path)
                if before != head:
                    command.upgrade(alembic_config(conn), "head")
                broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise StoreError(
                        f"Upgrading the results database {db_path} to schema {head} left "
                        f"{len(broken)} rows pointing at missing rows ({broken[:3]}); nothing was "
                        "changed. Report this as a perfbisect bug and keep the file."
                    )
        finally:
            raw.execute("PRAGMA foreign_keys = ON")
    return before, head


def schema_diffs(engine: Engine) -> list:
    """Differences between the database's actual schema and what schema.py declares ([] = in sync)."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from .schema import Base

    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return compare_metadata(context, Base.metadata)


def _check_known(
    conn: Connection, revision: str | None, known: set[str], head: str | None, db_path: object
) -> None:
    if revision is None:
        tables = [t for t in inspect(conn).get_table_names() if not t.startswith("sqlite_")]
        if tables:
            if conn.dialect.name == "sqlite":
                raise StoreError(
                    f"{db_path} is a SQLite database but not a perfbisect results database (it has "
                    f"tables {', '.join(sorted(tables)[:5])} and no schema version). Point perfbisect at "
                    "another file (--db PATH) or move this one aside."
                )
            raise StoreError(
                f"The database {db_path} already holds other tables ({', '.join(sorted(tables)[:5])}) and no "
                "perfbisect schema version, so it is not a perfbisect results database. Create an empty "
                "database for perfbisect (`createdb perfbisect`) and point --db / [store] url at it."
            )
    elif revision not in known:
        raise StoreError(
            f"The results database {db_path} was written by a newer perfbisect (schema revision "
            f"{revision}; this version knows up to {head}). Upgrade perfbisect "
            "(pip install -U perfbisect), or use another database with --db PATH or --db URL."
        )


def make_revision(message: str) -> None:
    """Autogenerate a new migration in db/versions from the difference between head and schema.py."""
    from alembic import command

    versions = data_dir("db") / "versions"
    number = len(list(versions.glob("[0-9][0-9][0-9][0-9]_*.py"))) + 1
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_engine(f"sqlite:///{Path(tmp) / 'head.sqlite'}")
        with engine.begin() as conn:
            command.upgrade(alembic_config(conn), "head")
            command.revision(
                alembic_config(conn),
                message=message,
                autogenerate=True,
                rev_id=f"{number:04d}",
            )
        engine.dispose()


def main(argv: list[str]) -> int:
    """Developer entry point: ``revision MESSAGE``."""
    if len(argv) != 2 or argv[0] != "revision":
        sys.stderr.write('usage: python -m perfbisect.store.migrations revision "MESSAGE"\n')
        return 2
    make_revision(argv[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
