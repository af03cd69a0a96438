"""One perfbisect at a time per target repository, and one per GPU.

Two commands on one repository share its worktrees and its server pidfiles: the second would reap
the first one's live server as "left by an interrupted perfbisect" and check a different commit
out under it. Two commands on one GPU measure each other. So every command that runs trials holds
``flock`` locks for its whole life, scoped to what it uses:

- always ``<cache_dir>/perfbisect.lock``, its repository's;
- a server target (it launches a GPU server) the host-wide ``perfbisect-gpu-node.lock`` — exclusively
  when it may use every GPU, shared when ``CUDA_VISIBLE_DEVICES`` (in ``server.env`` or a mode's env)
  names its GPUs, plus ``perfbisect-gpu-<N>.lock`` for each of them. Runs on different GPUs of one node
  proceed together; a run on all of them waits for, or is refused by, any other;
- a ``command`` target nothing more: it starts no server and is given no GPU, so another project's
  CPU-only run on the host does not block it (nor it them). Benchmarks that share cores can still
  disturb each other; pin them (``taskset`` in ``workload.command``) where that matters.

The lock files live in ``$PERFBISECT_LOCK_DIR``, default the system temp directory, so every user of
the node sees the same files; a sandbox or container that should not share the node's locks sets it. The kernel drops a flock when its holder
dies, however it dies, so a stale lock cannot block anyone. Each lock file holds the holder's pid and
command line, which the refusal names. With a shared results store (PostgreSQL) the node is also
locked in the database (``perfbisect.store.shared.DatabaseNodeLock``, passed in as ``node_locks``),
so every user of the store, in any container, sees who holds the node.
"""

from __future__ import annotations

import fcntl
import os
import sys
import tempfile
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ..errors import InfrastructureError, MachineBusy, mask_secrets

# A command waiting for GPUs that other processes hold writes who and how long here, in its cache
# directory (measure.host writes and reads it; `perfbisect status` looks for it without the trial layer).
GPU_WAIT_FILE = "gpu-wait.json"
from .polling import poll_until

NODE_LOCK_NAME = "perfbisect-gpu-node.lock"
GPU_LOCK_NAME = "perfbisect-gpu-{}.lock"
REPO_LOCK_NAME = "perfbisect.lock"


class LockHeld(MachineBusy):
    """Another perfbisect command holds the repository or the GPU node."""


def lock_dir() -> Path:
    """Where the node's and GPUs' lock files are: ``$PERFBISECT_LOCK_DIR``, else the system temp directory."""
    return Path(os.environ.get("PERFBISECT_LOCK_DIR") or tempfile.gettempdir())


def node_lock_path() -> Path:
    """The host-wide lock file of this GPU node."""
    return lock_dir() / NODE_LOCK_NAME


def gpus_of(envs) -> tuple[str, ...] | None:
    """The GPUs a run is given (``CUDA_VISIBLE_DEVICES`` of any of ``envs``, as indices), None for all of them."""
    named: list[str] = []
    for env in envs:
        value = str((env or {}).get("CUDA_VISIBLE_DEVICES", "")).strip()
        if not value:
            continue
        parts = [p.strip() for p in value.split(",") if p.strip()]
        if not all(p.isdigit() for p in parts):
            return None  # UUIDs or MIG names: not mapped to indices here, so lock the whole node
        named.extend(parts)
    return tuple(sorted(set(named), key=int)) if named else None


def this_command() -> str:
    """How this process was started, as the holder line shows it (a --db URL's password masked:
    every user of the node, or of the shared store, can read it)."""
    words = ["perfbisect", *sys.argv[1:]] if sys.argv and sys.argv[0] else ["python"]
    text = mask_secrets(" ".join(words))
    return "".join(ch if ch.isprintable() else "?" for ch in text)[:300]


@dataclass(frozen=True)
class Holder:
    pid: int | None
    command: str
    host: str = ""  # set when the holder may run on another machine (a lock in a shared database)

    def describe(self) -> str:
        if self.pid is None:
            return "another perfbisect process (it did not say which)"
        where = f" on {self.host}" if self.host else ""
        return f"pid {self.pid}{where} (`{self.command}`)" if self.command else f"pid {self.pid}{where}"


def _read_holder(path: Path) -> Holder:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return Holder(None, "")
    first, _, rest = text.partition("\n")
    command = "".join(ch if ch.isprintable() else "?" for ch in rest.strip())
    return Holder(int(first) if first.strip().isdigit() else None, command)


