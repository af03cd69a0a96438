"""`perfbisect demo`: build the demo target and bisect it with the real pipeline (``perfbisect.app``).

The demo uses the app like any command does; the app knows nothing of the demo.
"""

from __future__ import annotations

from pathlib import Path

from ..app import bisection, planning, reports
from ..config import load_config
from ..app.workspace import Workspace
from ..runtime.progress import Progress
from ..store import open_store
from .target import ATTN_NEW, ATTN_VERSION, DEMO_ATTN, DEMO_KERNEL_NEW, KERNEL_NEW, KERNEL_OLD, DemoTarget, make_demo_target
from .wheels import DEMO_KERNEL


def run_demo(
    directory: Path,
    progress: Progress | None = None,
    *,
    drift_only: bool = False,
    commits: int = 36,
    seed: int = 7,
    db: Path | str | None = None,
    variant: str = "speculative",
    seeded: bool = False,
) -> tuple[bisection.BisectResult, DemoTarget]:
    """Build the demo target (planted slowdown, or drift only) and bisect it with the real pipeline.
    Results go to ``db`` (a path or a database URL), by default ``<directory>/results.sqlite``.
    ``seeded``: measure with ``perfbisect.demo.seeded`` (computed, not timed) instead of the emulator."""
    progress = progress or Progress()
    progress.info(f"building the demo target in {directory} ...")
    target = make_demo_target(
        Path(directory),
        commits=commits,
        drift_only=drift_only,
        seed=seed,
        variant=variant,
        # Drift only: sessions differ (σ 2%) and the machine slowly slows down (−0.3% per session).
        drift_per_session=-0.003 if drift_only else 0.0,
        seeded=seeded,
    )
    slows = "the target model (both modes)" if variant == "target" else "the EAGLE-3 verify cycle only"
    what = f"planted {target.planted[:10]}, which slows {slows}" if target.planted else "no code change (drift only)"
    progress.info(f"demo repository: {target.commits} commits, {what}; patch stack of 3; "
                  + ("measured: seeded calculation of the emulator's speed" if seeded else "server: SGLang emulator"))
    config = load_config(target.config)
    with Workspace.open(config, db or target.root / "results.sqlite") as ws, ws.exclusive(progress):
        result = bisection.run_bisection(ws, target.good, target.bad, progress)
    return result, target


def demo_report(target: DemoTarget, result: bisection.BisectResult, db: Path | str | None = None) -> Path:
    """The demo's report, beside its database (``<demo dir>/reports/bisection-N.html``; for a
    database server, under the demo's cache directory)."""
    config = load_config(target.config)
    with open_store(db or target.root / "results.sqlite", recover=False) as store:
        return reports.report(store, str(result.bisection_id), config=config)[0]


def demo_environments(target: DemoTarget, result: bisection.BisectResult, db: Path | str | None = None) -> dict | None:
    """What the demo's moving dependencies cost: the environments of its range (one per uv lock) and what moves
    between them, how many were built, and trials skipped as untestable (none: every commit ran in the
    environment its own pyproject resolves to). None without pins."""
    if target.pin_bump is None:
        return None
    from ..report.render import format_environments

    config = load_config(target.config)
    with open_store(db or target.root / "results.sqlite", recover=False) as store:
        trials = store.trials(bisection_id=result.bisection_id, status=None)
    with Workspace.open(config, db or target.root / "results.sqlite") as ws:
        planned = planning.plan(ws, target.good, target.bad, check_patches=False)
        built = len(ws.environments.cache.entries()) if ws.environments is not None else 0
    groups = planned.environments
    locks = {g.lock_key for g in groups if g.lock_key}
    untestable = sum(1 for t in trials if t.status.value == "skipped")
    moved = (f"kernel renamed {DEMO_KERNEL} {KERNEL_OLD} → {DEMO_KERNEL_NEW} {KERNEL_NEW} at {target.pin_bump[:10]}"
             + (f", {DEMO_ATTN} {ATTN_VERSION} → {ATTN_NEW} at {target.attn_bump[:10]}" if target.attn_bump else ""))
    return {"pin_bump": target.pin_bump, "attn_bump": target.attn_bump, "environments": len(locks), "built": built,
            "untestable_trials": untestable,
            "groups": [{"commits": len(g.commits), "packages": g.packages, "built": g.built,
                        "moves": [m.text() for m in g.moves], "problem": g.problem} for g in groups],
            "line": f"{moved}; {len(locks)} environments (one per uv lock, {built} built), {untestable} trials untestable",
            "lines": format_environments(groups, planned.environments_note)}
