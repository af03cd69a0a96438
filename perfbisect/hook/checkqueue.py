"""The queue of pulls waiting for `perfbisect check`, the worker's state, and the check history.

Everything lives in ``<cache_dir>/hook/`` (the perfbisect directory of the target repository):

- ``queue``: one line per pull, ``OLD NEW EPOCH SOURCE``, appended by the hook (an ``O_APPEND`` write
  of one short line, so concurrent pulls never interleave). It is never rewritten: ``state.json``
  keeps the byte offset up to which lines were *checked* (moved only once a check ended with an answer),
  so a line appended while the worker reads is never lost, nor one whose check a killed worker left.
- ``state.json``: what the worker is doing now (``running``, ``waiting`` and why), written atomically.
- ``history.jsonl``: one JSON object per finished check (range, verdict, culprit, report path).
- ``last-result``: the one-line summary of the last check (``perfbisect status``); ``unseen``: the
  same line until the next pull's hook has printed it.
- ``worker.lock``: held (flock) by the one worker draining the queue.

Waiting pulls are coalesced: one check from the OLD of the earliest to the NEW of the latest.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import PerfbisectError
from ..runtime.locks import GPU_WAIT_FILE
from .notify import one_line, summary_line

if TYPE_CHECKING:
    from ..settings import Config

QUEUE = "queue"
STATE = "state.json"
HISTORY = "history.jsonl"
LAST_RESULT = "last-result"
UNSEEN = "unseen"
LOG = "check.log"
WORKER_LOCK = "worker.lock"


def _alive(pid: object) -> bool:
    try:
        os.kill(int(pid), 0)  # type: ignore[arg-type]
    except (TypeError, ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def hook_dir(cache_dir: Path) -> Path:
    """Where the hook's queue, state, history and log live for one target repository."""
    return Path(cache_dir) / "hook"


@dataclass(frozen=True)
class Entry:
    """One pull waiting to be checked."""

    old: str
    new: str
    at: float
    source: str  # post-merge, post-rewrite, manual


@dataclass(frozen=True)
class Job:
    """Waiting pulls coalesced into one range: OLD of the earliest, NEW of the latest."""

    old: str
    new: str
    entries: tuple[Entry, ...]
    upto: int = 0  # the queue's byte offset after its last entry: where the queue stands once its check answered

    @property
    def coalesced(self) -> int:
        return len(self.entries)


def _parse(line: str) -> Entry | None:
    words = line.split()
    if len(words) < 2 or not all(_is_sha(w) for w in words[:2]):
        return None  # a torn or foreign line: skipped, never run
    try:
        at = float(words[2]) if len(words) > 2 else 0.0
    except ValueError:
        at = 0.0
    return Entry(words[0], words[1], at, words[3] if len(words) > 3 else "")


def _is_sha(word: str) -> bool:
    return 4 <= len(word) <= 64 and all(c in "0123456789abcdef" for c in word)


def coalesce(entries: list[Entry]) -> Job | None:
    """One job for every waiting entry: OLD of the earliest, NEW of the latest (None when empty)."""
    if not entries:
        return None
    return Job(entries[0].old, entries[-1].new, tuple(entries))


