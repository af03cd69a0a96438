"""The SQLite file of the results database: where it is by default, and what is checked before it is used.

``default_db_path`` is ``<repo>/.git/perfbisect/results.sqlite``. ``check_file`` refuses, before
SQLAlchemy touches it, a directory, a file or directory that cannot be written (WAL writes beside the
file) and a file that is not SQLite; ``check_integrity`` runs SQLite's quick_check, so a damaged file
is refused before results are read from it or added to it.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from ..errors import StoreError, StoreWriteError
from .connections import DEFAULT_BUSY_TIMEOUT_S
from .faults import disk_fault, is_locked, locked_message, reason_of

DB_FILENAME = "results.sqlite"
_SQLITE_MAGIC = b"SQLite format 3\x00"


def default_db_path(repo: Path) -> Path:
    """``<repo>/.git/perfbisect/results.sqlite``, following the ``.git`` file of a worktree."""
    dot_git = Path(repo) / ".git"
    if dot_git.is_file():
        # A linked worktree or submodule: ".git" holds "gitdir: <path>".
        text = dot_git.read_text(encoding="utf-8", errors="replace").strip()
        if text.startswith("gitdir:"):
            target = Path(text[len("gitdir:") :].strip())
            dot_git = target if target.is_absolute() else (Path(repo) / target).resolve()
    return dot_git / "perfbisect" / DB_FILENAME


def check_integrity(engine: Engine, db_path: Path, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> None:
    """PRAGMA quick_check: a damaged file is refused before anything reads results from it or
    writes more into it (a bisection resumed on a torn page would replay wrong observations)."""
    if not db_path.is_file() or db_path.stat().st_size == 0:
        return
    try:
        with engine.connect() as conn:
            rows = [str(r[0]) for r in conn.exec_driver_sql("PRAGMA quick_check(5)").fetchall()]
            conn.rollback()
    except SQLAlchemyError as exc:
        if is_locked(reason_of(exc)):  # another process's lock says nothing about the file
            raise StoreWriteError(locked_message(db_path, reason_of(exc), busy_timeout_s)) from exc
        rows = [reason_of(exc)]
    full = disk_fault("; ".join(rows), db_path) if rows != ["ok"] else None
    if full:
        raise StoreWriteError(full)
    if rows != ["ok"]:
        raise StoreError(
            f"The results database {db_path} is damaged (SQLite quick_check: {'; '.join(rows)[:300]}). "
            f"perfbisect will not read or add results to it. Move it aside (perfbisect then starts a new "
            f"one), try `sqlite3 {db_path} .recover > recovered.sql` to save what is readable, or pass "
            f"another file with --db PATH."
        )


def _read_only_reason(path: Path) -> str | None:
    """Why ``path`` (a directory or a file) cannot be written, or None when it can."""
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "is on a read-only file system"
    except OSError:
        return None
    if not os.access(path, os.W_OK):
        return "is not writable by this user"
    return None


def check_file(db_path: Path, writable: bool = True) -> None:
    if db_path.is_dir():
        raise StoreError(
            f"The results database path {db_path} is a directory; pass a file path such as "
            f"{db_path / DB_FILENAME}."
        )
    if db_path.exists() and not db_path.is_file():  # /dev/null, a FIFO, a socket: SQLite would call it a failing disk
        raise StoreError(
            f"The results database path {db_path} is not a regular file (a device, a pipe or a socket), so no database "
            f"can live there. Pass a file path with --db PATH, such as {Path.cwd() / DB_FILENAME}."
        )
    if not writable:
        _check_header(db_path)
        return
    try:
        db_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"Cannot create the directory {db_path.parent} for the results database: "
            f"{exc.strerror or exc}. Choose a writable location with --db PATH."
        ) from exc
    # SQLite in WAL mode writes beside the file (-wal, -shm): the directory must be writable too.
    for path in (db_path, db_path.parent):
        why = _read_only_reason(path) if path.exists() else None
        if why:
            raise StoreError(
                f"The results database {db_path} cannot be written: {path} {why}. perfbisect stores "
                f"every run as it lands, so it needs a writable database: pass --db PATH on a writable "
                f"disk (copy the file there to keep its results)."
            )
    _check_header(db_path)


def _check_header(db_path: Path) -> None:
    if db_path.is_file():
        try:
            with db_path.open("rb") as fh:
                header = fh.read(len(_SQLITE_MAGIC))
        except OSError as exc:
            raise StoreError(
                f"Cannot read the results database {db_path}: {exc.strerror or exc}. Fix its "
                "permissions or pass another file with --db PATH."
            ) from exc
        # An empty file is what a crashed first open can leave: SQLite treats it as a new database.
        if header and header != _SQLITE_MAGIC:
            raise StoreError(
                f"{db_path} is not a SQLite database (it starts with {header[:8]!r}). perfbisect "
                "keeps its results there; move that file aside (perfbisect then starts a new "
                "database) or pass another path with --db PATH."
            )
