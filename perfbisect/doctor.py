"""`perfbisect doctor`: is this machine and config ready to give trustworthy numbers?

Each check is small and independent (pyperf's _system.py shape): it returns findings sorted into
ok / warn / error, and says what to do about anything that would make results noisier.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .measure.host import gpu_busy_processes
from .report.render import format_snapshot
from .measure.sysstate import collect_snapshot, throttle_reason_names
from .measure.versions import target_versions
from .errors import ConfigError, GitError, PatchError, PerfbisectError, StoreError, Untestable
from .git.targets import is_sglang_target, target_name
from .workload_kinds import kind_of

if TYPE_CHECKING:
    from .settings import Config

# Which check a failure to open the workspace belongs to.
_OPENING: tuple[tuple[type, str], ...] = (
    (GitError, "target repo"),
    (PatchError, "patch stack"),
    (StoreError, "results database"),
    (ConfigError, "config"),  # the cache directory, the [patches] table
)


@dataclass(frozen=True)
class Finding:
    check: str
    state: str  # "ok" | "warn" | "error" | "info"
    message: str


def _config(ctx: dict) -> list[Finding]:
    from .config import deprecations, load_config

    try:
        cfg = load_config(ctx["config_path"])
    except PerfbisectError as exc:
        return [Finding("config", "error", str(exc))]
    ctx["config"] = cfg
    modes = ", ".join(sorted(cfg.modes))
    out = [Finding("config", "ok", f"{cfg.path}: {target_name(cfg)} target; modes {modes}; metric {cfg.stats.metric}; {_trial_shape(cfg)}")]
    if not kind_of(cfg.workload).serves and cfg.server.command:
        out.append(Finding("config", "info", "server.command is not used: a command workload starts what it measures (the [server] table can go)"))
    out.extend(Finding("config", "warn", text) for text in deprecations(cfg))
    return out


def _trial_shape(cfg) -> str:
    """What one trial runs, in the target's own terms (tokens only where requests generate them)."""
    w = cfg.workload
    if not kind_of(w).serves:
        better = "higher" if w.higher_is_better else "lower"
        return f"{w.warmup} warm-up + 1 measured invocation of workload.command per trial, metric '{w.metric}' ({better} is better)"
    runs = f"{w.runs} runs" if w.runs else "auto runs (workload.runs = 0)"
    if is_sglang_target(cfg):
        return f"{w.warmup} warm-up + {runs} of {w.max_tokens} tokens"
    return f"{w.warmup} warm-up + {runs} per trial ({w.kind}, max_tokens = {w.max_tokens})"


def _workspace(ctx: dict) -> list[Finding]:
    """Open what every command opens: repository, cache directory, patch stack, results database."""
    try:
        ctx["ws"] = ctx["open_workspace"](ctx["config"], ctx.get("db"))
    except PerfbisectError as exc:
        check = next((name for kind, name in _OPENING if isinstance(exc, kind)), "workspace")
        return [Finding(check, "error", str(exc))]
    return []


def _repo(ctx: dict) -> list[Finding]:
    ws = ctx["ws"]
    try:
        head = ws.repo.resolve("HEAD")
    except PerfbisectError as exc:
        return [Finding("target repo", "error", str(exc))]
    ctx["head"] = head
    return [Finding("target repo", "ok", f"{ws.config.target.repo} at {head.short} {head.subject[:60]}")]


def _patches(ctx: dict) -> list[Finding]:
    stack = ctx["ws"].stack
    if stack is None:
        return [Finding("patch stack", "info", "no patch stack configured: commits are measured as they are")]
    try:
        check = stack.check_at(ctx["head"])
    except PerfbisectError as exc:
        return [Finding("patch stack", "error", str(exc))]
    if not check.ok:
        return [Finding("patch stack", "error", f"does not apply at HEAD: {check.conflict.describe()}. Rebase the patches onto HEAD.")]
    return [Finding("patch stack", "ok", f"{len(stack)} patches apply at HEAD (stack {stack.hash[:12]})")]


