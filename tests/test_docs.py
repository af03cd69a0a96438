"""The documents a user reads: every command is in the README's command table, every configuration key in
docs/configuration.md's table, every module in docs/architecture.md, and every repository path they name
exists (after sqlite-utils' test_docs.py)."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

from perfbisect.cli.main import cli
from perfbisect.config import known_keys

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")


def _table_rows(document: str, heading: str) -> list[str]:
    """The table rows of the section of ``document`` under the level-2 ``heading``."""
    assert f"\n## {heading}" in document, f"no section '## {heading}'"
    section = document.split(f"\n## {heading}", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("|")]


def _commands() -> list[str]:
    """Every command a user can type, sub-commands spelled out (``patches check``)."""
    root = typer.main.get_command(cli)
    names: list[str] = []

    def walk(group, prefix: str) -> None:
        for name, command in sorted(group.commands.items()):
            if command.hidden:
                continue
            if getattr(command, "commands", None) is not None:
                walk(command, f"{prefix}{name} ")
            else:
                names.append(prefix + name)

    walk(root, "")
    return names


def test_the_command_walk_finds_the_commands_a_user_types() -> None:
    commands = _commands()
    assert {"run", "resume", "plan", "patches check", "log", "report"} <= set(commands)


def test_every_command_is_in_the_readme_command_table() -> None:
    table = "\n".join(_table_rows(README, "Using it on SGLang"))
    missing = [c for c in _commands() if f"`perfbisect {c}`" not in table and f"`perfbisect {c} " not in table]
    assert not missing, f"commands missing from the README's command table: {missing}"


def test_every_config_key_is_in_the_configuration_table() -> None:
    rows = _table_rows(CONFIGURATION, "Tables and keys")
    by_table: dict[str, str] = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        if len(cells) < 2:
            continue
        for name in re.findall(r"`\[\[?([a-z_.A-Z]+)\]?\]`", cells[0]):
            name = name.replace(".NAME", "")
            by_table[name] = by_table.get(name, "") + cells[1]
    missing = []
    for key in known_keys():
        table, _, leaf = key.rpartition(".")
        table = table.replace(".NAME", "")
        text = by_table.get(table, "") + (by_table.get(table.rpartition(".")[0], "") if "." in table else "")
        if f"`{leaf}`" not in text:
            missing.append(key)
    assert not missing, f"config keys missing from the table of docs/configuration.md: {missing}"


def test_every_module_is_in_the_architecture_document() -> None:
    """docs/architecture.md describes the code module by module: a new module must be placed there."""
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    package = ROOT / "perfbisect"
    missing = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if rel.name == "__init__.py" and len(rel.parts) > 1:
            continue  # a package is described under its own heading
        if rel.name == "__init__.py" or rel.name == "__main__.py":
            continue
        stem = path.stem
        if not any(p in doc for p in (str(rel), f"`{stem}`", f"`{stem}.py`", f"{stem}.py")):
            missing.append(str(rel))
    assert missing == [], f"modules docs/architecture.md does not describe: {missing}"


# A path of this repository as the documents name it (``docs/hook.md``, ``benchmarks/scale.py``): a top-level
# folder of the repository, then a name with a file extension. Fenced code blocks are left out: they show
# example output of the user's own repository (``filtered: only docs/guide.md``).
_REPO_PATH = re.compile(
    r"(?<![\w./{<-])((?:docs|benchmarks|tools|tests|perfbisect|hooks)/[\w./-]*\.(?:md|py|png|txt|json|sh|toml))\b"
)


def _prose(text: str) -> str:
    """``text`` without its fenced code blocks."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _anchors(document: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``document``: lower case, punctuation dropped, spaces as ``-``."""
    headings = re.findall(r"^#+ (.+)$", _prose(document.read_text(encoding="utf-8")), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_repository_path_the_documents_name_exists() -> None:
    """README.md, docs/*.md and the validation records (docs/validation/*.md, which link the round files of
    benchmarks/validation/) name no file, and link no file or heading, that the repository does not have
    (docs/archive/ is a notebook, kept as written)."""
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
                 *sorted((ROOT / "docs" / "validation").glob("*.md"))]
    missing = []
    for document in documents:
        prose = _prose(document.read_text(encoding="utf-8"))
        for match in _REPO_PATH.finditer(prose):
            path = match.group(1)
            if not (ROOT / path).exists():
                missing.append(f"{document.relative_to(ROOT)}: {path}")
        for link, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", prose):
            if "://" in link:
                continue
            target = document.parent / link if link else document
            if not target.exists():
                missing.append(f"{document.relative_to(ROOT)}: link {link}")
            elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
                missing.append(f"{document.relative_to(ROOT)}: link {link}#{anchor}")
    assert missing == [], f"paths the documents name that the repository does not have: {missing}"
