"""Generate a synthetic git repository shaped like SGLang, fast, with ``git fast-import``.

Shape (defaults): ~5,200 files and ~40 MB of source in SGLang's layout (python/sglang/srt/...,
sgl-kernel/, docs/, test/, benchmark/, examples/, .github/, sgl-model-gateway/), then 10,000
first-parent commits of realistic churn (mostly Python, some docs/tests/CI, a few kernel changes,
a merge of a 3-commit branch every 100 commits). The hot files a local patch stack touches
(engine.py, scheduler.py, deepseek_v2.py) are edited upstream too, but only in their first 80%,
so a patch near their end applies across the whole history.

Usage: python benchmarks/make_sglang_like_repo.py DEST [--commits N] [--files N]
The generator streams into ``git fast-import``: about a minute, not hours. Not for committing.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

ENGINE = "python/sglang/srt/entrypoints/engine.py"
SCHEDULER = "python/sglang/srt/managers/scheduler.py"
DEEPSEEK = "python/sglang/srt/models/deepseek_v2.py"
HOT_FILES = (ENGINE, SCHEDULER, DEEPSEEK)
SPEC_VERSION = 1  # bump when the shape changes, so a cached repository is rebuilt

# (directory, extension, share of files, share of commits touching it)
AREAS = (
    ("python/sglang/srt/models", ".py", 0.12, 0.14),
    ("python/sglang/srt/layers", ".py", 0.14, 0.14),
    ("python/sglang/srt/managers", ".py", 0.06, 0.08),
    ("python/sglang/srt/entrypoints", ".py", 0.02, 0.03),
    ("python/sglang/srt/distributed", ".py", 0.03, 0.03),
    ("python/sglang/srt/mem_cache", ".py", 0.04, 0.04),
    ("python/sglang/srt/utils", ".py", 0.04, 0.04),
    ("python/sglang/multimodal_gen", ".py", 0.05, 0.03),
    ("sgl-kernel/csrc", ".cu", 0.05, 0.04),
    ("sgl-kernel/python/sgl_kernel", ".py", 0.02, 0.02),
    ("docs", ".md", 0.10, 0.12),
    ("test/srt", ".py", 0.14, 0.12),
    ("benchmark", ".py", 0.04, 0.03),
    ("examples", ".py", 0.04, 0.02),
    (".github/workflows", ".yml", 0.01, 0.04),
    ("sgl-model-gateway/src", ".rs", 0.10, 0.06),
)

WORDS = "tensor batch token cache layer expert router kernel stream rank world group shard prefill decode draft".split()


def _line(rng: random.Random, ext: str) -> str:
    a, b, c = rng.choice(WORDS), rng.choice(WORDS), rng.randrange(1 << 20)
    if ext == ".md":
        return f"The {a} {b} path handles case {c} for the {rng.choice(WORDS)} scheduler."
    if ext in (".cu", ".rs"):
        return f"    auto {a}_{b}_{c % 997} = launch_{a}({b}_ptr, {c % 4096}, stream); // {rng.choice(WORDS)}"
    if ext == ".yml":
        return f"      - run: python3 run_suite.py --suite {a}-{b} --shard {c % 16}"
    return f"    {a}_{b}_{c % 997} = self.{a}_{rng.choice(WORDS)}({b}, size={c % 4096})  # {rng.choice(WORDS)}"


def _data(text: str) -> bytes:
    raw = text.encode()
    return b"data %d\n" % len(raw) + raw + b"\n"


def generate(dest: Path, commits: int = 10_000, files: int = 5_200, seed: int = 1234) -> dict:
    """Create the repository at ``dest`` (must not exist) and return a summary of its shape."""
    rng = random.Random(seed)
    dest.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(dest)], check=True)
    for key, value in (("user.name", "Bench"), ("user.email", "bench@example.invalid"), ("commit.gpgsign", "false")):
        subprocess.run(["git", "-C", str(dest), "config", key, value], check=True)

    # Files: each area gets its share, each file ~8 KB (≈ 110 lines of ~75 bytes).
    contents: dict[str, list[str]] = {}
    by_area: list[list[str]] = []
    for directory, ext, share, _ in AREAS:
        names = []
        for i in range(max(1, int(files * share))):
            sub = f"/{rng.choice(WORDS)}" if ext == ".py" and i % 3 == 0 else ""
            path = f"{directory}{sub}/{rng.choice(WORDS)}_{i}{ext}"
            names.append(path)
            contents[path] = [_line(rng, ext) for _ in range(rng.randint(70, 150))]
        by_area.append(names)
    for hot in HOT_FILES:
        contents[hot] = [_line(rng, ".py") for _ in range(400)]
    area_weights = [a[3] for a in AREAS]

    proc = subprocess.Popen(["git", "fast-import", "--quiet", "--done"], cwd=dest, stdin=subprocess.PIPE)
    out = proc.stdin
    assert out is not None
    mark = 0
    when = 1_700_000_000

    def commit(ref: str, subject: str, changes: dict[str, str], parents: list[int]) -> int:
        nonlocal mark, when
        mark += 1
        when += 600
        buf = [f"commit {ref}\nmark :{mark}\ncommitter Dev <dev@example.invalid> {when} +0000\n".encode(), _data(subject)]
        if parents:
            buf.append(f"from :{parents[0]}\n".encode())
            buf.extend(f"merge :{p}\n".encode() for p in parents[1:])
        for path, text in changes.items():
            buf.append(f"M 100644 inline {path}\n".encode())
            buf.append(_data(text))
        buf.append(b"\n")
        out.write(b"".join(buf))
        return mark

    def edit(path: str) -> str:
        lines = contents[path]
        limit = int(len(lines) * 0.8) if path in HOT_FILES else len(lines)
        ext = Path(path).suffix
        for _ in range(rng.randint(1, 4)):
            lines[rng.randrange(limit)] = _line(rng, ext)
        if rng.random() < 0.3 and path not in HOT_FILES:
            lines.insert(rng.randrange(len(lines)), _line(rng, ext))
        return "\n".join(lines) + "\n"

    def random_change() -> dict[str, str]:
        changes = {}
        area = rng.choices(range(len(AREAS)), weights=area_weights)[0]
        for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
            changes[rng.choice(by_area[area])] = ""
        if rng.random() < 0.05:
            changes[rng.choice(HOT_FILES)] = ""
        return {p: edit(p) for p in changes}

    tip = commit("refs/heads/main", "Initial import", {p: "\n".join(l) + "\n" for p, l in contents.items()}, [])
    first_parent = 1
    merges = side_commits = 0
    while first_parent < commits:
        if first_parent % 100 == 50:
            side = tip
            for j in range(3):
                side = commit(f"refs/heads/feature-{merges}", f"[Feature] part {j + 1} of feature {merges}", random_change(), [side])
                side_commits += 1
            tip = commit("refs/heads/main", f"Merge branch 'feature-{merges}'", {}, [tip, side])
            merges += 1
        else:
            area = rng.choice(("[Fix]", "[Perf]", "[Feature]", "[Refactor]", "[Docs]", "[CI]"))
            tip = commit("refs/heads/main", f"{area} change {first_parent}", random_change(), [tip])
        first_parent += 1
    out.write(b"done\n")
    out.close()
    if proc.wait() != 0:
        raise SystemExit("git fast-import failed")
    subprocess.run(["git", "-C", str(dest), "checkout", "-q", "-f", "main"], check=True)
    size = sum(len("\n".join(l)) + 1 for l in contents.values())
    summary = {
        "spec_version": SPEC_VERSION,
        "files": len(contents),
        "source_bytes": size,
        "first_parent_commits": first_parent,
        "merges": merges,
        "side_commits": side_commits,
        "seed": seed,
    }
    (dest / ".git" / "perfbisect-bench.json").write_text(json.dumps(summary))
    return summary


def ensure_repo(dest: Path, commits: int = 10_000, files: int = 5_200) -> dict:
    """Reuse the repository at ``dest`` when it was generated with the same shape, else build it."""
    marker = dest / ".git" / "perfbisect-bench.json"
    if marker.exists():
        summary = json.loads(marker.read_text())
        if summary.get("spec_version") == SPEC_VERSION and summary.get("first_parent_commits") == commits:
            return summary
    if dest.exists():
        import shutil

        shutil.rmtree(dest)
    return generate(dest, commits=commits, files=files)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    parser.add_argument("--commits", type=int, default=10_000)
    parser.add_argument("--files", type=int, default=5_200)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    summary = ensure_repo(args.dest, args.commits, args.files)
    summary["seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    sys.exit(main())
