"""Move perfbisect's flat modules into sub-packages that mirror the pipeline, and rewrite every reference.

Run it from a clean checkout (it refuses a dirty one unless --force); it changes files and stages the
moves (`git mv`), and commits nothing:

    python tools/restructure.py --dry-run          # what would move and which files would change
    python tools/restructure.py                    # do it
    python tools/restructure.py --place NAME=PKG   # also move perfbisect/NAME.py into PKG/ (repeatable)

What it does, discovered from the tree rather than from a list of lines:

- ``git mv perfbisect/NAME.py perfbisect/PKG/NAME.py`` (a package directory or another file, such as
  ``slurm_job.sh``, likewise) for every NAME of ``PACKAGES`` that is still at the top, and writes each new
  package's ``__init__.py`` (a docstring only: importing a package imports none of its modules);
- rewrites the imports of every Python file in perfbisect/, tests/, benchmarks/, tools/ and db/, parsed
  with ``ast``: relative imports are resolved from the file's old place and written relative to its new
  one (``from .errors import X`` in ``git/gitrepo.py`` becomes ``from ..errors import X``), absolute ones
  (``perfbisect.measure.trials`` → ``perfbisect.measure.trials``) keep their form; ``from . import cost, slurm``
  becomes one statement per package;
- rewrites dotted names and paths in strings, comments and text files (``"perfbisect.hook.check.X"`` in a
  monkeypatch, ``python -m perfbisect.hook.hookworker``, ``perfbisect/git/gitrepo.py`` in docs, pyproject.toml,
  .ci/ and hooks/); CHANGELOG.md keeps the names its entries were written with;
- writes the package table of docs/architecture.md (between ``<!-- packages:begin -->`` and
  ``<!-- packages:end -->``) and prints what it moved and what is left at the top.

Idempotent: a second run finds nothing at the top to move and only rewrites names that no longer exist
(``perfbisect.measure.trials`` when ``perfbisect/measure/trials.py`` is where it lives), e.g. in a branch merged
after the first run. A module no one placed (added after this table was written) stays at the top and
is named in the summary, so that ``--place`` or an edit of ``PACKAGES`` can put it somewhere.

tests/test_layers.py reads ``PACKAGES`` and ``ORDER`` from here (``layer_of``): the same rules hold for
the flat layout and the packaged one.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import subprocess
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

ROOT_PACKAGE = "perfbisect"

# Package → the top-level modules (or package directories, or other files) it holds, in pipeline order.
PACKAGES: dict[str, tuple[str, ...]] = {
    "runtime": ("children", "liveness", "logtail", "locks", "polling"),
    "git": ("pathfilter", "gitrepo", "patches", "worktrees", "pins", "plan", "skips", "targets", "commit_facts"),
    "engine": ("stats", "covariates", "change_posterior", "changepoint", "effects", "lookahead", "observations",
               "outcomes", "change_checks", "decision", "bisect", "search_replay", "cost", "regressed_path"),
    "measure": ("build", "env_install", "envs", "server", "workload", "warmup", "external_workloads", "host", "sysstate", "versions",
                "versions_probe", "noise_figures", "run_allocation", "workspace", "server_pidfiles", "trial_session",
                "launch_checks", "trials", "search_trials"),
    "report": ("render", "console", "markdown", "trial_tables", "view_rows", "verdict_text", "views", "comparison_views",
               "site_index", "logdetail", "report"),
    "executors": ("loop", "local", "slurm", "slurmjob", "slurm_job.sh"),
    "hook": ("notify", "checkqueue", "hook", "check", "hookworker"),
}
# Top-level modules that stay where they are on purpose (values, config, the doctor's checks, `python -m perfbisect`).
KEPT_AT_TOP = {"config", "doctor", "errors", "init_template", "interrupts", "layout", "metrics",
                "model", "placeholders", "resources", "settings", "workload_kinds", "__main__"}
# Layers, lowest first: a module may import its own layer and the ones before it, never a later one.
# (``store``, ``app``, ``demo`` and ``cli`` are packages of their own; the top-level modules — values,
# config, the doctor — are checked by their own rules in tests/test_layers.py. ``app``, the use cases,
# stands on everything beneath it; above it only the post-pull check, the demo and the command line enter
# it (tests/test_layers.py's MAY_IMPORT_APP). ``report`` sits beneath ``app`` because the report use cases
# render through it. ``cli``, the command line, is the top layer: nothing beneath imports it.)
ORDER: tuple[str, ...] = ("runtime", "store", "git", "engine", "measure", "report", "executors", "app", "hook", "demo",
                          "cli")
DESCRIPTIONS: dict[str, str] = {
    "runtime": "What every layer runs things with: child processes and their process groups, whether a process is still alive, file locks, polling, log tails.",
    "store": "The results database (SQLAlchemy, Alembic migrations in db/).",
    "git": "The target's history: the repository, path filters, the patch stack, worktrees, pinned dependencies, the plan of a range, skipped commits.",
    "engine": "Statistics and search: the noise model, the change-point posterior, the bisection policy, its lookahead and cost, which path regressed.",
    "measure": "One trial: build, its environment, server, workload, system state, host checks, versions, noise figures, run allocation, the workspace a command opens.",
    "report": "Everything that turns results into text or HTML: terminal lines, Markdown, the console, report views and templates.",
    "executors": "Where a search's trials run: the one search loop, and the executors it drives (this host; Slurm jobs and the job's own entry point).",
    "app": "The use cases, a module each by what a user asks for: run and resume a bisection, plan a range, measure and compare, calibrate, reports, housekeeping. They return data; the command line prints it.",
    "hook": "The post-`git pull` hook: installing it, the queue, the detached worker, the check it runs, notifications.",
    "demo": "The demo target and the SGLang emulator that stands in for the GPU server.",
    "cli": "The command line (Typer + Rich): the `perfbisect` command, its commands by what they do, and its one error boundary.",
}
TEXT_SUFFIXES = {".md", ".toml", ".sh", ".txt", ".cfg", ".ini", ".yaml", ".yml", ".j2", ".mako"}
TEXT_DIRS = ("perfbisect", "tests", "benchmarks", "tools", "db", "docs", ".ci", "hooks", "templates")
TEXT_FILES = ("README.md", "pyproject.toml", ".ci/run")
SKIP = ("CHANGELOG.md", "uv.lock")
MARK_BEGIN, MARK_END = "<!-- packages:begin -->", "<!-- packages:end -->"


def package_of(name: str) -> str | None:
    """The package ``PACKAGES`` puts a top-level module (or directory, or file) into."""
    for pkg, names in PACKAGES.items():
        if name in names:
            return pkg
    return None


def layer_of(module: str) -> str | None:
    """The layer of a dotted module name in either layout (``perfbisect.measure.trials`` and
    ``perfbisect.measure.trials`` are both ``measure``); None for the top-level modules."""
    for part in module.split(".")[1:]:
        if part in ORDER:
            return part
        placed = package_of(part)
        if placed is not None:
            return placed
    return None


# ------------------------------------------------------------------------------------------------
# The moves


@dataclass
class Plan:
    moves: list[tuple[Path, Path]] = field(default_factory=list)  # (old, new), relative to the root
    renames: dict[str, str] = field(default_factory=dict)  # old dotted module → new dotted module
    new_packages: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # placed names found nowhere


def _dotted(rel: Path) -> str:
    parts = rel.with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def make_plan(root: Path) -> Plan:
    plan = Plan()
    top = root / ROOT_PACKAGE
    for pkg, names in PACKAGES.items():
        if not (top / pkg / "__init__.py").exists():
            plan.new_packages.append(pkg)
        for name in names:
            candidates = [top / f"{name}.py", top / name] if "." not in name else [top / name]
            src = next((c for c in candidates if c.exists()), None)
            dst_dir = top / pkg
            if src is not None and not (src.is_dir() and name == pkg):
                plan.moves.append((src.relative_to(root), (dst_dir / src.name).relative_to(root)))
                continue
            if not any((dst_dir / c.name).exists() for c in candidates):
                plan.missing.append(f"{name} ({pkg})")
    # Dotted names: every moved module, and every module inside a moved package directory.
    for old, new in plan.moves:
        if old.suffix == ".py":
            plan.renames[_dotted(old)] = _dotted(new)
        elif (root / old).is_dir():
            for path in sorted((root / old).rglob("*.py")):
                rel = path.relative_to(root)
                plan.renames[_dotted(rel)] = _dotted(new / rel.relative_to(old))
    # Names left from before an earlier run (a branch merged since): stale once they exist nowhere.
    for pkg, names in PACKAGES.items():
        for name in names:
            old, new = f"{ROOT_PACKAGE}.{name}", f"{ROOT_PACKAGE}.{pkg}.{name}"
            if old not in plan.renames and not _exists(root, old) and _exists(root, new):
                plan.renames[old] = new
                here = root / ROOT_PACKAGE / pkg / name
                if here.is_dir():
                    for path in sorted(here.rglob("*.py")):
                        sub = _dotted(path.relative_to(root))
                        plan.renames.setdefault(sub.replace(f".{pkg}.{name}", f".{name}", 1), sub)
    return plan


def _exists(root: Path, dotted: str) -> bool:
    base = root.joinpath(*dotted.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


# ------------------------------------------------------------------------------------------------
# Rewriting names


def map_dotted(name: str, renames: dict[str, str]) -> str:
    """``name`` with its longest renamed prefix replaced (``perfbisect.hook.check.status`` →
    ``perfbisect.hook.hook.check.status``); unchanged when no prefix was renamed."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        prefix = ".".join(parts[:cut])
        if prefix in renames:
            return ".".join([renames[prefix], *parts[cut:]])
    return name


