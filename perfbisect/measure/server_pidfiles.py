"""Server pidfiles: the server process groups perfbisect started, one file each under <cache_dir>/servers.

A trial writes one when its server starts (``remember_server``) and removes it once the server is torn
down, so a file left there names a server whose perfbisect died with it running. A later perfbisect reaps
those (``reap_leftover_servers``: a leftover server poisons later trials) and ``perfbisect doctor`` lists
them (``server_pidfiles``). Each file names the perfbisect that wrote it (host:pid:start), so a live
perfbisect's server is never taken for a leftover.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

from ..runtime.children import signal_group
from ..runtime.liveness import owner_alive, process_owner
from .server import ServerSession, process_cmdline
from ..runtime.progress import Progress

_PIDFILE_OWNER = "owner "


@dataclass(frozen=True)
class ServerPidfile:
    """A server process group perfbisect started, as its pidfile under <cache_dir>/servers says."""

    path: Path
    pgid: int
    owner: str  # host:pid:start of the perfbisect that started it ("" in pidfiles of older versions)
    cmdline: str

    @property
    def owner_pid(self) -> int | None:
        parts = self.owner.split(":")
        return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None


def server_pidfiles(cache_dir: Path) -> list[ServerPidfile]:
    """Every server pidfile of this cache directory (unreadable ones skipped)."""
    out = []
    for pidfile in sorted((Path(cache_dir) / "servers").glob("*.pid")):
        try:
            pgid = int(pidfile.stem)
            text = pidfile.read_text()
        except (ValueError, OSError):
            continue
        owner, cmdline = "", text
        if text.startswith(_PIDFILE_OWNER):
            first, _, cmdline = text.partition("\n")
            owner = first[len(_PIDFILE_OWNER):].strip()
        out.append(ServerPidfile(pidfile, pgid, owner, cmdline))
    return out


def remember_server(servers_dir: Path, session: ServerSession) -> Path:
    """Note the server's process group in a pidfile under ``servers_dir`` (<cache_dir>/servers) so a crash
    of this process cannot leave it running unseen; the trial removes it once the server is torn down."""
    servers_dir.mkdir(parents=True, exist_ok=True)
    pidfile = servers_dir / f"{session.pid}.pid"
    pidfile.write_text(f"{_PIDFILE_OWNER}{process_owner()}\n" + " ".join(session.argv))
    return pidfile


def reap_leftover_servers(cache_dir: Path, progress: Progress) -> list[int]:
    """Kill server process groups a crashed perfbisect left behind: a leftover server poisons later trials.

    Only pidfiles whose writer is dead are touched: a live perfbisect's server is never reaped.
    """
    killed = []
    for pf in server_pidfiles(cache_dir):
        if pf.owner and pf.owner != process_owner() and owner_alive(pf.owner):
            continue  # its perfbisect is running: the server is in use, not left over
        alive = process_cmdline(pf.pgid) or ""
        # The group's leader still runs the command the pidfile names: the id was not reused.
        if alive and alive == pf.cmdline.strip():
            try:
                if signal_group(pf.pgid, signal.SIGKILL):
                    killed.append(pf.pgid)
                    progress.warn(f"killed a server left running by an interrupted perfbisect (process group {pf.pgid}: {alive[:80]})")
            except OSError:
                pass
        pf.path.unlink(missing_ok=True)
    return killed