def _interpreter(ctx: dict) -> list[Finding]:
    cfg = ctx["config"]
    try:
        versions = target_versions(cfg.target.python, cwd=cfg.target.repo, timeout_s=120)
    except PerfbisectError as exc:
        return [Finding("target interpreter", "error", str(exc))]
    shown = ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))
    out = [Finding("target interpreter", "ok", f"{cfg.target.python}: {shown or 'no packages of interest found'}")]
    # With [environment] each commit's environment serves, sglang from the worktree: target.python only names the Python.
    if (is_sglang_target(cfg) and "sglang" not in versions and not cfg.environment.enabled
            and "perfbisect.demo.emulator" not in " ".join(cfg.server.command)):
        out.append(Finding("target interpreter", "warn", f"sglang is not importable with {cfg.target.python}: install it (pip install -e python) or set target.python"))
    return out


def _environments(ctx: dict) -> list[Finding]:
    """[environment]: uv, and the environments HEAD (or ``--range``) needs: which resolve, which are built,
    which cannot be made and why."""
    from .measure.resolver import uv_executable, uv_version

    ws = ctx["ws"]
    environments = ws.environments
    if environments is None:
        return []
    try:
        uv = uv_executable(ws.config.environment.uv)
    except PerfbisectError as exc:
        return [Finding("environments", "error", str(exc))]
    rng = ctx.get("range")
    try:
        commits = ws.repo.first_parent_range(*rng) if rng else [ctx["head"]]
        if rng:
            environments.anchor(commits[-1])
        groups = environments.groups(commits)
    except PerfbisectError as exc:
        return [Finding("environments", "error", str(exc))]
    where = f"{commits[0].short}..{commits[-1].short}" if rng else f"HEAD ({commits[0].short})"
    locks = {g.lock_key for g in groups if g.lock_key}
    out = [Finding("environments", "ok", (
        f"{where}: {len(locks)} environment{'s' if len(locks) != 1 else ''} from {ws.config.environment.requirements} "
        f"({uv_version(uv) or uv}); kept under {environments.cache.dir}"
    ))]
    for g in groups:
        if g.problem:
            out.append(Finding("environments", "error", f"{g.span()} cannot get an environment: {g.problem}"))
        elif g.unavailable:
            out.append(Finding("environments", "warn", f"{g.span()} not resolved here: {g.unavailable}"))
        else:
            head = " · ".join(g.highlights()) or f"{len(g.packages)} packages"
            out.append(Finding("environments", "ok", f"{g.span()} ({head}): " + (
                "built" if g.built else "resolved, not installed yet (`perfbisect plan --prepare` installs and verifies it)")))
    return out


def _rust_extensions(ctx: dict) -> list[Finding]:
    """SGLang's on-demand Rust extensions (2026-08-16 on): the toolchain that builds them before each server starts."""
    from .measure import rust_extensions

    ws = ctx["ws"]
    rng = ctx.get("range")
    try:
        commits = ws.repo.first_parent_range(*rng) if rng else [ctx["head"]]
    except PerfbisectError as exc:
        return [Finding("Rust extensions", "error", str(exc))]
    if not rust_extensions.commits_with_loader(ws.repo, commits):
        return []
    how = ws.config.environment.rust_extensions
    tools = rust_extensions.toolchain()
    problem = rust_extensions.problem(ws.config.environment, ws.repo, commits, tools)
    if problem is not None:
        return [Finding("Rust extensions", "error" if problem.kind == "rust-offline" else "warn", problem.message)]
    said = {"prebuild": f"built before each server starts with {tools.get('cargo', 'cargo')} / {tools.get('rustc', 'rustc')}; "
                        f"the server runs with SGLANG_RUST_BUILD_MODE=never",
            "never": "never built: the server runs with SGLANG_RUST_BUILD_MODE=never (bundled or cached modules only)",
            "server": "left to SGLang: it may compile them at server start (counted in the readiness time)"}[how]
    return [Finding("Rust extensions", "ok", f"environment.rust_extensions = {how!r}: {said}")]


