"""The commands that read what is stored, never measuring: `report` (one HTML file, or with --index a
static site of every report) and `log` (the list of bisections and comparisons, or one in detail).

`log`'s list opens the store directly, not through the use cases: a user types it after every pull,
and ``perfbisect.app`` would load the engine (scipy, numpy) too (tests/test_startup.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import StoreError, UsageError
from ..report.console import ConsoleProgress, out_console, print_json, print_lines, print_report, show
from .options import ConfigOpt, DbOpt, JsonOpt, LimitOpt, app_reports, reading_config


def report_cmd(
    which: Annotated[str, typer.Argument(help="Bisection id (3 or b3), comparison id (c2), or latest.")] = "latest",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="HTML file to write (default: reports/ beside the database).")] = None,
    index: Annotated[Optional[Path], typer.Option("--index", metavar="DIR", help="Write a static site instead: every report plus an index with a history chart per mode.")] = None,
    config: ConfigOpt = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Render a stored bisection or comparison as one self-contained HTML file (opens offline).

    Verdict with effect, interval and noise; culprit; every trial over the range and over time with
    the machine's state; the search's reasoning; speculative health; evidence; environment; how to
    reproduce. Nothing is rerun: it is all read from the results database.

    Example:  perfbisect report latest -o regression.html
    Example:  perfbisect report c2 --db results.sqlite
    Example:  perfbisect report --index site/
    """
    from ..report.report import verdict_line

    cfg = reading_config(config, db)
    with app_reports.stored_results(db, cfg) as store:
        if index is not None:
            written = app_reports.report_index(store, index, cfg, ConsoleProgress(False))
            line = f"site: {written}"
            view = None
        else:
            written, view = app_reports.report(store, which, output, cfg)
            line = verdict_line(view)
    if json_out:
        print_json({"report": str(written), "verdict": view["verdict"] if view else None})
        return
    out_console.print(show(line))
    print_report(written)


def log(
    bisection: Annotated[Optional[str], typer.Argument(help="A bisection id: show that one in detail.")] = None,
    config: ConfigOpt = None,
    db: DbOpt = None,
    limit: LimitOpt = 20,
    json_out: JsonOpt = False,
) -> None:
    """List past bisections and comparisons with their verdicts; `log ID` shows one bisection in detail.

    Example:  perfbisect log --limit 5
    Example:  perfbisect log 3
    Example:  perfbisect log --json
    """
    from ..report.render import format_log, log_json

    cfg = reading_config(config, db)
    path = db or cfg.results_db
    if bisection is not None:
        from ..report.logdetail import bisection_detail
        from ..report.render import trial_row

        digits = bisection.strip().lstrip("b#")
        if not digits.isdigit():
            raise UsageError(f"Cannot read bisection id '{bisection}': give its number (see `perfbisect log`).")
        with app_reports.stored_results(path, cfg) as store:
            bid = int(digits)
            if bid not in {b.id for b in store.bisections(1 << 30)}:
                raise UsageError(f"No bisection #{bid} in {store.path}. List the stored ones with `perfbisect log`.")
            if json_out:
                data = log_json([store.bisection(bid)], [], cfg)["bisections"][0]
                data["trials"] = [trial_row(t) for t in store.trials(bisection_id=bid, status=None)]
            else:
                lines = bisection_detail(store, bid, app_reports.report_path(store.path, f"bisection-{bid}", cfg), cfg)
        if json_out:
            print_json(data)
        else:
            print_lines(lines)
        return
    # The store directly, not through ``perfbisect.app``: importing the use cases would load the engine (scipy) too.
    from ..store import locate, open_store

    where = locate(path)
    if not where.exists() and not (where.path is not None and where.path.exists()):  # listing never creates one;
        # a directory or other non-file goes on to open_store, which says what it is
        raise UsageError(f"No results database at {where}: pass --db PATH, or run `perfbisect run` first.")
    try:
        store = open_store(path)  # writable: what dead processes left running is marked first
    except StoreError as exc:
        if locate(path).shared:
            raise
        try:  # a read-only file or disk: listing needs no write
            store = open_store(path, recover=False, read_only=True)
        except StoreError:
            raise exc from None
    with store:
        bisections, comparisons = store.bisections(limit), store.comparisons(limit)
    if json_out:
        print_json(log_json(bisections, comparisons, cfg))
    else:
        print_lines(format_log(bisections, comparisons))