def _open(path: Path, what: str) -> int:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InfrastructureError(
            f"Cannot create the directory {path.parent} for the {what} lock: {exc.strerror or exc}. "
            f"Make it writable, or (for the node lock) set PERFBISECT_LOCK_DIR to a writable directory."
        ) from None
    flags = os.O_RDWR | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    try:
        try:
            fd = os.open(path, flags)  # no O_CREAT when it exists: another user may own it (sticky /tmp)
        except FileNotFoundError:
            fd = os.open(path, flags | os.O_CREAT, 0o666)
            try:
                os.fchmod(fd, 0o666)  # the node lock is shared by every user of the node
            except OSError:
                pass
    except PermissionError:
        # Readable but not writable (another user's file): flock still works, only the holder
        # line cannot be written.
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
        except OSError as exc:
            raise InfrastructureError(
                f"Cannot open the {what} lock file {path}: {exc.strerror or exc}. Fix its permissions "
                f"or, for the node lock, set PERFBISECT_LOCK_DIR to a directory every user can write."
            ) from None
    except OSError as exc:
        raise InfrastructureError(
            f"Cannot open the {what} lock file {path}: {exc.strerror or exc} (a symlink there is refused). "
            f"Remove it or fix the directory's permissions."
        ) from None
    return fd


class FileLock:
    """An exclusive ``flock`` on one file, naming its holder inside the file."""

    def __init__(self, path: Path, what: str, hint: str, shared: bool = False):
        self.path = Path(path)
        self.what = what  # "repository /x", "GPU node", "GPU 3"
        self.hint = hint
        self.shared = shared  # LOCK_SH: held with others that share it, excluding one that holds it alone
        self._fd: int | None = None

    def acquire(self, wait: bool = False, on_wait: Callable[[Holder], None] | None = None, poll_s: float = 0.5) -> None:
        fd = _open(self.path, self.what)
        told = False

        def locked() -> bool:
            nonlocal told
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                holder = _read_holder(self.path)
                if not wait:
                    os.close(fd)
                    raise LockHeld(
                        f"Another perfbisect command is using the {self.what}: {holder.describe()}, "
                        f"lock {self.path}. {self.hint} Pass --wait to start as soon as it is done. If that "
                        f"command does not share this machine with yours (another container or sandbox), "
                        f"give each its own lock directory: PERFBISECT_LOCK_DIR=DIR (now {lock_dir()})."
                    ) from None
                if on_wait is not None and not told:
                    on_wait(holder)
                    told = True
                return False
            except OSError as exc:
                os.close(fd)
                raise InfrastructureError(
                    f"Cannot lock {self.path} ({self.what}): {exc.strerror or exc}. Put the cache "
                    f"directory (or PERFBISECT_LOCK_DIR) on a local file system that supports flock."
                ) from None

        poll_until(locked, None, poll_s)  # with --wait, as long as the holder holds it
        self._fd = fd
        if self.shared:
            return  # the file names the command that holds it alone; sharers leave that line to it
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n{this_command()}\n".encode(), 0)
        except OSError:
            pass  # a read-only lock file: the lock holds, only the holder line is missing

    def release(self) -> None:
        if self._fd is None:
            return
        if not self.shared:
            try:
                os.ftruncate(self._fd, 0)
            except OSError:
                pass
        os.close(self._fd)  # closing the descriptor drops the flock
        self._fd = None


@contextmanager
def exclusive(
    cache_dir: Path, *, repo: str, gpu: bool = True, wait: bool = False, on_wait: Callable[[str, Holder], None] | None = None,
    node_locks: tuple = (), gpus: tuple[str, ...] | None = None,
) -> Iterator[None]:
    """Hold the repository's lock (and with ``gpu`` the node's — shared when ``gpus`` names the GPUs the
    run is given, with each of theirs — plus ``node_locks``: the node's lock in a shared store) for the
    ``with`` block. Each lock has ``what``, ``acquire(wait, on_wait)`` and ``release()``."""
    locks = [
        FileLock(
            Path(cache_dir) / REPO_LOCK_NAME,
            f"repository {repo}",
            "Two commands on one repository would share its worktrees and servers.",
        )
    ]
    if gpu:
        locks.append(
            FileLock(node_lock_path(), "GPU node", "Two commands on one node would measure each other.",
                     shared=bool(gpus))
        )
        locks.extend(
            FileLock(lock_dir() / GPU_LOCK_NAME.format(g), f"GPU {g}", "Two commands on one GPU would measure each other.")
            for g in gpus or ()
        )
        locks.extend(node_locks)
    with ExitStack() as stack:
        for lock in locks:
            lock.acquire(wait=wait, on_wait=(lambda h, what=lock.what: on_wait(what, h)) if on_wait else None)
            stack.callback(lock.release)
        yield
