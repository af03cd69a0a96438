"""`perfbisect report` and the reports other commands write at their end: one stored bisection or
comparison rendered (``report``), a static site of all of them (``report_index``), a calibration's
(``calibration_report``), where they go (``report_path``) and the database a read-only command opens
(``stored_results``). A report is rendered from the store and the ``RepoFacts`` read here, never from
the target's git; a failure to render never hides a verdict just measured (``report_quietly``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..report.replay import INDEX_REPLAY_WORK
from ..errors import UsageError
from ..runtime.progress import Progress
from .workspace import Workspace
from ..settings import Config
from ..store import Store, StoreLocation, locate, open_store

if TYPE_CHECKING:  # only its fields are read
    from .calibration import CalibrateResult


def report_path(db: StoreLocation | Path | str, name: str, config: Config | None = None) -> Path:
    """Where a report goes by default: ``reports/`` beside a SQLite results file; for a database
    server, ``<cache_dir>/reports`` (see ``StoreLocation.reports_dir``). The name starts with the
    database's own (``results-bisection-1.html``): two databases in one folder keep their reports apart."""
    where = locate(db)
    return where.reports_dir(config.cache_dir if config is not None else None) / f"{where.report_prefix}{name}.html"


def stored_results(db: Path | str | None, config: Config | None) -> Store:
    """The results database a command that only reads it opens: ``db``, else the config's default."""
    path = db or (config.results_db if config is not None else None)
    if not path:
        raise UsageError(
            "No results database: pass --db PATH (e.g. .perfbisect/demo/results.sqlite) or --db URL, or run this "
            "where perfbisect.toml is (or with -c CONFIG) to use its database."
        )
    location = locate(path)
    if not location.exists() and not (location.path is not None and location.path.exists()):
        raise UsageError(f"No results database at {location}: pass --db PATH, or run `perfbisect run` first.")
    return open_store(location, recover=False, read_only=True)


def report(store: Store, which: str = "latest", out: Path | None = None, config: Config | None = None) -> tuple[Path, dict]:
    """Render one stored bisection (``N``, ``bN``), comparison (``cN``) or the ``latest`` of either."""
    from ..git.commit_facts import bisection_facts, comparison_facts
    from ..report import comparison_views, views as report_views
    from ..report.report import render_report, write_html

    kind, number = _report_target(store, which)
    if kind == "bisection":
        view = report_views.bisection_view(store, number, config, facts=bisection_facts(store, number, config))
    else:
        view = comparison_views.comparison_view(store, number, config, facts=comparison_facts(store, number, config))
    if out is not None and Path(out).expanduser().is_dir():  # -o DIR: the report goes into it, by its usual name
        out = Path(out).expanduser() / f"{kind}-{number}.html"
    path = write_html(render_report(view), out or report_path(store.path, f"{kind}-{number}", config))
    return path, view


def _report_target(store: Store, which: str) -> tuple[str, int]:
    from ..errors import PerfbisectError

    text = (which or "latest").strip().lower()
    if text == "latest":
        b = store.bisections(1)
        c = store.comparisons(1)
        if not b and not c:
            raise UsageError(f"{store.path} holds no bisection or comparison yet: run `perfbisect run good=REV bad=REV` first.")
        if b and (not c or b[0].started_at >= c[0].created_at):
            return "bisection", b[0].id
        return "comparison", c[0].id
    kind = "comparison" if text.startswith("c") else "bisection"
    digits = text.lstrip("bc#")
    if not digits.isdigit():
        raise UsageError(
            f"Cannot read report id '{which}': give a bisection id (3 or b3), a comparison id (c2) or 'latest' "
            f"(see `perfbisect log`)."
        )
    if kind == "bisection":
        try:
            store.bisection(int(digits))
        except PerfbisectError:
            raise UsageError(f"No bisection #{digits} in {store.path}. List the stored ones with `perfbisect log`.") from None
    return kind, int(digits)


def report_index(store: Store, directory: Path, config: Config | None = None, progress: Progress | None = None) -> Path:
    """A static site: every bisection's and comparison's report, and an index with a history chart per mode."""
    from ..git.commit_facts import bisection_facts, commit_facts
    from ..report import comparison_views, site_index, views as report_views
    from ..report.report import render_index, render_report, write_html

    directory = Path(directory).expanduser().absolute()
    views = []
    for b in store.bisections(1 << 30):
        # A site of many reports replays each search on a tighter budget (coarse to fine: the last
        # steps and the overall shape stay; `perfbisect report N` shows more).
        views.append(report_views.bisection_view(store, b.id, config, replay_work=INDEX_REPLAY_WORK,
                                                 facts=bisection_facts(store, b.id, config)))
    for c in store.comparisons(1 << 30):
        views.append(comparison_views.comparison_view(store, c.id, config, facts=commit_facts(config, (c.a, c.b))))
    entries, history = site_index.index_entries(views)
    for view in views:  # entries are sorted by date: each view is written under its own name
        href = f"{view['kind']}-{view['id']}.html"
        write_html(render_report(view), directory / href)
        if progress:
            progress.detail(f"wrote {directory / href}")
    return write_html(render_index(entries, history, str(store.path)), directory / "index.html")


def report_quietly(progress: Progress | None, render: Callable[[], Path]) -> Path | None:
    """Write a command's report at its end; a failure to render never hides the verdict just measured."""
    from ..errors import PerfbisectError

    try:
        return render()
    except (PerfbisectError, OSError) as exc:
        (progress or Progress()).warn(f"the HTML report could not be written: {exc}")
    except Exception as exc:  # a rendering bug: the measured verdict still prints and keeps its exit code
        (progress or Progress()).warn(
            f"the HTML report could not be rendered ({type(exc).__name__}: {exc}); this is a bug, please report it. "
            f"`perfbisect report` renders it again from the database once fixed."
        )
    return None


def calibration_report(ws: Workspace, result: CalibrateResult) -> Path:
    """The report of a calibration: its trials over time, the machine state and the noise it measured."""
    from ..git.commit_facts import commit_facts
    from ..report import comparison_views
    from ..report.report import render_report, write_html

    stamp = time.strftime("%Y%m%d-%H%M%S")
    db = ws.db_path
    cfg = f" -c {ws.config.path}" if ws.config.path else ""
    per_build = max(sum(1 for t in result.trials if t.identity.commit == result.commit.sha), 2)
    spread = f" --spread-minutes {result.spread_minutes:g}" if result.spread_minutes else ""
    view = comparison_views.trials_view(
        ws.store, f"perfbisect calibrate: {result.commit.short} and {result.against.short} [{result.mode}], "
        f"{len(result.trials)} trials interleaved", "calibrate",
        result.trials, a=result.commit.sha, b=result.against.sha, lines=result.lines, config=ws.config,
        reproduce=[f"perfbisect calibrate {result.commit.sha} --against {result.against.sha} --mode {result.mode} "
                   f"--trials {per_build}{spread}{cfg} --db {db}"],
        facts=commit_facts(ws.config, (result.commit.sha, result.against.sha)),
    )
    view["id"] = f"{result.commit.short}-{stamp}"
    return write_html(render_report(view), report_path(db, f"calibrate-{result.commit.short}-{stamp}", ws.config))

