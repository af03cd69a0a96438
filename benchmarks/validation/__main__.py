"""The command line of the validation rounds (run from the repository root)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from . import check_gates, configs, driver, summarize
from .rounds import ROOT, all_rounds, load, problems

EXAMPLES = """\
examples:
  python -m benchmarks.validation list                          # every round, what it ran, where its results are
  python -m benchmarks.validation show issue34                  # its batches, runs, config differences, commands
  python -m benchmarks.validation check                         # every round file parses and names what exists
  python -m benchmarks.validation config issue34 reg-1 --batch wallclock   # one run's perfbisect.toml
  # re-run issue #34's busy batch on this machine, from local clones, beside its two CPU-bound loops:
  python -m benchmarks.validation prepare issue34 --batch busy --workdir /tmp/i34 \\
      --source packaging=/work/.mirror/pypa+packaging/repo --source tomli=/work/.mirror/hukkin+tomli/repo
  python -m benchmarks.validation run issue34 --batch busy --workdir /tmp/i34 --background
  python -m benchmarks.validation run issue34 --batch busy --workdir /tmp/i34 --only reg-1 tomli-1   # some of them
  python -m benchmarks.validation summarize issue34 --batch busy --workdir /tmp/i34
  python -m benchmarks.validation check-gates /tmp/i34/db/*.sqlite
  # a simulation table again (its stdout into --out, never over the kept record):
  python -m benchmarks.validation simulate issue19-round9 floor-ends4-cap10 --out /tmp/r9
"""


def _sources(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, path = pair.partition("=")
        if not sep:
            raise SystemExit(f"--source takes PROJECT=PATH, not {pair!r}")
        out[key] = path
    return out


def cmd_list(args) -> int:
    for rnd in all_rounds():
        d = rnd.data
        print(f"{rnd.name}  {d['date']}  {d['title']}")
        for b in rnd.batches:
            runs = rnd.runs(b)
            print(f"    batch {b['name']}: {len(runs)} runs on engine {b['engine']} -> {b['results'] or '(not kept here)'}")
        for s in rnd.simulations:
            print(f"    simulation {s['name']} -> {s['output']}")
    return 0


def cmd_show(args) -> int:
    rnd = load(args.round)
    d = rnd.data
    print(f"{rnd.name}: {d['title']} ({d['date']})\nrecord: {d['doc']}" + (f"#{d['section']}" if d.get("section") else ""))
    print(f"round file: {rnd.path.relative_to(ROOT)}; driver: {d.get('driver', 'kept')}")
    if d.get("notes"):
        print(f"notes: {d['notes']}")
    for g, group in rnd.groups.items():
        extra = []
        if group.get("calibrate"):
            extra.append(f"calibrate {group['calibrate']['commit']} --trials {group['calibrate']['trials']} first")
        if group.get("slot0_path_len"):
            extra.append(f"worktree slot 0 at {group['slot0_path_len']} characters")
        if group.get("mode"):
            extra.append(f"mode {group['mode']}")
        for table, keys in group.get("config", {}).items():
            extra += [f"{table}.{k} = {v!r}" for k, v in keys.items()]
        print(f"  group {g}: {group['project']} {group['good'][:10]}..{group['bad'][:10]}, {group['workload']} "
              f"({group['metric']}, {'higher' if group.get('higher_is_better', True) else 'lower'} is better), "
              f"{group['reps']} rep(s)" + (f"; {'; '.join(extra)}" if extra else "")
              + (f"; expect {group['expect']}" if group.get("expect") else ""))
    for b in rnd.batches:
        print(f"  batch {b['name']} (engine {b['engine']}{', ' + b['when'] if b.get('when') else ''}): "
              + " ".join(r.name for r in rnd.runs(b)))
        if b.get("load"):
            print(f"    load: {b['load']}")
        for cmd in b.get("background", []):
            print(f"    background: {shlex.join(cmd)}")
        print(f"    workdir: {rnd.workdir(b)}; results kept in: {b['results'] or b.get('notes', '')}")
    for s in rnd.simulations:
        env = " ".join(f"{k}={v}" for k, v in s.get("env", {}).items())
        how = (env + " " if env else "") + (shlex.join(["python", s["script"], *s.get("args", [])]) if "script" in s
                                           else "(not recorded)")
        print(f"  simulation {s['name']}: {how}\n    -> {s['output']}" + (f"; seeds {s['seeds'][0]}-{s['seeds'][1]}"
                                                                          if s.get("seeds") else ""))
    return 0


def cmd_check(args) -> int:
    bad = 0
    for rnd in all_rounds():
        found = problems(rnd)
        bad += len(found)
        print(f"{rnd.name}: " + ("ok" if not found else "\n  ".join(["problems:", *found])))
    return 1 if bad else 0


def cmd_config(args) -> int:
    rnd = load(args.round)
    batch = rnd.batch(args.batch)
    (run,) = [r for r in rnd.runs(batch) if r.name == args.run] or [None]
    if run is None:
        raise SystemExit(f"batch {batch['name']} has no run {args.run!r}")
    sys.stdout.write(configs.render(rnd, batch, run, args.workdir, args.python))
    return 0


def cmd_prepare(args) -> int:
    rnd = load(args.round)
    driver.prepare(rnd, rnd.batch(args.batch), args.workdir, args.python, _sources(args.source))
    return 0


def cmd_run(args) -> int:
    rnd = load(args.round)
    return driver.run_batch(rnd, rnd.batch(args.batch), args.workdir, args.perfbisect, args.only, args.background)


def cmd_summarize(args) -> int:
    rnd = load(args.round)
    sys.stdout.write(summarize.write(rnd.workdir(rnd.batch(args.batch), args.workdir) / "out"))
    return 0


def cmd_check_gates(args) -> int:
    for db in args.databases:
        print(check_gates.check(db), flush=True)
    return 0


def cmd_simulate(args) -> int:
    rnd = load(args.round)
    return driver.run_simulation(rnd.simulation(args.name), args.out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.validation", description=__doc__ + " The rounds are the "
                                 "files of benchmarks/validation/rounds/; results are kept in docs/validation/.",
                                 epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)

    def with_batch(p):
        p.add_argument("round", help="a round's name (a file of rounds/, without .toml)")
        p.add_argument("--batch", help="which batch (needed when the round has more than one)")
        p.add_argument("--workdir", type=Path, help="instead of the round's workdir (clones, configs, databases)")

    sub.add_parser("list", help="every round").set_defaults(func=cmd_list)
    p = sub.add_parser("show", help="what a round ran")
    p.add_argument("round")
    p.set_defaults(func=cmd_show)
    sub.add_parser("check", help="every round file parses and names what exists").set_defaults(func=cmd_check)
    p = sub.add_parser("config", help="one run's perfbisect.toml, on stdout")
    with_batch(p)
    p.add_argument("run", help="the run's name (reg-1, aa-3 ...)")
    p.add_argument("--python", help="the interpreter the workload runs with (default: the round's)")
    p.set_defaults(func=cmd_config)
    p = sub.add_parser("prepare", help="clone the projects, write the workloads and every run's config")
    with_batch(p)
    p.add_argument("--python", help="the interpreter the workload runs with (default: the round's)")
    p.add_argument("--source", action="append", default=[], metavar="PROJECT=PATH",
                   help="clone PROJECT from this local clone or mirror instead of its url")
    p.set_defaults(func=cmd_prepare)
    p = sub.add_parser("run", help="the batch's runs, one after another, each with a fresh database")
    with_batch(p)
    p.add_argument("--only", nargs="+", default=[], metavar="RUN", help="only these runs (default: all, in order)")
    p.add_argument("--perfbisect", default=driver.default_perfbisect(), help="the perfbisect command to run")
    p.add_argument("--background", action="store_true",
                   help="start the batch's background load first (its own processes, stopped at the end)")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("summarize", help="out/summary.txt of a batch from out/runs.jsonl and the results")
    with_batch(p)
    p.set_defaults(func=cmd_summarize)
    p = sub.add_parser("check-gates", help="replay each stored bisection and test its culprit against its parent")
    p.add_argument("databases", nargs="+", type=Path)
    p.set_defaults(func=cmd_check_gates)
    p = sub.add_parser("simulate", help="run one of a round's simulation tables again")
    p.add_argument("round")
    p.add_argument("name")
    p.add_argument("--out", type=Path, required=True, help="the folder its output goes to")
    p.set_defaults(func=cmd_simulate)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
