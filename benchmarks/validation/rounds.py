"""A validation round as data: what it ran, read from ``rounds/NAME.toml``, and the checks that the data is whole.

A round file holds, at its top, what the round is (``name``, ``title``, ``date``, the record ``doc`` and its
``section``) and, for its public-project checks, where it ran (``workdir``, ``python``, ``config_header``); then

- ``[groups.G]``: one kind of run — the public ``project`` (a key of projects.toml), its range (``good``,
  ``bad``), the ``workload`` and its ``metric``, how many ``reps`` (runs G-1 … G-reps), and what sets it apart:
  a ``calibrate`` first, the worktree slot's path length (``slot0_path_len``), the ``mode`` name, extra
  perfbisect.toml keys (``config``);
- ``[[batches]]``: one sitting — the ``engine`` commit that ran, the ``groups`` in the order they ran, the load
  beside it (``load``, and ``background``: the commands that made it), and where its results are kept
  (``results``, a folder of docs/validation/ with NAME.json per run);
- ``[[simulations]]``: a simulation table — the ``script`` and its ``args`` (and ``env``), the ``seeds`` it
  covered, and the ``output`` file kept.

Public-project runs draw no seeds: a trial's layout is a hash of commit, mode and how many trials of them the
database holds, so a fresh database repeats the same draws and a new ``mode`` name gives new ones.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parents[1]  # the repository
ROUNDS = PACKAGE / "rounds"
WORKLOADS = PACKAGE / "workloads"
# the workload tools/validate_public_project.py writes (its BENCH), byte for byte what every round ran as it
VALIDATE_PUBLIC_PROJECT = ROOT / "tools" / "validate_public_project.py"
BENCH_FROM_TOOL = "bench_perfbisect.py"

ROUND_KEYS = {"name": str, "title": str, "doc": str, "date": str}
ROUND_OPTIONAL = {"section": str, "driver": str, "notes": str, "workdir": str, "python": str, "config_header": str,
                  "groups": dict, "batches": list, "simulations": list}
GROUP_KEYS = {"project": str, "good": str, "bad": str, "workload": str, "metric": str, "reps": int}
GROUP_OPTIONAL = {"higher_is_better": bool, "expect": str, "runs_named": str, "calibrate": dict,
                  "slot0_path_len": int, "mode": str, "config": dict, "notes": str}
BATCH_KEYS = {"name": str, "engine": str, "groups": list, "results": str}
BATCH_OPTIONAL = {"workdir": str, "when": str, "load": str, "background": list, "gates": list, "notes": str}
SIM_KEYS = {"name": str, "output": str}
SIM_OPTIONAL = {"script": str, "args": list, "env": dict, "seeds": list, "engine": str, "when": str, "wall_s": float,
                "load": str, "notes": str, "doc": str, "section": str}
DRIVERS = ("kept", "reconstructed", "lost")  # how much of what drove the round survives as code (now this package)
SHA = re.compile(r"^[0-9a-f]{7,40}$")
STRATEGIES = "benchmarks/strategies.py"


@dataclass(frozen=True)
class Run:
    """One perfbisect run of a batch: its name (the results' file stem) and the group it is a rep of."""

    name: str
    group: str
    rep: int


@dataclass
class Round:
    """A round file, parsed (``data``: the TOML as read)."""

    path: Path
    data: dict[str, Any]
    projects: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.data["name"]

    @property
    def groups(self) -> dict[str, dict[str, Any]]:
        return self.data.get("groups", {})

    @property
    def batches(self) -> list[dict[str, Any]]:
        return self.data.get("batches", [])

    @property
    def simulations(self) -> list[dict[str, Any]]:
        return self.data.get("simulations", [])

    def batch(self, name: str | None) -> dict[str, Any]:
        """The batch called ``name`` (the only one when ``name`` is None)."""
        if name is None and len(self.batches) == 1:
            return self.batches[0]
        for b in self.batches:
            if b["name"] == name:
                return b
        known = ", ".join(b["name"] for b in self.batches) or "none"
        raise SystemExit(f"round {self.name} has no batch {name!r} (its batches: {known}); pass --batch NAME")

    def simulation(self, name: str) -> dict[str, Any]:
        for s in self.simulations:
            if s["name"] == name:
                return s
        known = ", ".join(s["name"] for s in self.simulations) or "none"
        raise SystemExit(f"round {self.name} has no simulation {name!r} (its simulations: {known})")

    def runs(self, batch: dict[str, Any]) -> list[Run]:
        """The batch's runs in the order they ran: each group in turn, reps 1…n."""
        out = []
        for g in batch["groups"]:
            group = self.groups[g]
            prefix = group.get("runs_named", g)
            out += [Run(f"{prefix}-{k}", g, k) for k in range(1, group["reps"] + 1)]
        return out

    def workdir(self, batch: dict[str, Any], override: Path | None = None) -> Path:
        """Where the batch keeps clones, configs, databases, caches and its out/ folder."""
        top = override or Path(self.data.get("workdir") or f"/work/validation/{self.name}")
        return top / batch["workdir"] if batch.get("workdir") else top

    def workloads_dir(self, override: Path | None = None) -> Path:
        """Where the workloads are written for every batch of the round: <round workdir>/work."""
        return (override or Path(self.data.get("workdir") or f"/work/validation/{self.name}")) / "work"


def load_projects() -> dict[str, Any]:
    return tomllib.loads((PACKAGE / "projects.toml").read_text(encoding="utf-8"))


def load(name_or_path: str | Path) -> Round:
    """The round called ``name`` (a file of rounds/) or read from a path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = ROUNDS / f"{name_or_path}.toml"
    if not path.exists():
        known = ", ".join(p.stem for p in sorted(ROUNDS.glob("*.toml")))
        raise SystemExit(f"no round {name_or_path!r}; known: {known}")
    return Round(path, tomllib.loads(path.read_text(encoding="utf-8")), load_projects())


def all_rounds() -> list[Round]:
    return [load(p) for p in sorted(ROUNDS.glob("*.toml"))]


def _anchors(document: Path) -> set[str]:
    """GitHub's anchors of ``document``'s headings (as tests/test_docs.py computes them)."""
    text = re.sub(r"^```.*?^```", "", document.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def _typed(where: str, table: dict[str, Any], required: dict[str, type], optional: dict[str, type]) -> list[str]:
    out = []
    for key, kind in required.items():
        if key not in table:
            out.append(f"{where}: no {key}")
    for key, value in table.items():
        kind = required.get(key) or optional.get(key)
        if kind is None:
            out.append(f"{where}: unknown key {key!r}")
        elif kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            continue
        elif not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            out.append(f"{where}: {key} should be a {kind.__name__}, not {type(value).__name__}")
    return out


def _repo_path(where: str, rel: str) -> list[str]:
    if not rel:
        return []
    if Path(rel).is_absolute() or ".." in Path(rel).parts:
        return [f"{where}: {rel} is not a path inside the repository"]
    return [] if (ROOT / rel).exists() else [f"{where}: {rel} does not exist"]


def _doc_section(where: str, doc: str, section: str) -> list[str]:
    out = _repo_path(where, doc)
    if not out and section and section not in _anchors(ROOT / doc):
        out.append(f"{where}: {doc} has no heading #{section}")
    return out


def _config_keys(where: str, config: dict[str, Any]) -> list[str]:
    """Extra perfbisect.toml keys must be keys perfbisect knows."""
    from perfbisect.config import known_keys

    known = set(known_keys())
    out = []
    for table, keys in config.items():
        if not isinstance(keys, dict):
            out.append(f"{where}: config.{table} should be a table")
            continue
        for key in keys:
            if f"{table}.{key}" not in known:
                out.append(f"{where}: config key {table}.{key} is not one perfbisect knows")
    return out


def _arg(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else None


def _agrees_with_table(where: str, args: list[str], table: dict[str, Any]) -> list[str]:
    """benchmarks/strategies.py's --json output holds the cells, strategies and reps its arguments asked for."""
    out = []
    if "--aa-only" in args:
        reps = {row["reps"] for row in table.get("aa_compare", [])}
        if reps != {int(_arg(args, "--aa-reps") or 1000)}:
            out.append(f"{where}: the kept A/A table has reps {sorted(reps)}, the arguments ask for {_arg(args, '--aa-reps')}")
        return out
    cells = _arg(args, "--scenarios")
    if cells is not None and cells.split(",") != list(table.get("scenarios", {})):
        out.append(f"{where}: the kept table's cells are {','.join(table.get('scenarios', {}))}, the arguments' {cells}")
    asked = _arg(args, "--strategies")
    ran = {row["strategy"] for row in table.get("results", [])}
    if asked is not None and set(asked.split(",")) != ran:
        out.append(f"{where}: the kept table ran strategies {sorted(ran)}, the arguments ask for {asked}")
    reps = {row["reps"] for row in table.get("results", [])}
    if _arg(args, "--reps") is not None and reps != {int(_arg(args, "--reps"))}:
        out.append(f"{where}: the kept table has reps {sorted(reps)}, the arguments ask for {_arg(args, '--reps')}")
    return out


def problems(rnd: Round) -> list[str]:
    """Everything wrong with a round's data: keys missing or unknown, a project, workload, group, document,
    heading or kept result it names that is not there, seeds that disagree with the arguments."""
    d, name = rnd.data, rnd.path.stem
    out = _typed(name, d, ROUND_KEYS, ROUND_OPTIONAL)
    if out:
        return out
    if d["name"] != name:
        out.append(f"{name}: name {d['name']!r} is not the file's name")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", d["date"]):
        out.append(f"{name}: date {d['date']!r} is not YYYY-MM-DD")
    if d.get("driver", "kept") not in DRIVERS:
        out.append(f"{name}: driver {d['driver']!r} is not one of {DRIVERS}")
    out += _doc_section(name, d["doc"], d.get("section", ""))
    if not (rnd.batches or rnd.simulations):
        out.append(f"{name}: no batches and no simulations: nothing ran")
    if rnd.batches:
        for key in ("workdir", "python", "config_header"):
            if not d.get(key):
                out.append(f"{name}: public-project batches need {key}")
        if d.get("config_header") and not d["config_header"].startswith("#"):
            out.append(f"{name}: config_header must be a TOML comment")
    for g, group in rnd.groups.items():
        where = f"{name} group {g}"
        errs = _typed(where, group, GROUP_KEYS, GROUP_OPTIONAL)
        out += errs
        if errs:
            continue
        if group["project"] not in rnd.projects:
            out.append(f"{where}: project {group['project']!r} is not in projects.toml")
        for end in ("good", "bad"):
            if not SHA.match(group[end]):
                out.append(f"{where}: {end} {group[end]!r} is not a commit id")
        if group["workload"] != BENCH_FROM_TOOL and not (WORKLOADS / group["workload"]).is_file():
            out.append(f"{where}: workload {group['workload']} is neither in workloads/ nor {BENCH_FROM_TOOL}")
        if group["reps"] < 1:
            out.append(f"{where}: reps must be at least 1")
        cal = group.get("calibrate")
        if cal is not None and (set(cal) != {"commit", "trials"} or not SHA.match(str(cal["commit"]))
                                or not isinstance(cal["trials"], int)):
            out.append(f"{where}: calibrate must be {{commit = SHA, trials = N}}")
        if "slot0_path_len" in group and group["slot0_path_len"] <= len("/worktrees/wt0") + 1:
            out.append(f"{where}: slot0_path_len too short")
        out += _config_keys(where, group.get("config", {}))
    used: set[str] = set()
    for i, batch in enumerate(rnd.batches):
        where = f"{name} batch {batch.get('name', i)}"
        errs = _typed(where, batch, BATCH_KEYS, BATCH_OPTIONAL)
        out += errs
        if errs:
            continue
        if not SHA.match(batch["engine"]):
            out.append(f"{where}: engine {batch['engine']!r} is not a commit id")
        missing = [g for g in batch["groups"] if g not in rnd.groups]
        if missing:
            out.append(f"{where}: groups {missing} are not defined")
            continue
        used.update(batch["groups"])
        for cmd in batch.get("background", []):
            if not (isinstance(cmd, list) and cmd and all(isinstance(a, str) for a in cmd)):
                out.append(f"{where}: each background command is a list of strings")
        out += _repo_path(where, batch["results"])
        if batch["results"] and (ROOT / batch["results"]).is_dir():
            kept = ROOT / batch["results"]
            for run in rnd.runs(batch):
                if not (kept / f"{run.name}.json").is_file():
                    out.append(f"{where}: no kept result {batch['results']}/{run.name}.json")
                if rnd.groups[run.group].get("calibrate") and not (kept / f"{run.name}.calibrate.txt").is_file():
                    out.append(f"{where}: no kept calibrate printout {batch['results']}/{run.name}.calibrate.txt")
            for gates in batch.get("gates", []):
                if not (kept / gates).is_file():
                    out.append(f"{where}: no kept gates output {batch['results']}/{gates}")
        elif not batch["results"] and not batch.get("notes"):
            out.append(f"{where}: results not kept here, and no notes say where they are")
        names = [r.name for r in rnd.runs(batch)]
        if len(set(names)) != len(names):
            out.append(f"{where}: two runs share a name")
    by_results: dict[str, list[str]] = {}
    for batch in rnd.batches:
        if isinstance(batch.get("results"), str) and all(g in rnd.groups for g in batch.get("groups", [])):
            by_results.setdefault(batch["results"], []).extend(r.name for r in rnd.runs(batch))
    for results, names in by_results.items():
        kept = ROOT / results / "runs.jsonl"
        if results and kept.is_file():
            ran = [json.loads(line)["name"] for line in kept.read_text().splitlines() if line.strip()]
            if ran != names:
                out.append(f"{name}: {results}/runs.jsonl ran {ran}, the round file says {names}")
    unused = set(rnd.groups) - used
    if unused:
        out.append(f"{name}: groups {sorted(unused)} run in no batch")
    for i, sim in enumerate(rnd.simulations):
        where = f"{name} simulation {sim.get('name', i)}"
        errs = _typed(where, sim, SIM_KEYS, SIM_OPTIONAL)
        out += errs
        if errs:
            continue
        out += _repo_path(where, sim["output"])
        out += _doc_section(where, sim.get("doc", d["doc"]), sim.get("section", ""))
        if "engine" in sim and not SHA.match(sim["engine"]):
            out.append(f"{where}: engine {sim['engine']!r} is not a commit id")
        if "script" not in sim:
            if not sim.get("notes"):
                out.append(f"{where}: no script, and no notes say why")
            continue
        out += _repo_path(where, sim["script"])
        args = sim.get("args", [])
        if not all(isinstance(a, str) for a in args):
            out.append(f"{where}: args are strings")
            continue
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in sim.get("env", {}).items()):
            out.append(f"{where}: env maps names to strings")
        if "seeds" in sim:
            reps = int(_arg(args, "--reps") or 0) or None
            base = int(_arg(args, "--seed-base") or 0) + (10_000 if "--aa-only" in args else 0)
            reps = int(_arg(args, "--aa-reps") or 0) if "--aa-only" in args else reps
            if reps is not None and sim["seeds"] != [base, base + reps - 1]:
                out.append(f"{where}: seeds {sim['seeds']} disagree with the arguments (first seed {base}, {reps} reps)")
        if sim["script"] == STRATEGIES and sim["output"].endswith(".json") and (ROOT / sim["output"]).is_file():
            out += _agrees_with_table(where, args, json.loads((ROOT / sim["output"]).read_text()))
    return out
