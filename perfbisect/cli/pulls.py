"""The commands of the post-`git pull` hook: `hook install`, `hook uninstall`, `hook status`, `check`
(did a pull's range make a mode slower; the detached worker's queue with --enqueue and --drain) and
`status` (the hook's checks). The logic is in ``perfbisect.hook`` (hook.py, check.py, checkqueue.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import EXIT_OK, EXIT_RUNTIME, UsageError
from ..interrupts import interruptible
from ..report.console import ConsoleProgress, out_console, print_json, print_lines
from ..runtime.progress import Progress
from ..settings import DEFAULT_WAIT_IDLE_S
from .options import (
    ConfigOpt, DbOpt, FailOnRegressionOpt, FormatOpt, JsonOpt, LimitOpt, QuietOpt, WaitIdleOpt, WaitOpt, config_path,
    exit_for, load, output_format, workspace,
)

RepoOpt = Annotated[Optional[Path], typer.Option("--repo", help="The checkout whose pulls are checked (default: the config's target.repo).")]


def hook_install(repo: RepoOpt = None, config: ConfigOpt = None) -> None:
    """Install the post-merge and post-rewrite hooks (chaining hooks already there, honouring core.hooksPath).

    Example:  perfbisect hook install
    Example:  perfbisect hook install --repo ~/sglang -c ~/sglang/perfbisect.toml
    """
    from ..hook import hook

    target = repo or load(config).target.repo
    print_lines(hook.install(target, config_path(config)))


def hook_uninstall(repo: RepoOpt = None, config: ConfigOpt = None) -> None:
    """Remove perfbisect's hooks and restore, byte for byte, the ones they replaced.

    Example:  perfbisect hook uninstall --repo ~/sglang
    """
    from ..hook import hook

    print_lines(hook.uninstall(repo or load(config).target.repo))


def hook_status(repo: RepoOpt = None, config: ConfigOpt = None, json_out: JsonOpt = False) -> None:
    """What is installed, and whether it works (the perfbisect it calls runs, its config loads). Exit 4 when it would not.

    Example:  perfbisect hook status --repo ~/sglang
    """
    from ..hook import hook

    data = hook.status(repo or load(config).target.repo)
    if json_out:
        print_json(data)
    else:
        print_lines(hook.format_status(data))
    raise typer.Exit(code=EXIT_OK if data["works"] else EXIT_RUNTIME)


def check_cmd(
    revs: Annotated[Optional[list[str]], typer.Argument(help="OLD NEW (the range a pull brought)", show_default=False)] = None,
    config: ConfigOpt = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    wait_idle: WaitIdleOpt = DEFAULT_WAIT_IDLE_S,
    wait: WaitOpt = False,
    action: Annotated[Optional[str], typer.Option("--action", help="check (answer only) or bisect (then find the culprit); default \\[hook] action.")] = None,
    enqueue: Annotated[bool, typer.Option("--enqueue", help="Queue OLD NEW for the background worker, as the hook does, and return.")] = False,
    drain: Annotated[bool, typer.Option("--drain", help="Be the background worker: check every queued pull, coalesced (the hook runs this).")] = False,
    fail_on_regression: FailOnRegressionOpt = False,
    fmt: FormatOpt = "text",
) -> None:
    """Did OLD..NEW make any configured mode slower beyond noise? Then (action bisect) find the commit.

    Example:  perfbisect check ORIG_HEAD HEAD
    Example:  perfbisect check --enqueue ORIG_HEAD HEAD
    """
    from ..hook import check
    from ..hook.checkqueue import CheckQueue, hook_dir

    words = revs or []
    fmt = output_format(fmt, json_out)
    if drain:
        check.drain(config_path(config))
        raise typer.Exit(code=EXIT_OK)
    if len(words) != 2:
        raise UsageError("Give the range as two revisions: `perfbisect check OLD NEW` (after a pull: ORIG_HEAD HEAD).")
    if action not in (None, "check", "bisect"):
        raise UsageError(f"--action is {action!r}; use check or bisect.")
    cfg = load(config)
    if enqueue:
        with workspace.Workspace.open(cfg, db) as ws:
            old, new = (ws.repo.resolve(w).sha for w in words)
        log = check.enqueue(cfg, config_path(config), old, new)
        print_lines([f"queued {old[:10]}..{new[:10]}; progress in {log}, `perfbisect status` shows it"])
        raise typer.Exit(code=EXIT_OK)
    progress = ConsoleProgress(quiet)
    with workspace.Workspace.open(cfg, db) as ws, ws.exclusive(progress, wait=wait), interruptible(ws, json_out=json_out):
        result = check.run_check(ws, words[0], words[1], progress, action=action, wait_idle_s=wait_idle)
    line = check.finish(cfg, CheckQueue(hook_dir(cfg.cache_dir)), result, Progress())
    if json_out:
        print_json({**result, "line": line})
    elif fmt == "markdown":
        from ..report.markdown import check_markdown

        out_console.out(check_markdown(result, line), highlight=False)
    else:
        print_lines([line])
    raise typer.Exit(code=exit_for(result["verdict"], fail_on_regression))


def status_cmd(config: ConfigOpt = None, json_out: JsonOpt = False,
               limit: LimitOpt = 5) -> None:
    """The hook's checks: running, waiting (and why), queued, and the last results with their reports.

    Example:  perfbisect status --json
    """
    from ..hook.checkqueue import format_status, status  # files only: no use cases, no database

    data = status(load(config), limit=limit)
    if json_out:
        print_json(data)
    else:
        print_lines(format_status(data))
