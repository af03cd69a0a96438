"""`perfbisect check OLD NEW`: did this range make any configured mode slower beyond noise?

The early answer is `compare` (interleaved OLD NEW NEW OLD trials, alpha spent over the looks, so
stopping at the first clear look stays honest), mode by mode; when a mode regressed and
``[hook] action = "bisect"`` the range is bisected on that mode. The comparisons and the bisection
are stored in the results database like any others, the report is written, and the check itself
goes to the hook's history (perfbisect/hook/checkqueue.py) with its one-line summary.

The worker (`check --drain`, started detached by the git hook) drains the queue: it waits until the
GPUs have been free of other processes for ``[hook] idle_s`` seconds (not for a ``command`` target,
which uses none) and until no other perfbisect holds the node, then checks every waiting pull
coalesced into one range.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from ..measure.host import DEFAULT_WAIT_IDLE_S, FAKE_BUSY_ENV, describe_busy, gpu_busy_processes  # noqa: F401
from ..app.workspace import Workspace
from ..runtime.progress import Progress
from .checkqueue import LOG, WORKER_LOCK, CheckQueue, Job, WorkerLock, entry_dict, hook_dir
from ..config import load_config
from ..settings import Config
from ..errors import PerfbisectError
from ..runtime.locks import LockHeld
from ..model import Commit, Verdict
from .notify import notify, one_line, summary_line
from ..runtime.polling import poll_until
from ..workload_kinds import kind_of

# Once a check runs, a trial that finds the GPUs taken waits this long for them before failing.
TRIAL_WAIT_IDLE_S = DEFAULT_WAIT_IDLE_S
LOCK_POLL_S = 2.0
# The worker lock when `python -m perfbisect.hook.checkqueue` took it before importing perfbisect.
HELD_LOCK: WorkerLock | None = None


def busy_gpu_processes() -> list[tuple[int, int, str]]:
    """(gpu, pid, name) of other processes on the GPUs (``FAKE_BUSY_ENV`` simulates some)."""
    return gpu_busy_processes()


def wait_for_idle(
    idle_s: float,
    on_wait: Callable[[str], None],
    *,
    poll_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Return once no other process has held a GPU for ``idle_s`` seconds in a row."""
    poll = poll_s if poll_s is not None else max(0.05, min(5.0, idle_s / 5))
    free_since: float | None = None
    told = ""

    def idle_long_enough() -> bool:
        nonlocal free_since, told
        procs = busy_gpu_processes()
        now = clock()
        if procs:
            free_since = None
            why = f"GPUs busy ({describe_busy(procs)}); starts once they have been free for {idle_s:g} s"
        else:
            free_since = now if free_since is None else free_since
            if now - free_since >= idle_s:
                return True
            why = f"GPUs free for {now - free_since:.0f} of {idle_s:g} s before starting"
        if why != told:
            on_wait(why)
            told = why
        return False

    poll_until(idle_long_enough, None, poll, clock=clock, sleep=sleep)


# ------------------------------------------------------------------------------------------------
# the use case


def resolve_range(ws: Workspace, old: str, new: str, progress: Progress) -> tuple[Commit, Commit]:
    """OLD..NEW as commits; after a rebase or a forced update OLD is replaced by the merge base."""
    old_c, new_c = ws.repo.resolve(old), ws.repo.resolve(new)
    if old_c.sha != new_c.sha and not ws.repo.is_ancestor(old_c.sha, new_c.sha):
        base = ws.repo.git("merge-base", old_c.sha, new_c.sha, what="finding where the pulled history forked").strip()
        progress.info(f"{old_c.short} is not an ancestor of {new_c.short} (rebased or forced): checking from their merge base")
        old_c = ws.repo.resolve(base)
    return old_c, new_c


def check_modes(config: Config) -> list[str]:
    """The modes a check compares: [hook] modes, else every mode, the bisection metric's first."""
    if config.hook.modes:
        return list(config.hook.modes)
    first = [m for m in config.metric_modes if m in config.modes]
    return first + [m for m in config.modes if m not in first]


_RANK = {Verdict.REGRESSED: 0, Verdict.INCONCLUSIVE: 1, Verdict.IMPROVED: 2, Verdict.SAME: 3}


