"""Build an SGLang checkout's Rust extensions with its own loader, before the server starts.

Run by the trial's interpreter (a commit's environment, which has no perfbisect in it) as
``python rust_prebuild_entry.py WORKTREE`` with ``WORKTREE/python`` on PYTHONPATH and the server's environment:
every crate of ``WORKTREE/rust`` that names a Python module (``[package.metadata.sglang] python-module``, as
SGLang's loader and setup.py discover them) is loaded through ``load_rust_extension``, which builds it with
cargo unless its cache already holds it. Prints each module it made available; standard library only.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_SECTION = re.compile(r"^\[package\.metadata\.sglang\]\s*$(.*?)(?=^\[|\Z)", re.M | re.S)
_MODULE = re.compile(r'^\s*python-module\s*=\s*"([^"]+)"', re.M)


def modules(workspace: Path) -> list[str]:
    found = []
    for manifest in sorted(workspace.rglob("Cargo.toml")):
        if "target" in manifest.relative_to(workspace).parts:
            continue
        for section in _SECTION.findall(manifest.read_text(errors="replace")):
            found.extend(_MODULE.findall(section))
    return found


def main(argv: list[str]) -> int:
    worktree = Path(argv[1]).resolve()
    from sglang.srt.rust_extensions.loader import load_rust_extension  # the checkout's own loader

    for module in modules(worktree / "rust"):
        load_rust_extension(module)
        print(module, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