def _gpus(ctx: dict) -> list[Finding]:
    snap = collect_snapshot()
    cfg = ctx.get("config")
    if not snap.gpus and getattr(getattr(cfg, "workload", None), "kind", "") == "command":
        return [Finding("GPU state", "info", "no GPU readings here; a command target runs on the CPU, whose load and "
                        "clock the CPU check below covers")]
    if not snap.gpus:
        return [Finding("GPU state", "warn", "no NVML or nvidia-smi: clocks, temperature and throttling will not be recorded, so drift cannot be explained. Install nvidia-ml-py (pip install perfbisect[gpu]).")]
    out = [Finding("GPU state", "ok", f"{len(snap.gpus)} × {snap.gpus[0].name} via {snap.source}")]
    for line in format_snapshot(snap):
        out.append(Finding("GPU state", "info", line))
    for g in snap.gpus:
        names = [n for n in throttle_reason_names(g.throttle_reasons) if n != "GpuIdle"]
        if names:
            out.append(Finding("clocks", "warn", f"GPU {g.index} is being throttled now ({', '.join(names)}): trials will be slower and noisier until it stops"))
        if g.pcie_gen is not None and g.pcie_width is not None and g.pcie_width < 16:
            out.append(Finding("PCIe", "warn", f"GPU {g.index} PCIe link is x{g.pcie_width} gen {g.pcie_gen}: below x16, all-reduce over PCIe will be slow"))
    cfg = ctx.get("config")
    others, ours = split_own_servers(gpu_busy_processes(), cfg.cache_dir if cfg else None)
    out.extend(ours)
    if others:
        who = ", ".join(f"pid {pid} ({name or '?'}) on GPU {gpu}" for gpu, pid, name in others)
        out.append(Finding("GPU idle", "error", f"other processes hold the GPUs: {who}. Trials will refuse to start; stop them or pass --wait-idle SECONDS."))
    elif not ours:
        out.append(Finding("GPU idle", "ok", "no other process holds a GPU"))
    return out


def split_own_servers(
    busy: list[tuple[int, int, str]], cache_dir: Path | None
) -> tuple[list[tuple[int, int, str]], list[Finding]]:
    """Split GPU holders into other processes and perfbisect's own servers (found through the
    pidfiles under ``cache_dir/servers``), which are described as what they are instead."""
    from .measure.server_pidfiles import server_pidfiles
    from .measure.server import group_and_session
    from .runtime.liveness import owner_alive

    groups = {pf.pgid: pf for pf in server_pidfiles(cache_dir)} if cache_dir is not None else {}
    others: list[tuple[int, int, str]] = []
    ours: dict[int, list[tuple[int, int]]] = {}
    for gpu, pid, name in busy:
        ids = group_and_session(pid)
        pgid = next((g for g in (ids or ()) if g in groups), None)
        if pgid is None:
            others.append((gpu, pid, name))
        else:
            ours.setdefault(pgid, []).append((gpu, pid))
    findings = []
    for pgid, holders in ours.items():
        pf = groups[pgid]
        where = ", ".join(f"pid {pid} on GPU {gpu}" for gpu, pid in holders)
        if pf.owner and owner_alive(pf.owner):
            findings.append(Finding("GPU idle", "warn", (
                f"perfbisect's own server holds the GPUs ({where}; process group {pgid}, started by perfbisect "
                f"pid {pf.owner_pid}): a bisection or measurement is running. New trials wait for it (--wait)."
            )))
        else:
            findings.append(Finding("GPU idle", "error", (
                f"a server left by an interrupted perfbisect holds the GPUs ({where}; process group {pgid}). The "
                f"next run kills it; to free the GPUs now: kill -9 -{pgid}"
            )))
    return others, findings


def _cpu(ctx: dict) -> list[Finding]:
    load = os.getloadavg()[0]
    cores = os.cpu_count() or 1
    if load > max(1.0, 0.5 * cores):
        cfg = ctx.get("config")
        slows = "the server's scheduler and tokenizer" if cfg is None or is_sglang_target(cfg) else "what is measured"
        return [Finding("CPU load", "warn", f"load average {load:.1f} on {cores} cores: a busy host slows {slows}; benchmark on a quiet machine")]
    return [Finding("CPU load", "ok", f"load average {load:.1f} on {cores} cores")]


