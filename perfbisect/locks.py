"""One perfbisect at a time per target repository, and one per GPU node.

Two commands on one repository share its worktrees and its server pidfiles: the second would reap
the first one's live server as "left by an interrupted perfbisect" and check a different commit
out under it. Two commands on one node measure each other. So every command that runs trials holds
two ``flock`` locks for its whole life: ``<cache_dir>/perfbisect.lock`` for the repository and a
host-wide ``perfbisect-gpu-node.lock`` (in ``$PERFBISECT_LOCK_DIR``, default the system temp
directory, so every user of the node sees the same file). The kernel drops a flock when its holder
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

from .errors import InfrastructureError, MachineBusy, mask_secrets
from .polling import poll_until

NODE_LOCK_NAME = "perfbisect-gpu-node.lock"
REPO_LOCK_NAME = "perfbisect.lock"


class LockHeld(MachineBusy):
    """Another perfbisect command holds the repository or the GPU node."""


def node_lock_path() -> Path:
    """The host-wide lock file of this GPU node."""
    base = os.environ.get("PERFBISECT_LOCK_DIR") or tempfile.gettempdir()
    return Path(base) / NODE_LOCK_NAME


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

    def __init__(self, path: Path, what: str, hint: str):
        self.path = Path(path)
        self.what = what  # "repository /x", "GPU node"
        self.hint = hint
        self._fd: int | None = None

    def acquire(self, wait: bool = False, on_wait: Callable[[Holder], None] | None = None, poll_s: float = 0.5) -> None:
        fd = _open(self.path, self.what)
        told = False

        def locked() -> bool:
            nonlocal told
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                holder = _read_holder(self.path)
                if not wait:
                    os.close(fd)
                    raise LockHeld(
                        f"Another perfbisect command is using the {self.what}: {holder.describe()}, "
                        f"lock {self.path}. {self.hint} Wait for it to finish (or stop it"
                        f"{f' with `kill {holder.pid}`' if holder.pid else ''}), or pass --wait to start "
                        f"as soon as it is done."
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
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n{this_command()}\n".encode(), 0)
        except OSError:
            pass  # a read-only lock file: the lock holds, only the holder line is missing

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
        except OSError:
            pass
        os.close(self._fd)  # closing the descriptor drops the flock
        self._fd = None


@contextmanager
def exclusive(
    cache_dir: Path, *, repo: str, gpu: bool = True, wait: bool = False, on_wait: Callable[[str, Holder], None] | None = None,
    node_locks: tuple = (),
) -> Iterator[None]:
    """Hold the repository's lock (and with ``gpu`` the node's, plus ``node_locks``: the node's lock in
    a shared store) for the ``with`` block. Each lock has ``what``, ``acquire(wait, on_wait)`` and
    ``release()``."""
    locks = [
        FileLock(
            Path(cache_dir) / REPO_LOCK_NAME,
            f"repository {repo}",
            "Two commands on one repository would share its worktrees and servers.",
        )
    ]
    if gpu:
        locks.append(
            FileLock(node_lock_path(), "GPU node", "Two commands on one node would measure each other.")
        )
        locks.extend(node_locks)
    with ExitStack() as stack:
        for lock in locks:
            lock.acquire(wait=wait, on_wait=(lambda h, what=lock.what: on_wait(what, h)) if on_wait else None)
            stack.callback(lock.release)
        yield