def run_check(
    ws: Workspace,
    old: str,
    new: str,
    progress: Progress | None = None,
    *,
    action: str | None = None,
    wait_idle_s: float = 0.0,
) -> dict[str, Any]:
    """Compare OLD and NEW mode by mode; bisect the first mode that regressed (action "bisect")."""
    # The use cases (and the engine's scipy) load here, when a check runs: the detached worker a pull
    # starts reaches its first state ("waiting: GPUs busy") without them.
    from ..app.bisection import run_bisection
    from ..app.measuring import CompareResult, compare_commits
    from ..app.reports import report, report_quietly

    progress = progress or Progress()
    cfg = ws.config
    action = action or cfg.hook.action
    started = time.time()
    old_c, new_c = resolve_range(ws, old, new, progress)
    result: dict[str, Any] = {
        "old": old_c.sha, "new": new_c.sha, "action": action, "started_at": started, "comparisons": {},
        "verdict": Verdict.SAME.value, "mode": None, "effect_pct": None, "culprit": None, "bisection": None,
        "report": None,
    }
    if old_c.sha == new_c.sha:
        result.update(verdict=Verdict.SAME.value, finished_at=time.time(), note="nothing new in the range")
        return result
    worst: tuple[Verdict, str, CompareResult] | None = None
    for mode in check_modes(cfg):
        progress.info(f"check [{mode}]: {old_c.short} vs {new_c.short}")
        cmp = compare_commits(ws, old_c.sha, new_c.sha, mode, progress, wait_idle_s=wait_idle_s)
        c = cmp.comparison
        result["comparisons"][mode] = {
            "id": cmp.comparison_id, "verdict": c.verdict.value, "effect_pct": c.effect_pct,
            "ci_low_pct": c.ci_low_pct, "ci_high_pct": c.ci_high_pct,
        }
        progress.info(f"check [{mode}]: {c.verdict.value} {c.effect_pct:+.1f}% [{c.ci_low_pct:+.1f}%, {c.ci_high_pct:+.1f}%]")
        if worst is None or _RANK[c.verdict] < _RANK[worst[0]]:
            worst = (c.verdict, mode, cmp)
        if c.verdict is Verdict.REGRESSED and action == "bisect":
            break  # the question is answered; the bisection says where
    assert worst is not None
    verdict, mode, cmp = worst
    result.update(verdict=verdict.value, mode=mode, effect_pct=cmp.comparison.effect_pct)
    report_of = f"c{cmp.comparison_id}"
    if verdict is Verdict.REGRESSED and action == "bisect":
        progress.info(f"[{mode}] is slower beyond noise: bisecting {old_c.short}..{new_c.short} on it")
        on_mode = replace(ws, config=replace(cfg, stats=replace(cfg.stats, metric=mode)))
        bisection = run_bisection(on_mode, old_c.sha, new_c.sha, progress, wait_idle_s=wait_idle_s)
        outcome = bisection.outcome
        result.update(verdict=outcome.verdict.value, bisection=bisection.bisection_id, culprit=outcome.named_culprit,
                      culprit_set=list(outcome.culprit_set), culprit_is_set=outcome.culprit_is_set)
        if outcome.effect_pct is not None:
            result["effect_pct"] = outcome.effect_pct
        if outcome.named_culprit and outcome.named_culprit in bisection.commits:
            result["culprit_subject"] = one_line(bisection.commits[outcome.named_culprit].subject)
        report_of = str(bisection.bisection_id)
    path = report_quietly(progress, lambda: report(ws.store, report_of, config=ws.config)[0])
    result.update(report=str(path) if path else None, db=str(ws.db_path), finished_at=time.time())
    return result


def error_result(job: Job | None, old: str, new: str, message: str) -> dict[str, Any]:
    return {"old": old, "new": new, "verdict": "error", "error": one_line(message), "finished_at": time.time(),
            "coalesced": job.coalesced if job else 1}


def finish(config: Config, queue: CheckQueue, result: dict[str, Any], progress: Progress) -> str:
    """Record a finished check (history, last line, unseen line) and notify; returns its line."""
    line = summary_line(result)
    queue.record(result, line)
    progress.info(line)
    notify(result, line, config.hook.webhook_url, config.hook.notify_command, progress.warn)
    return line


# ------------------------------------------------------------------------------------------------
# the worker


