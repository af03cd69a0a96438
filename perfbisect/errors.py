"""User-facing errors.

Library code raises these with a message that names the problem (file, key, commit, flag) and the
fix; it never prints or exits. ``perfbisect.cli`` is the one place that turns them into
``Error: ...`` on stderr and an exit status (and the hook's detached worker, which answers the same way
in its log: ``perfbisect.hook.hookworker``); ``internal_error_message`` is the paragraph both give an
exception that is none of these.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

# Anything that looks like a URL, and password=... parameters.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]+")
_PASSWORD_PARAM = re.compile(r"(password=)[^&\s'\"]*", re.IGNORECASE)


def url_userinfo(url: str) -> tuple[str, str]:
    """``url`` split after its user information: ("scheme://user:password@", "host:port/path?query"),
    or ("scheme://", rest) without any. The user information runs to the LAST '@' before the query,
    as urllib.parse reads it, so a password holding '@' or '/' is all on the left."""
    scheme, sep, rest = url.partition("://")
    query = rest.find("?")
    userinfo, at, after = (rest if query < 0 else rest[:query]).rpartition("@")
    if not at:
        return scheme + sep, rest
    return scheme + sep + userinfo + at, after + ("" if query < 0 else rest[query:])


def _mask_url(match: re.Match[str]) -> str:
    head, rest = url_userinfo(match.group(0))
    scheme, _, userinfo = head[:-1].partition("://") if head.endswith("@") else (head, "", "")
    if ":" in userinfo:
        head = f"{scheme}://{userinfo.partition(':')[0]}:***@"
    return head + _PASSWORD_PARAM.sub(r"\1***", rest)


def mask_secrets(text: str, *secrets: str | None) -> str:
    """``text`` with URL passwords (and each of ``secrets``) replaced by ``***``: a message, a lock's
    holder line or a suggested command line never shows a database password.

    A URL is parsed (its user information runs to the last '@' before the host), never matched by
    substring; a secret is replaced only where it stands as a whole word, so a short password
    does not garble the words that happen to contain it."""
    text = _PASSWORD_PARAM.sub(r"\1***", _URL.sub(_mask_url, text))
    for secret in secrets:
        if secret and secret != "***":
            text = re.sub(rf"(?<![\w]){re.escape(secret)}(?![\w])", "***", text)
    return text


# Documented exit codes (docs/commands.md, `perfbisect --help`).
EXIT_OK = 0
EXIT_REGRESSION = 1  # a regression was found and the caller asked to fail on one (--fail-on-regression)
EXIT_USAGE = 2  # bad input: config, revisions, flags
EXIT_INCONCLUSIVE = 3  # the evidence was not enough within the budget
EXIT_RUNTIME = 4  # something broke while measuring (server crash with no way to continue, ...)
# Stopped by a signal: 128 + its number, as a shell reports it (130 for Ctrl-C, 143 for SIGTERM).
EXIT_SIGINT = 128 + signal.SIGINT
EXIT_SIGTERM = 128 + signal.SIGTERM


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived. Raised in the main thread so every ``with`` block unwinds (the
    server group is torn down, the trial is stored as interrupted) before perfbisect exits.

    A KeyboardInterrupt on purpose: ``except Exception`` anywhere must not swallow it.
    """

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class PerfbisectError(Exception):
    """Base class: ``str(err)`` is a one-paragraph message for the user."""

    exit_code = EXIT_RUNTIME


class ConfigError(PerfbisectError):
    """The config file is missing, malformed, or has an unknown key / wrong type."""

    exit_code = EXIT_USAGE


class UsageError(PerfbisectError):
    """A command-line argument is wrong (unknown revision, good == bad, ...)."""

    exit_code = EXIT_USAGE


class GitError(PerfbisectError):
    """The target repository cannot do what was asked (bad revision, ancestry, worktree)."""

    exit_code = EXIT_USAGE


class PatchError(PerfbisectError):
    """The patch stack does not apply at a commit; the commit is skipped, never blamed."""

    def __init__(self, message: str, *, patch: str = "", files: tuple[str, ...] = ()):
        super().__init__(message)
        self.patch = patch
        self.files = files


class BuildError(PerfbisectError):
    """A build step failed at a commit; the commit is skipped, never blamed."""

    def __init__(self, message: str, *, log_path: str | None = None, log_tail: str = ""):
        super().__init__(message)
        self.log_path = log_path
        self.log_tail = log_tail


class EnvironmentBuildError(PerfbisectError):
    """The environment of a commit's pinned dependencies cannot be built (a pinned wheel is nowhere to
    be found, the installer failed): the commit is skipped with that reason, never blamed."""


class ServerError(PerfbisectError):
    """The server did not start, never became ready, or died."""

    def __init__(self, message: str, *, log_path: str | None = None, log_tail: str = ""):
        super().__init__(message)
        self.log_path = log_path
        self.log_tail = log_tail


class ServerNotReady(ServerError):
    """The server never answered its readiness probe in time: the commit is skipped."""


class ServerDied(ServerError):
    """The server exited while runs were in flight: the trial is failed, its runs are kept."""


class ModeNotApplied(ServerError):
    """A variable that defines the mode (a key of ``[modes.NAME].env``) did not reach the server's
    workers as configured: the commit's own code overwrote it (SGLang up to 0.5.3 sets
    NCCL_CUMEM_ENABLE / NCCL_NVLS_ENABLE itself) or dropped it, so the trial would not measure the
    mode. The trial is skipped, the commit never blamed."""


class WorkloadError(PerfbisectError):
    """A request could not be made or its response could not be understood."""


class Untestable(WorkloadError):
    """The workload command exited 125: this commit cannot be tested (as in `git bisect run`).
    The trial is stored as skipped; the commit is never blamed and this is not a failure."""


class MachineBusy(PerfbisectError):
    """Another process holds the GPUs: benchmarking now would measure the neighbour."""


class InfrastructureError(PerfbisectError):
    """perfbisect's own machinery failed (git could not write its index, a disk is full, a lock
    file is unreadable): never a property of the commit being measured, so never a skip."""


class StoreError(PerfbisectError):
    """The results database cannot be opened or migrated."""

    exit_code = EXIT_USAGE


class StoreWriteError(StoreError):
    """The results database failed after it was opened (disk full, lock held too long)."""

    exit_code = EXIT_RUNTIME


def internal_error_message(exc: BaseException) -> str:
    """One paragraph for an exception no layer turned into a PerfbisectError (a bug, or an
    environment failure nobody anticipated)."""
    import traceback  # here: the CLI imports this module before its signal handlers are in, so it stays light

    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return (
        f"perfbisect stopped on an unexpected {type(exc).__name__}{where}: {exc}. Results stored before "
        f"this point are kept. If the message points at the machine (disk full, permissions), fix that and "
        f"run again (`perfbisect resume` continues a bisection); otherwise it is a bug: report it with the "
        f"command line and the traceback that PERFBISECT_DEBUG=1 prints."
    )