class CheckQueue:
    """The queue, state and history files of one target repository's hook."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)

    def path(self, name: str) -> Path:
        return self.dir / name

    # -- queue -----------------------------------------------------------------------------------
    def append(self, old: str, new: str, source: str = "manual") -> None:
        """Queue OLD..NEW as the hook does (one atomic append)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        line = f"{old} {new} {int(time.time())} {source}\n".encode()
        fd = os.open(self.path(QUEUE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def _read_from(self, offset: int) -> tuple[list[Entry], int]:
        """Complete lines after ``offset`` and the offset after the last complete one."""
        try:
            with open(self.path(QUEUE), "rb") as fh:
                fh.seek(offset)
                data = fh.read()
        except FileNotFoundError:
            return [], offset
        end = data.rfind(b"\n") + 1  # a line still being written is left for the next read
        entries = [e for e in (_parse(raw.decode(errors="replace")) for raw in data[:end].splitlines()) if e]
        return entries, offset + end

    def waiting(self) -> list[Entry]:
        """Pulls queued and not yet taken by a live worker (a dead worker's job is waiting again)."""
        state = self.state()
        start, taken = int(state.get("offset", 0)), int(state.get("taken", 0))
        if taken > start and _alive(state.get("pid")):
            start = taken
        return self._read_from(start)[0]

    def take(self) -> Job | None:
        """Every waiting entry as one coalesced job (call with the worker lock held). The entries stay in the queue
        until ``done(job)``: a worker killed mid-check (SIGKILL, a reboot) leaves them for the next one, which checks
        them again with whatever was pulled since."""
        entries, offset = self._read_from(int(self.state().get("offset", 0)))
        job = coalesce(entries)
        if job is None:
            return None
        self.update_state(taken=offset, pid=os.getpid())  # for `status`: these are being checked, not waiting
        return replace(job, upto=offset)

    def done(self, job: Job) -> None:
        """The job's check ended with an answer (a verdict, or an error it recorded): its entries leave the queue."""
        if job.upto > int(self.state().get("offset", 0)):
            self.update_state(offset=job.upto)

    # -- state -----------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path(STATE).read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def update_state(self, **changes: Any) -> dict[str, Any]:
        """Merge ``changes`` into state.json, atomically (write a temp file, rename it over)."""
        state = {**self.state(), **changes, "updated_at": time.time()}
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.path(f".{STATE}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state, indent=1))
        os.replace(tmp, self.path(STATE))
        return state

    def set_phase(self, phase: str, detail: str = "", job: Job | None = None) -> None:
        """What the worker does now: idle, waiting (detail says why), running."""
        current = {"old": job.old, "new": job.new, "coalesced": job.coalesced} if job else self.state().get("job")
        self.update_state(phase=phase, detail=detail, pid=os.getpid(), job=current if phase != "idle" else None,
                          since=time.time())

    # -- history ---------------------------------------------------------------------------------
    def record(self, result: dict[str, Any], line: str) -> None:
        """Append a finished check to history.jsonl; make its line the last result and unseen."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.path(HISTORY), "a", encoding="utf-8") as fh:
            fh.write(json.dumps({**result, "line": line}, default=str) + "\n")
        self.set_line(line)

    def set_line(self, line: str) -> None:
        """The one-line summary `status` shows and the next pull's hook prints once."""
        self.dir.mkdir(parents=True, exist_ok=True)
        for name in (LAST_RESULT, UNSEEN):
            tmp = self.path(f".{name}.{os.getpid()}.tmp")
            tmp.write_text(one_line(line) + "\n", encoding="utf-8")  # the hook prints it to a terminal
            os.replace(tmp, self.path(name))

    def history(self, limit: int = 10) -> list[dict[str, Any]]:
        """The last ``limit`` finished checks, newest first."""
        try:
            lines = self.path(HISTORY).read_text(encoding="utf-8").splitlines()
        except OSError:
            return []
        out = []
        for raw in reversed(lines):
            try:
                out.append(json.loads(raw))
            except ValueError:
                continue
            if len(out) >= limit:
                break
        return out

    def last_line(self) -> str | None:
        try:
            return self.path(LAST_RESULT).read_text(encoding="utf-8").strip() or None
        except OSError:
            return None


@dataclass
class WorkerLock:
    """The flock that makes one worker drain the queue; a second worker leaves at once."""

    path: Path
    _fd: int | None = field(default=None, repr=False)

    def try_acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None

    def holder(self) -> int | None:
        """Pid of the worker holding the lock now (None when nobody does).

        Read from the file, never by trying the lock: a status that took it for a moment would make
        a worker starting just then leave its pull to nobody.
        """
        try:
            text = self.path.read_text().strip()
        except OSError:
            return None
        if not text.isdigit():
            return None
        import psutil

        pid = int(text)
        return pid if psutil.pid_exists(pid) else None


def entry_dict(entry: Entry) -> dict[str, Any]:
    return asdict(entry)


# ------------------------------------------------------------------------------------------------
# perfbisect status


def status(config: Config, limit: int = 5) -> dict[str, Any]:
    """Running, waiting (and why), queued, and the last results with their report paths.

    Here, not in ``check``, so that `perfbisect status` reads files without importing the use cases."""
    queue = CheckQueue(hook_dir(config.cache_dir))
    state = queue.state()
    holder = WorkerLock(queue.path(WORKER_LOCK)).holder()
    phase = state.get("phase") or "idle"
    if holder is None and phase in ("running", "waiting"):
        phase = "stopped"
        state = {**state, "detail": f"the worker (pid {state.get('pid')}) is gone; its check did not finish"}
    waiting = queue.waiting()
    nxt = coalesce(waiting)
    return {
        "worker": {
            "pid": holder, "phase": phase if holder is not None or phase == "stopped" else "idle",
            "detail": state.get("detail") or "", "job": state.get("job") if holder is not None else None,
            "since": state.get("since"),
        },
        "queued": [entry_dict(e) for e in waiting],
        "next": {"old": nxt.old, "new": nxt.new, "coalesced": nxt.coalesced} if nxt else None,
        "last": queue.last_line(),
        "results": queue.history(limit),
        "log": str(queue.path(LOG)),
        "node_lock": shared_node_lock(config),
        "gpu_wait": _gpu_wait(config.cache_dir),
    }


def _gpu_wait(cache_dir: Path) -> dict[str, Any] | None:
    """A command (``run``, ``measure``, ...) of this cache directory waiting for GPUs others hold.
    The file is looked for first, so that `perfbisect status` imports the measure layer only then."""
    if not (Path(cache_dir) / GPU_WAIT_FILE).exists():
        return None
    from ..measure.host import gpu_wait

    return gpu_wait(cache_dir)


def shared_node_lock(config: Config) -> dict[str, Any] | None:
    """Who holds this GPU node's lock in a shared results store (``[store] url`` on PostgreSQL);
    None for a SQLite store, whose node lock is the local lock file."""
    if not config.store.url:  # before importing the store (SQLAlchemy): a SQLite store has no node row
        return None
    from ..store import locate, open_store

    if not locate(config.store.url).shared:
        return None
    try:
        with open_store(config.store.url, recover=False) as store:
            lock = store.node_lock()
            holder = lock.holder()
    except PerfbisectError as exc:
        return {"node": None, "holder": None, "error": str(exc)}
    return {"node": lock.node, "holder": holder.describe() if holder else None, "error": None}


def format_status(data: dict[str, Any]) -> list[str]:
    """`perfbisect status` as lines."""
    w = data["worker"]
    lines = []
    job = w.get("job") or {}
    rng = f"{str(job.get('old', ''))[:10]}..{str(job.get('new', ''))[:10]}" if job else ""
    if w["phase"] == "running":
        lines.append(f"running: {rng} (pid {w['pid']}){' — ' + w['detail'] if w['detail'] else ''}")
    elif w["phase"] == "waiting":
        lines.append(f"waiting: {w['detail']} — {rng} (pid {w['pid']})")
    elif w["phase"] == "stopped":
        lines.append(f"stopped: {w['detail']}")
    else:
        lines.append("no check running")
    gw = data.get("gpu_wait")
    if gw:
        lines.append(f"waiting for the GPUs (pid {gw['pid']}): {gw['who']} holds them; waited {gw['waited_s']} s "
                     f"of at most {gw['bound_s']:g} s (--wait-idle)")
    if data["queued"]:
        n = data["next"]
        lines.append(
            f"queued: {len(data['queued'])} pull(s), checked next as one range {n['old'][:10]}..{n['new'][:10]}"
            + ("" if w["pid"] else " — no worker is running: `perfbisect check --drain` starts one")
        )
    for r in data["results"]:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.get("finished_at") or 0))
        lines.append(f"{when}  {r.get('line') or summary_line(r)}")
    if not data["results"]:
        lines.append("no check has finished yet")
    node = data.get("node_lock")
    if node and node["error"]:
        lines.append(f"GPU node lock in the shared store: unknown ({node['error']})")
    elif node:
        lines.append(f"GPU node {node['node']}: {'held by ' + node['holder'] if node['holder'] else 'free'} (shared store)")
    lines.append(f"log: {data['log']}")
    return [one_line(line) for line in lines]