_DOTTED = re.compile(rf"(?<![\w.]){ROOT_PACKAGE}(?:\.[A-Za-z_]\w*)+")
_PATH = re.compile(rf"(?<![\w/.-]){ROOT_PACKAGE}/([A-Za-z_][\w.]*(?:/[\w.]*)*)")


def map_text(text: str, plan: Plan, root: Path) -> str:
    """Dotted names and ``perfbisect/...`` paths in free text (strings, comments, docs)."""
    text = _DOTTED.sub(lambda m: map_dotted(m.group(0), plan.renames), text)
    moved = {old.as_posix()[len(ROOT_PACKAGE) + 1:]: new.as_posix()[len(ROOT_PACKAGE) + 1:] for old, new in plan.moves}

    def path(m: re.Match) -> str:
        rest = m.group(1).rstrip(".")
        tail = m.group(1)[len(rest):]
        for old, new in sorted(moved.items(), key=lambda kv: -len(kv[0])):
            is_dir = (root / ROOT_PACKAGE / old).is_dir() or (root / ROOT_PACKAGE / new).is_dir()
            if rest == old and (is_dir or "." in old):
                return f"{ROOT_PACKAGE}/{new}{tail}"
            if is_dir and rest.startswith(old + "/"):
                return f"{ROOT_PACKAGE}/{new}{rest[len(old):]}{tail}"
        return m.group(0)

    return _PATH.sub(path, text)