def _database(ctx: dict) -> list[Finding]:
    ws = ctx["ws"]
    cfg = ws.config
    n = len(ws.store.trials(status=None))
    groups = [g for mode in cfg.modes.values() for g in ws.store.identical_build_groups(ws.noise_key(mode))]
    out = [Finding("results database", "ok", f"{ws.db_path}: {n} trials stored")]
    if not groups:
        out.append(Finding("noise model", "warn", f"no repeated trials of one build on this host yet: decisions use the {cfg.stats.prior_sigma_pct:.1f}% prior. Run `perfbisect calibrate HEAD --spread-minutes 60` to measure the noise a bisection meets (HEAD and its parent interleaved over an hour)."))
    else:
        out.append(Finding("noise model", "ok", f"A/A data from {len(groups)} builds on this host"))
    out.extend(_runs_per_trial(ws))
    return out


def _runs_per_trial(ws) -> list[Finding]:
    """How many runs per trial this host's measured noise and timings make cheapest (run_allocation)."""
    from .measure.run_allocation import runs_advice

    out = []
    for name in ws.config.modes:
        advice = runs_advice(ws, name)
        saving = advice.saving_pct
        state = "info" if advice.recommended is None else ("warn" if advice.configured and (saving or 0) >= 10 else "ok")
        out.append(Finding("runs per trial", state, f"[{name}] {advice.line().removeprefix('runs per trial: ')}"))
    return out


def _workload_files(ctx: dict) -> list[Finding]:
    """A command workload: each file the command names that is untracked, edited, or missing at ``--range``'s
    endpoints and not in workload.files (the trial would run another benchmark than yours, or fail)."""
    from .measure.workload_files import file_warnings

    ws = ctx["ws"]
    cfg = ws.config
    if kind_of(cfg.workload).serves:
        return []
    ends = ()
    if ctx["range"]:
        ends = (("good endpoint", ws.repo.resolve(ctx["range"][0])), ("bad endpoint", ws.repo.resolve(ctx["range"][1])))
    found = [Finding("workload files", "warn", w) for w in file_warnings(cfg, ws.repo, ends)]
    if found:
        return found
    listed = f"; workload.files: {', '.join(cfg.workload.files)} from your working tree" if cfg.workload.files else ""
    return [Finding("workload files", "ok", f"every file workload.command names is the one a trial runs{listed}")]


def _launch(ctx: dict) -> list[Finding]:
    """Start the server once (baseline mode, in the checkout) and check the env reaches every worker."""
    from .measure.served import fallback_refusal
    from .measure.server import mode_not_applied
    from .measure.launch_checks import launch_check
    from .placeholders import expand

    ws = ctx["ws"]
    cfg = ws.config
    mode = cfg.modes.get("baseline") or next(iter(cfg.modes.values()))
    if not kind_of(cfg.workload).serves:
        return _command_runs(ctx)
    try:
        # The same locks as a trial: a launch next to a running bisection would disturb its numbers.
        with ws.exclusive():
            seconds, checks, served = launch_check(ws, mode)
    except PerfbisectError as exc:
        return [Finding("server launch", "error", str(exc))]
    out = [Finding("server launch", "ok", f"[{mode.name}] ready in {seconds:.1f}s; {len(checks)} processes in its group")]
    # Which implementation served (a checkout is not the release): a silent fallback the mode refuses is an error.
    refused = fallback_refusal(mode.name, mode.env, served)
    for note in served.notes():
        out.append(Finding("served by", "error" if refused else "warn", note))
    for c in checks:
        if c.ok:
            continue
        out.append(Finding("worker env", "warn", f"configured env did not reach {c.gap()}"))
    # A variable of the mode's own env that the workers do not run with makes every trial of the
    # mode at this checkout untestable: an error here, not a warning.
    wanted = {k: expand((v,), python=cfg.target.python, worktree=str(cfg.target.repo), host=cfg.server.host)[0]
              for k, v in {**cfg.server.env, **mode.env}.items()}
    not_applied = mode_not_applied(mode, checks, wanted)
    if not_applied is not None:
        out.append(Finding("mode env", "error", str(not_applied)))
    if all(c.ok for c in checks):
        out.append(Finding("worker env", "ok", f"all {len(cfg.server.env) + len(mode.env)} configured variables reached every process"))
    return out


