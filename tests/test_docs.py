"""The README is the reference a user reads: every command and every configuration key is in its
tables, or this fails (after sqlite-utils' test_docs.py)."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

from perfbisect.cli.main import cli
from perfbisect.config import known_keys

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def _table_rows(heading: str) -> list[str]:
    """The table rows of the README section under ``heading``."""
    section = README.split(f"\n## {heading}", 1)[1].split("\n## ", 1)[0]
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
    table = "\n".join(_table_rows("Using it on SGLang"))
    missing = [c for c in _commands() if f"`perfbisect {c}`" not in table and f"`perfbisect {c} " not in table]
    assert not missing, f"commands missing from the README's command table: {missing}"


def test_every_config_key_is_in_the_readme_configuration_table() -> None:
    rows = _table_rows("Configuration")
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
    assert not missing, f"config keys missing from the README's configuration table: {missing}"


def test_every_module_is_in_the_architecture_document() -> None:
    """docs/architecture.md describes the code module by module: a new module must be placed there."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    package = Path(__file__).resolve().parent.parent / "perfbisect"
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
