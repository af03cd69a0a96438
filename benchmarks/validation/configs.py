"""One perfbisect.toml per run, written from the round's data: the public-project config of
tools/validate_public_project.py (a ``command`` workload, no patch stack, the project's docs and tests filtered),
each run with its own cache directory, plus what the run's group changes.

A round's configs come out byte for byte as the round wrote them: the eight configs rounds 8 and #34 kept beside
their drivers were rendered again from their round files, identical, before those copies were deleted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .rounds import Round, Run

SLOT0 = "/worktrees/wt0"  # perfbisect's worktree slot 0, under the cache directory


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {v!r}")


def cache_dir(rnd: Round, batch: dict[str, Any], run: Run, workdir: Path | None = None) -> Path:
    """The run's own cache directory: <workdir>/cache/NAME, or — where the group fixes the length of worktree
    slot 0's path — <workdir>/c/NAME-ppp… padded so that <cache>/worktrees/wt0 has exactly that length."""
    top = rnd.workdir(batch, workdir)
    want = rnd.groups[run.group].get("slot0_path_len")
    if want is None:
        return top / "cache" / run.name
    base = str(top / "c" / run.name)
    pad = want - len(SLOT0) - len(base)
    if pad < 2:
        raise SystemExit(f"{base}{SLOT0} is already {len(base) + len(SLOT0)} characters, the round wants slot 0 at "
                         f"{want}: pass a shorter --workdir")
    path = base + "-" + "p" * (pad - 1)
    assert len(path + SLOT0) == want, path
    return Path(path)


def render(rnd: Round, batch: dict[str, Any], run: Run, workdir: Path | None = None, python: str | None = None) -> str:
    """The perfbisect.toml of ``run``."""
    group = rnd.groups[run.group]
    project = rnd.projects[group["project"]]
    mode = group.get("mode", "baseline")
    bench = rnd.workloads_dir(workdir) / group["workload"]
    tables: dict[str, list[tuple[str, Any]]] = {
        "target": [("repo", str(rnd.workdir(batch, workdir) / group["project"])),
                   ("python", python or rnd.data["python"]),
                   ("cache_dir", str(cache_dir(rnd, batch, run, workdir)))],
        "server": [("command", ["{python}", "-c", "raise SystemExit('unused: workload.kind is command')", "{port}"])],
        "workload": [("kind", "command"), ("command", ["{python}", "-B", str(bench), "{worktree}"]),
                     ("metric", group["metric"]), ("higher_is_better", group.get("higher_is_better", True)),
                     ("warmup", 0), ("request_timeout_s", 120)],
        f"modes.{mode}": [("args", [])],
        "stats": [("metric", mode)],
        "filters": [("use_defaults", False), ("ignore", project["ignore"])],
    }
    for table, keys in group.get("config", {}).items():
        rows = tables.setdefault(table, [])
        for key, value in keys.items():
            rows[:] = [(k, v) for k, v in rows if k != key] + [(key, value)]
    parts = [rnd.data["config_header"]]
    for table, rows in tables.items():
        if table == "server":
            parts.append('# Not launched for kind = "command" (kept as the documented config had it).')
        parts.append(f"[{table}]")
        parts += [f"{k} = {_value(v)}" for k, v in rows]
        parts.append("")
    return "\n".join(parts)