def _command_runs(ctx: dict) -> list[Finding]:
    """A command workload starts no server: run workload.command once where a trial would (HEAD, and both
    endpoints of ``--range``) and show the metric it parsed; a missing key, 0, a crash, a timeout are errors."""
    from .measure.launch_checks import preflight
    from .measure.trials import TrialRunner
    from .metrics import describe_workload

    ws = ctx["ws"]
    cfg = ws.config
    try:
        preflight(cfg)
    except PerfbisectError as exc:
        return [Finding("workload command", "error", str(exc))]
    mode = cfg.modes.get("baseline") or next(iter(cfg.modes.values()))
    metric = describe_workload(cfg.workload)
    wanted = [("HEAD", "HEAD")] + ([("good endpoint", ctx["range"][0]), ("bad endpoint", ctx["range"][1])] if ctx["range"] else [])
    out, seen = [], set()
    try:
        with ws.exclusive():  # the same locks as a trial: a run beside a bisection would disturb its numbers
            runner = TrialRunner(ws)
            for label, rev in wanted:
                commit = ws.repo.resolve(rev)
                if commit.sha in seen:
                    continue
                seen.add(commit.sha)
                check = f"workload at {label} {commit.short}"
                try:
                    value, why, seconds = runner.try_command(commit, mode)
                except Untestable as exc:
                    out.append(Finding(check, "warn", f"{exc}: such a commit is skipped, never blamed"))
                    continue
                except PerfbisectError as exc:
                    out.append(Finding(check, "error", str(exc)))
                    continue
                if why is not None or value is None:
                    out.append(Finding(check, "error", f"{why}. Make workload.command print a positive number for "
                                                       f"'{cfg.workload.metric}' (the last JSON object on stdout)."))
                    continue
                out.append(Finding(check, "ok", f"{cfg.workload.metric} = {metric.format(value)} ({metric.direction}) "
                                                f"in {seconds:.1f}s: one invocation, nothing stored"))
    except PerfbisectError as exc:
        out.append(Finding("workload command", "error", str(exc)))
    return out


CHECKS: list[tuple[str, Callable[[dict], list[Finding]], tuple[str, ...]]] = [
    ("config", _config, ()),
    ("workspace", _workspace, ("config",)),
    ("repo", _repo, ("ws",)),
    ("patches", _patches, ("head",)),
    ("environments", _environments, ("head",)),
    ("rust", _rust_extensions, ("head",)),
    ("interpreter", _interpreter, ("config",)),
    ("gpus", _gpus, ()),
    ("cpu", _cpu, ()),
    ("database", _database, ("ws",)),
    ("workload files", _workload_files, ("ws",)),
]


def run_doctor(config_path: Path, db: Path | None = None, launch: bool = False,
               range_: tuple[str, str] | None = None, *, open_workspace: Callable[[Config, Path | None], Any]) -> list[Finding]:
    """Run every check whose prerequisites passed; a failed check never stops the others.

    The repository, patch stack and results database are the ``Workspace`` every command opens, opened by
    ``open_workspace`` (``perfbisect.app.workspace.Workspace.open``: the use case hands it over, as these checks stand
    beneath the use cases); what fails to open is a finding, and the checks that need it are left out.
    """
    ctx: dict = {"config_path": config_path, "db": db, "range": range_, "open_workspace": open_workspace}
    findings: list[Finding] = []
    checks = list(CHECKS) + ([("launch", _launch, ("ws",))] if launch else [])
    try:
        for name, fn, deps in checks:
            if any(d not in ctx for d in deps):
                continue
            try:
                findings.extend(fn(ctx))
            except Exception as exc:  # a broken check is itself a finding, never a crash
                findings.append(Finding(name, "error", f"check failed: {type(exc).__name__}: {exc}"))
    finally:
        if "ws" in ctx:
            ctx["ws"].close()
    findings.append(Finding("python", "info", f"perfbisect runs on {sys.executable} ({sys.version.split()[0]})"))
    return findings