class LogProgress(Progress):
    """The detached worker's progress: timestamped lines on stderr (the hook sends them to check.log)."""

    def __init__(self, queue: CheckQueue | None = None):
        self.queue = queue

    def _print(self, kind: str, message: str) -> None:
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {kind}{one_line(message)}", file=sys.stderr, flush=True)

    def info(self, message: str) -> None:
        self._print("", message)

    def detail(self, message: str) -> None:
        self._print("  ", message)
        if self.queue is not None and message.startswith("GPUs busy"):
            self.queue.set_phase("waiting", f"{message} (in a trial)")  # TrialRunner waits for them

    def warn(self, message: str) -> None:
        self._print("warning: ", message)


def detach() -> None:
    """Leave the terminal's session: a closed terminal or a later Ctrl-C there must not stop the check."""
    try:
        os.setsid()
    except OSError:
        pass  # already a session leader


def drain(config_path: Path, progress: Progress | None = None, *, detach_session: bool = True) -> int:
    """Check every queued pull, coalesced, until the queue is empty; returns how many checks ran.

    A second worker leaves at once; the one holding the lock looks at the queue again after
    releasing it, so a pull queued while it finished is never left behind.
    """
    if detach_session:
        detach()
    config = load_config(config_path)
    queue = CheckQueue(hook_dir(config.cache_dir))
    progress = progress or LogProgress(queue)
    lock = WorkerLock(queue.path(WORKER_LOCK))
    held = HELD_LOCK is not None and HELD_LOCK.path == lock.path
    if held:
        lock = HELD_LOCK
    ran = 0
    while True:
        if not held and not lock.try_acquire():
            return ran
        held = False
        try:
            while (job := queue.take()) is not None:
                run_job(config, queue, job, progress)
                ran += 1
            queue.set_phase("idle")
        except BaseException:
            queue.set_phase("stopped", "the worker was stopped; queued pulls wait for the next pull or `perfbisect check --drain`")
            raise
        finally:
            lock.release()
        if not queue.waiting():
            return ran


def run_job(config: Config, queue: CheckQueue, job: Job, progress: Progress) -> dict[str, Any]:
    """Wait for idle GPUs and the node lock, check the job's range, record and notify."""
    what = f"{job.old[:10]}..{job.new[:10]}" + (f" ({job.coalesced} pulls coalesced)" if job.coalesced > 1 else "")
    progress.info(f"check {what}")
    try:
        # A command target runs no server and holds no GPU (ws.exclusive() takes no GPU lock for it either):
        # waiting for the GPUs to be free for idle_s would only delay its check, by idle_s on every pull.
        gpu_target = kind_of(config.workload).serves
        with Workspace.open(config) as ws, ExitStack() as held:
            while True:
                if gpu_target:
                    wait_for_idle(config.hook.idle_s, lambda why: (queue.set_phase("waiting", why, job), progress.info(f"waiting: {why}")))
                try:
                    held.enter_context(ws.exclusive(progress))
                    break
                except LockHeld as exc:
                    why = f"another perfbisect holds the repository or GPU node: {one_line(str(exc)).split(': ', 1)[-1][:160]}"
                    queue.set_phase("waiting", why, job)
                    progress.info(f"waiting: {why}")
                    time.sleep(LOCK_POLL_S)
            queue.set_phase("running", f"checking {what}", job)
            result = run_check(ws, job.old, job.new, progress, wait_idle_s=TRIAL_WAIT_IDLE_S)
    except PerfbisectError as exc:
        result = error_result(job, job.old, job.new, str(exc))
    except Exception as exc:  # a bug must not wedge the queue: the next pull's check still runs
        result = error_result(job, job.old, job.new, f"unexpected {type(exc).__name__}: {exc}")
    result["coalesced"] = job.coalesced
    result["pulls"] = [entry_dict(e) for e in job.entries]
    finish(config, queue, result, progress)
    queue.done(job)  # only now do its pulls leave the queue: a worker killed before this leaves them for the next
    return result


def enqueue(config: Config, config_path: Path, old: str, new: str) -> Path:
    """Queue OLD..NEW as the hook does and start a detached worker; returns the worker's log."""
    queue = CheckQueue(hook_dir(config.cache_dir))
    queue.append(old, new, "manual")
    log = queue.path(LOG)
    with open(log, "ab") as out:
        subprocess.Popen(
            [sys.executable, "-m", "perfbisect.cli", "check", "--drain", "--config", str(config_path)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    return log