def _relative(from_package: str, target: str) -> tuple[int, str]:
    """``from <level dots><module>`` that names ``target`` from inside ``from_package``."""
    here, there = from_package.split("."), target.split(".")
    common = 0
    while common < min(len(here), len(there)) and here[common] == there[common]:
        common += 1
    return len(here) - common + 1, ".".join(there[common:])


def _modules_now(root: Path) -> set[str]:
    found = set()
    for path in (root / ROOT_PACKAGE).rglob("*.py"):
        found.add(_dotted(path.relative_to(root)))
    return found


def rewrite_python(source: str, old_module: str, new_module: str, is_package: bool, plan: Plan,
                   old_modules: set[str], root: Path) -> str:
    """The file's imports (parsed), then its strings and comments (tokenized), renamed."""
    tree = ast.parse(source)
    lines = io.StringIO(source).readlines()  # split at "\n" only, as tokenize and ast count lines
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def pos(lineno: int, col: int) -> int:
        # ast columns are UTF-8 byte offsets
        line = lines[lineno - 1]
        return offsets[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8", errors="replace"))

    old_package = old_module if is_package else old_module.rpartition(".")[0]
    new_package = new_module if is_package else new_module.rpartition(".")[0]
    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = old_package.split(".")[: len(old_package.split(".")) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if not (base == ROOT_PACKAGE or base.startswith(ROOT_PACKAGE + ".")):
                continue
            groups: dict[str, list[ast.alias]] = {}
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in old_modules or full in plan.renames:  # the name is a module: its new parent
                    parent = map_dotted(full, plan.renames).rpartition(".")[0]
                else:
                    parent = map_dotted(base, plan.renames)
                groups.setdefault(parent, []).append(alias)
            if list(groups) == [base] and not node.level:
                continue
            start, end = pos(node.lineno, node.col_offset), pos(node.end_lineno, node.end_col_offset)
            segment = source[start:end]

            def head(target: str) -> str:
                if node.level:
                    level, module = _relative(new_package, target)
                    return "from " + "." * level + module
                return "from " + target

            if len(groups) == 1:
                (target,) = groups
                new_head = head(target)
                m = re.match(r"from\s+\.*[\w.]*", segment)
                if m and m.group(0) != new_head:
                    edits.append((start, start + m.end(), new_head))
                continue
            indent = " " * node.col_offset
            statements = []
            for target, aliases in groups.items():
                names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in aliases)
                statements.append(f"{head(target)} import {names}")
            edits.append((start, end, ("\n" + indent).join(statements)))
        elif isinstance(node, ast.Import):
            changed = False
            parts = []
            for alias in node.names:
                new = map_dotted(alias.name, plan.renames)
                changed |= new != alias.name
                parts.append(new + (f" as {alias.asname}" if alias.asname else ""))
            if changed:
                edits.append((pos(node.lineno, node.col_offset), pos(node.end_lineno, node.end_col_offset),
                              "import " + ", ".join(parts)))
    # Strings and comments: dotted names and paths in them.
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    for tok in tokens:
        if tok.type in (tokenize.STRING, tokenize.COMMENT) or tok.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
            new_text = map_text(tok.string, plan, root)
            if new_text != tok.string:
                start = offsets[tok.start[0] - 1] + tok.start[1]
                end = offsets[tok.end[0] - 1] + tok.end[1]
                edits.append((start, end, new_text))
    for start, end, text in sorted(edits, reverse=True):
        source = source[:start] + text + source[end:]
    return source


# ------------------------------------------------------------------------------------------------
# Files


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


def text_files(root: Path) -> list[Path]:
    tracked = [Path(p) for p in git(root, "ls-files", "-z").split("\0") if p]
    keep = []
    for rel in tracked:
        if rel.name in SKIP or not (root / rel).is_file():
            continue
        if rel.as_posix() in TEXT_FILES or (rel.parts[0] in TEXT_DIRS and (rel.suffix == ".py" or rel.suffix in TEXT_SUFFIXES)):
            keep.append(rel)
    return keep


def architecture_section() -> str:
    rows = [MARK_BEGIN, "", "| package | what it holds | modules |", "|---|---|---|"]
    for pkg in ORDER:
        names = ", ".join(f"`{n}`" for n in PACKAGES.get(pkg, ())) or "(its own modules)"
        rows.append(f"| `perfbisect/{pkg}/` | {DESCRIPTIONS[pkg]} | {names} |")
    rows += ["", "Layers, lowest first: " + " → ".join(f"`{p}`" for p in ORDER) + ". A module imports its own "
             "package and the ones before it, never a later one; the values (`errors`, `model`, `layout`, `settings`, "
             "`placeholders`), `config` and the doctor's checks (`doctor`) stay at the top, beneath the command line "
             "(`cli`), which nothing imports but `python -m perfbisect` (tests/test_layers.py checks all of it).", "", MARK_END]
    return "\n".join(rows)


def with_architecture_section(doc: str) -> str:
    section = architecture_section()
    if MARK_BEGIN in doc and MARK_END in doc:
        start, end = doc.index(MARK_BEGIN), doc.index(MARK_END) + len(MARK_END)
        return doc[:start] + section + doc[end:]
    anchor = "\n## Module contracts"
    if anchor in doc:
        i = doc.index(anchor)
        return doc[:i] + "\n## Packages\n\n" + section + "\n" + doc[i:]
    return doc.rstrip() + "\n\n## Packages\n\n" + section + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="print the plan; change nothing")
    parser.add_argument("--force", action="store_true", help="run on a checkout with uncommitted changes")
    parser.add_argument("--place", action="append", default=[], metavar="NAME=PKG",
                        help="also move perfbisect/NAME.py into perfbisect/PKG/ (PKG one of PACKAGES)")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args(argv)
    root = args.root.resolve()
    for item in args.place:
        name, _, pkg = item.partition("=")
        if pkg not in PACKAGES:
            parser.error(f"--place {item}: PKG must be one of {', '.join(PACKAGES)}")
        PACKAGES[pkg] = (*PACKAGES[pkg], name)
    if not args.dry_run and not args.force and git(root, "status", "--porcelain", "--untracked-files=no").strip():
        print("The checkout has uncommitted changes: commit or stash them first (or pass --force).", file=sys.stderr)
        return 2

    plan = make_plan(root)
    old_modules = _modules_now(root)
    new_path = {old: new for old, new in plan.moves}

    def new_location(rel: Path) -> Path:
        for old, new in plan.moves:
            if rel == old:
                return new
            if rel.is_relative_to(old) and (root / old).is_dir():
                return new / rel.relative_to(old)
        return rel

    changed: dict[Path, str] = {}  # new relative path → new text
    imports_changed = 0
    for rel in text_files(root):
        text = (root / rel).read_text(encoding="utf-8")
        dest = new_location(rel)
        if rel.suffix == ".py":
            try:
                is_pkg = rel.name == "__init__.py"
                in_package = rel.parts[0] == ROOT_PACKAGE
                old_mod = _dotted(rel) if in_package else ROOT_PACKAGE + "._outside"
                new_mod = _dotted(dest) if in_package else ROOT_PACKAGE + "._outside"
                new_text = rewrite_python(text, old_mod, new_mod, is_pkg, plan, old_modules, root)
            except SyntaxError as exc:
                print(f"warning: {rel} does not parse ({exc}); only its text was rewritten", file=sys.stderr)
                new_text = map_text(text, plan, root)
            imports_changed += new_text != text
        elif rel.as_posix() == "docs/architecture.md":
            new_text = with_architecture_section(map_text(text, plan, root))
        else:
            new_text = map_text(text, plan, root)
        if new_text != text or dest != rel:
            changed[dest] = new_text

    top_after = sorted(
        p.stem for p in (root / ROOT_PACKAGE).glob("*.py")
        if Path(ROOT_PACKAGE, p.name) not in new_path
    )
    unplaced = [m for m in top_after if m != "__init__" and package_of(m) is None and m not in KEPT_AT_TOP]

    by_package: dict[str, list[str]] = {}
    for old, new in plan.moves:
        by_package.setdefault(new.parts[1], []).append(old.name)
    print(f"{'would move' if args.dry_run else 'moved'} {len(plan.moves)} entries into {len(by_package)} packages"
          + (f" (new: {', '.join(plan.new_packages)})" if plan.new_packages else ""))
    for pkg, names in by_package.items():
        print(f"  perfbisect/{pkg}/: {', '.join(names)}")
    print(f"files {'to rewrite' if args.dry_run else 'rewritten'}: {sum(1 for p in changed if p not in new_path.values())} "
          f"(plus {len(plan.moves)} moved); {len(plan.renames)} old dotted names rewritten wherever found")
    print(f"top level after: {len(top_after)} modules ({', '.join(top_after)})")
    if len(top_after) > 15:
        print("warning: more than 15 modules at the top; place some with --place NAME=PKG", file=sys.stderr)
    if unplaced:
        print(f"not placed by this script (added since it was written?): {', '.join(unplaced)}", file=sys.stderr)
    if plan.missing:
        print(f"placed but found nowhere (renamed or removed?): {', '.join(plan.missing)}", file=sys.stderr)
    if args.dry_run:
        for dest in sorted(changed):
            print(f"  {dest}")
        return 0

    for pkg in plan.new_packages:
        init = root / ROOT_PACKAGE / pkg / "__init__.py"
        init.parent.mkdir(parents=True, exist_ok=True)
        init.write_text(f'"""{DESCRIPTIONS[pkg]}\n\nImporting the package imports none of its modules."""\n', encoding="utf-8")
    for old, new in plan.moves:
        (root / new).parent.mkdir(parents=True, exist_ok=True)
        git(root, "mv", str(old), str(new))
    for dest, text in changed.items():
        (root / dest).write_text(text, encoding="utf-8")
    git(root, "add", "-A", ROOT_PACKAGE)
    if f"{ROOT_PACKAGE}.hookworker" in plan.renames:
        print("note: git hooks installed before this embed `python -m perfbisect.hook.hookworker`, which is gone now "
              "(and `perfbisect hook status` probes the new path, so it will not notice): users re-run "
              "`perfbisect hook install`; say so in CHANGELOG.md, or teach `hook status` to check the installed script")
    print("done: review with `git status` and `git diff --cached --stat`, run tests/test_layers.py, then commit")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
