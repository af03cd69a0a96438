"""A throwaway PostgreSQL cluster on 127.0.0.1 for the shared-store tests.

``find_pg_bin()`` looks for ``initdb``/``pg_ctl`` on PATH, in /usr/local/bin and in Debian's
``/usr/lib/postgresql/<version>/bin``; ``PgCluster.start()`` runs ``initdb`` into a fresh temp dir and
``pg_ctl start`` on a free port (TCP only, no Unix socket), with password (scram) authentication so
that URLs carry a password, as a real shared server's do. initdb refuses to run as root: under euid 0
the cluster runs as ``nobody`` through ``setpriv`` (argument lists only).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

SUPERUSER = "perfbisect"
PASSWORD = "s3cret-pw"  # tests assert that this never appears in any message


def find_pg_bin() -> Path | None:
    """The directory holding initdb and pg_ctl, or None."""
    candidates: list[Path] = []
    found = shutil.which("initdb")
    if found:
        candidates.append(Path(found).parent)
    candidates.append(Path("/usr/local/bin"))
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: p.parent.name, reverse=True)
    candidates.extend(debian)
    for d in candidates:
        if (d / "initdb").is_file() and (d / "pg_ctl").is_file() and (d / "postgres").is_file():
            return d
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgCluster:
    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="perfbisect-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = _free_port()
        self._as: list[str] = []
        self._counter = 0

    def url(self, database: str = "postgres", *, password: str = PASSWORD) -> str:
        return f"postgresql+psycopg://{SUPERUSER}:{password}@127.0.0.1:{self.port}/{database}"

    def _run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        return subprocess.run(
            [*self._as, *argv], check=True, capture_output=True, text=True, timeout=timeout, env=env, cwd=self.root
        )

    def start(self) -> "PgCluster":
        pwfile = self.root / "pwfile"
        pwfile.write_text(PASSWORD + "\n")
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            for path in (self.root, pwfile):
                os.chown(path, nobody.pw_uid, nobody.pw_gid)
            self._as = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups", "--"]
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-U", SUPERUSER, f"--pwfile={pwfile}",
            "--auth-host=scram-sha-256", "--auth-local=scram-sha-256", "-E", "UTF8", "--no-sync",
        )
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c fsync=off -c max_connections=200"
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start")
        return self

    def create_database(self, prefix: str = "t") -> str:
        """A fresh empty database (advisory locks are per database, so tests stay apart); its URL."""
        import psycopg

        self._counter += 1
        name = f"{prefix}_{os.getpid()}_{self._counter}_{int(time.time() * 1000) % 100000}"
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=SUPERUSER, password=PASSWORD, dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop", timeout=60)
        except (subprocess.SubprocessError, OSError):
            pass
        shutil.rmtree(self.root, ignore_errors=True)
