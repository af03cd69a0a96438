"""The commands that set perfbisect up on a target and keep its state in order: `init` (write a
perfbisect.toml), `doctor` (what would break or add noise), `skip` (mark commits untestable) and `gc`
(remove worktrees and, with --build-cache, the build cache).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import EXIT_OK, EXIT_USAGE, UsageError
from ..report.console import err_console, out_console, print_json, print_lines, show
from .options import ConfigOpt, DbOpt, JsonOpt, app_housekeeping, config_path, load, workspace


def doctor(
    config: ConfigOpt = None,
    db: DbOpt = None,
    launch: Annotated[bool, typer.Option("--launch", help="Also start the server once and check the env reaches every worker; a command target: run workload.command once at HEAD (and at --range's endpoints) and show the metric it printed.")] = False,
    json_out: JsonOpt = False,
    range_: Annotated[Optional[str], typer.Option("--range", metavar="GOOD..BAD", help="Check the environments (\\[environment]: one per uv lock) of every commit of this range, not only HEAD's.")] = None,
) -> None:
    """Check config, target interpreter, environments, GPU idleness, clocks and throttling, and
    what would add noise.

    Example:  perfbisect doctor
    Example:  perfbisect doctor --launch
    Example:  perfbisect doctor --launch --range v1.0..HEAD   (a command target: run it at both endpoints)
    Example:  perfbisect doctor --range bba2fc4..HEAD
    Example:  perfbisect doctor --json
    """
    bounds = None
    if range_ is not None:
        good, sep, bad = range_.partition("..")
        if not sep or not good or not bad:
            raise UsageError(f"--range {range_!r} is not GOOD..BAD: give two revisions joined by '..', e.g. --range bba2fc4..HEAD.")
        bounds = (good, bad)
    findings = app_housekeeping.doctor(config_path(config), db, launch=launch, range_=bounds)
    errors = any(f.state == "error" for f in findings)
    if json_out:
        print_json({"ok": not errors, "findings": [{"check": f.check, "state": f.state, "message": f.message}
                                                     for f in findings]})
        raise typer.Exit(code=EXIT_USAGE if errors else EXIT_OK)
    style = {"ok": "green", "warn": "yellow", "error": "bold red", "info": "dim"}
    for f in findings:
        out_console.print(f"[{style[f.state]}]{f.state:>5}[/] {show(f.check)}: {show(f.message)}")
    if any(f.state == "error" for f in findings):
        raise typer.Exit(code=EXIT_USAGE)


def init(
    path: Annotated[Path, typer.Option("--path", help="Where to write perfbisect.toml.")] = Path("perfbisect.toml"),
    model: Annotated[str, typer.Option("--model", help="--model-path for the server.")] = "/models/Kimi-K2.5-INT4",
    draft: Annotated[str, typer.Option("--draft", help="EAGLE-3 draft model path.")] = "/models/Kimi-K2.5-EAGLE3",
    python: Annotated[Optional[str], typer.Option("--python", help="The interpreter SGLang runs under.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    command: Annotated[bool, typer.Option("--command", help="Any repository: a benchmark command that prints a JSON metric (no server).")] = False,
    openai: Annotated[bool, typer.Option("--openai", help="Any OpenAI-compatible server (vLLM, TGI, ...) launched per trial.")] = False,
) -> None:
    """Write a commented perfbisect.toml for an SGLang checkout (baseline + EAGLE-3, NCCL env, --tp 8),
    or, with --command / --openai, for any repository or any OpenAI-compatible server.

    Example:  cd ~/sglang && perfbisect init --model /models/Kimi-K2.5 --draft /models/eagle3
    Example:  cd ~/myproject && perfbisect init --command
    Example:  cd ~/vllm && perfbisect init --openai --model /models/Llama-3.1-8B
    """
    from ..init_template import (
        find_target_python, nccl_settings, remote_code, render_sglang_config, render_template, site_dirs_of,
    )

    if path.exists() and not force:
        raise UsageError(f"{path} already exists. Pass --force to overwrite it, or --path to write elsewhere.")
    if command and openai:
        raise UsageError("--command and --openai pick different templates: give one of them.")
    if command or openai:
        kind = "command" if command else "openai"
        target = python or shutil.which("python3") or sys.executable
        path.write_text(render_template(kind, target, model))
        what = "workload.command and workload.metric" if command else "server.command, workload.model and the model path"
        out_console.print(f"wrote {show(str(path))}: edit {what}, then run `perfbisect doctor` and `perfbisect plan good=REV bad=REV`")
        return
    if python:
        target, imports, how = python, True, "--python"
    else:
        target, imports, how = find_target_python()
    environ = dict(os.environ)
    site_dirs = site_dirs_of(target, environ)
    has_pyproject = (path.resolve().parent / "python" / "pyproject.toml").is_file()  # init runs in the checkout
    path.write_text(render_sglang_config(target, model, draft, environ=environ, site_dirs=site_dirs,
                                         environments=has_pyproject))
    out_console.print(f"wrote {show(str(path))}: edit the model paths and the patch directory, then run `perfbisect doctor`")
    out_console.print(f"target.python = {show(target)} ({show(how)})")
    out_console.print("environments: " + ("each commit's python/pyproject.toml resolved by uv, one environment per lock "
                                          "(`perfbisect plan` lists them, `plan --prepare` installs them)" if has_pyproject else
                                          "off ([environment] commented out): this checkout has no python/pyproject.toml"))
    needed, why = remote_code(model)
    flag = {True: "on", False: "off", None: "commented out (uncomment if needed)"}[needed]
    out_console.print(f"--trust-remote-code: {flag}: {show(why)}")
    nccl = nccl_settings(environ, site_dirs)
    if nccl:
        out_console.print("NCCL variables from your environment: " + ", ".join(show(f"{s.name}={s.value} ({s.source})") for s in nccl))
    else:
        out_console.print("NCCL variables: none set in your shell or a sitecustomize.py; commented examples written")
    if not imports:
        err_console.print(
            f"[yellow]warning:[/yellow] no interpreter that imports sglang was found; {show(target)} was written. "
            f"Set target.python to the one SGLang runs under (or pass --python)."
        )


def skip(
    revs: Annotated[Optional[list[str]], typer.Argument(help="Commits to mark untestable (none: list the marked ones).", show_default=False)] = None,
    undo: Annotated[bool, typer.Option("--undo", help="Unmark these commits: the search may measure them again.")] = False,
    reason: Annotated[str, typer.Option("--reason", help="Why (shown by plan and run).")] = "",
    config: ConfigOpt = None,
) -> None:
    """Mark commits untestable, as `git bisect skip` does: never measured, never blamed.

    A change next to a marked commit is reported as a set. Kept in <cache_dir>/skipped.json, so
    every later run, resume and plan sees them; \\[filters] skip in the config does the same.

    Example:  perfbisect skip 1a2b3c4 HEAD~7 --reason "broken build"
    Example:  perfbisect skip --undo 1a2b3c4
    Example:  perfbisect skip
    """
    if undo and not revs:
        raise UsageError("perfbisect skip --undo needs the commits to unmark, e.g. `perfbisect skip --undo 1a2b3c4`.")
    changed, marked = app_housekeeping.skip(load(config), revs or [], undo=undo, reason=reason)
    lines = [f"{'unmarked' if undo else 'marked untestable'}: {c.short} {c.subject[:60]}" for c in changed]
    if undo and len(changed) < len(revs or []):
        lines.append(f"{len(revs or []) - len(changed)} of those were not marked by `perfbisect skip` ([filters] skip is edited in the config)")
    lines += [f"{s.commit.short}  {s.describe()}  {s.commit.subject[:60]}" for s in marked] or ["no commit is marked untestable"]
    print_lines(lines)


def gc(
    config: ConfigOpt = None,
    db: DbOpt = None,
    build_cache: Annotated[bool, typer.Option("--build-cache", help="Also empty the build cache and remove the environments (\\[environment]).")] = False,
) -> None:
    """Remove perfbisect's worktrees (and optionally the build cache). Stored results are kept.

    Example:  perfbisect gc --build-cache
    """
    with workspace.Workspace.open(load(config), db) as ws, ws.exclusive(gpu=False):
        removed = app_housekeeping.gc(ws, build_cache=build_cache)
    print_lines([f"removed {r}" for r in removed] or ["nothing to remove"])
