"""Where the results live: a SQLite file (the embedded default) or a PostgreSQL server (shared).

``locate(value)`` reads what ``--db`` or ``[store] url`` gave: a plain path, a ``sqlite:///path`` URL
or a ``postgresql+psycopg://user@host:port/db`` URL. A ``StoreLocation`` prints (``str``) with any
password masked, so it can go into every message, report and suggested command line as it is.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import URL, make_url
from sqlalchemy.exc import ArgumentError

from ..errors import StoreError, mask_secrets, url_userinfo

PG_DRIVER = "postgresql+psycopg"
_PG_NAMES = {"postgresql", "postgres", "postgresql+psycopg"}
mask = mask_secrets  # ``mask(text, *secrets)``: URL passwords (and ``secrets``) as ``***``


@dataclass(frozen=True)
class StoreLocation:
    """A results database: ``path`` for a SQLite file, else a server ``url`` (``shared``)."""

    url: URL
    path: Path | None = None

    @property
    def shared(self) -> bool:
        """A database server that several processes and nodes use at once (PostgreSQL)."""
        return self.path is None

    @property
    def password(self) -> str | None:
        return self.url.password or self.url.query.get("password")  # type: ignore[return-value]

    def secret(self) -> str:
        """The location with its password, for handing to a job through its environment; never print it."""
        return str(self.path) if self.path is not None else self.url.render_as_string(hide_password=False)

    def __str__(self) -> str:
        if self.path is not None:
            return str(self.path)
        return mask(self.url.render_as_string(hide_password=True), self.password)

    def __fspath__(self) -> str:
        """A SQLite location is usable as its file path (``sqlite3.connect(store.path)``)."""
        if self.path is None:
            raise TypeError(f"the results database {self} is a server, not a file")
        return str(self.path)

    def exists(self) -> bool:
        """Whether there can be results there already (a server: always; a file: when it is one)."""
        return self.path is None or self.path.is_file()

    @property
    def report_prefix(self) -> str:
        """What a default report's file name starts with, so two databases whose reports share a folder
        never overwrite each other's ``bisection-1.html``: the SQLite file's stem ("results-"), for a
        server its database name and a short hash of its address without the password ("perf-3fa9c2d1-")."""
        if self.path is not None:
            stem = self.path.stem
        else:
            digest = hashlib.sha256(self.url.render_as_string(hide_password=True).encode()).hexdigest()[:8]
            stem = f"{self.url.database or 'db'}-{digest}"
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", stem).strip("._") + "-"

    def reports_dir(self, cache_dir: Path | None = None) -> Path:
        """Where reports go by default: beside a SQLite file; for a server, under the cache directory
        (``<cache_dir>/reports``), else ``./perfbisect-reports``."""
        if self.path is not None:
            return self.path.parent / "reports"
        if cache_dir is not None:
            return Path(cache_dir).expanduser().absolute() / "reports"
        return Path.cwd() / "perfbisect-reports"


def sqlite_location(path: Path | str) -> StoreLocation:
    path = Path(path).expanduser().absolute()
    return StoreLocation(URL.create("sqlite", database=str(path)), path)


def locate(value: "StoreLocation | Path | str") -> StoreLocation:
    """What ``--db`` / ``[store] url`` names, checked: a path, ``sqlite:///path`` or a PostgreSQL URL."""
    if isinstance(value, StoreLocation):
        return value
    if isinstance(value, Path) or "://" not in str(value):
        return sqlite_location(value)
    text = str(value).strip()
    userinfo = url_userinfo(text)[0].partition("://")[2]
    if userinfo.count("@") > 1:
        # make_url and the resolver would split it at the first '@': part of the password would be
        # printed as the host and sent to DNS. Refused before any connection is tried.
        raise StoreError(
            f"The results database URL {mask(text)!r} has more than one '@' before its host, so where the "
            f"password ends and the host begins is ambiguous; perfbisect connected to nothing. Write an '@' "
            f"inside the user name or password as %40 (postgresql+psycopg://USER:pa%40ss@HOST:PORT/DATABASE), "
            f"or better keep the password in PGPASSWORD or ~/.pgpass."
        )
    try:
        url = make_url(text)
    except (ArgumentError, ValueError) as exc:
        raise StoreError(
            f"Cannot read the results database URL {mask(text)!r}: {mask(str(exc))}. Write it as "
            f"postgresql+psycopg://USER@HOST:PORT/DATABASE (a password is better kept in PGPASSWORD or "
            f"~/.pgpass than in the URL), sqlite:///PATH, or give a plain file path."
        ) from None
    backend, _, driver = url.drivername.partition("+")
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            raise StoreError(
                f"The results database URL {mask(text)!r} names no file (an in-memory SQLite database would "
                "lose every result when perfbisect exits). Write sqlite:///PATH, or give a plain file path."
            )
        return sqlite_location(url.database)
    if url.drivername in _PG_NAMES:
        url = url.set(drivername=PG_DRIVER)
        if not url.database:
            raise StoreError(
                f"The results database URL {mask(text)!r} names no database. Add it after the host: "
                f"postgresql+psycopg://USER@HOST:PORT/DATABASE (create it once with `createdb DATABASE`)."
            )
        return StoreLocation(url)
    if backend in ("postgresql", "postgres"):
        why = f"driver '{driver}' is not supported; perfbisect talks to PostgreSQL through psycopg 3"
    else:
        why = f"'{backend}' is not a database perfbisect can keep its results in"
    raise StoreError(
        f"Cannot use the results database URL {mask(text)!r}: {why}. Use postgresql+psycopg://USER@HOST:PORT/"
        f"DATABASE for a shared PostgreSQL server, or a SQLite file path (the default)."
    )
