"""Build small real git repositories for tests, with real git commands (argument lists only).

Other test modules may import it::

    from tests.repo_factory import RepoFactory
    repo = RepoFactory(tmp_path / "target")
    base = repo.commit("base", {"python/engine.py": "rate = 100\\n"})
    patch = repo.make_patch(base, {"python/engine.py": "rate = 100\\nnccl = 1\\n"}, tmp_path / "patches")
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping

# Fixed identity and dates keep shas independent of the machine; no user/system config leaks in.
_ENV = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_NAME": "Test Committer",
    "GIT_COMMITTER_EMAIL": "committer@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


class RepoFactory:
    """A git repository on a temp path, grown commit by commit."""

    def __init__(self, path: Path, branch: str = "main"):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._tick = 0
        self.git("init", "-q", "-b", branch)
        self.git("config", "commit.gpgsign", "false")
        self.git("config", "core.autocrlf", "false")

    def git(self, *args: str, cwd: Path | None = None) -> str:
        """Run git in the repository; return stdout (raises CalledProcessError on failure)."""
        self._tick += 1
        date = f"2026-01-01T00:{self._tick // 60 % 60:02d}:{self._tick % 60:02d}+00:00"
        env = {**os.environ, **_ENV, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
        done = subprocess.run(
            ["git", *args], cwd=cwd or self.path, env=env, check=True, capture_output=True, text=True
        )
        return done.stdout

    def write(self, files: Mapping[str, str | None], root: Path | None = None) -> None:
        """Write (or, for None, delete) files relative to the repository root."""
        root = root or self.path
        for rel, text in files.items():
            p = root / rel
            if text is None:
                p.unlink(missing_ok=True)
            else:
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(text)

    def commit(self, message: str, files: Mapping[str, str | None] | None = None, allow_empty: bool = False) -> str:
        """Write ``files`` and commit everything; return the new sha."""
        if files:
            self.write(files)
        self.git("add", "-A")
        args = ["commit", "-q", "-m", message]
        if allow_empty:
            args.append("--allow-empty")
        self.git(*args)
        return self.rev("HEAD")

    def rev(self, rev: str) -> str:
        """Full sha of a revision."""
        return self.git("rev-parse", "--verify", f"{rev}^{{commit}}").strip()

    def switch(self, branch: str, create_at: str | None = None) -> None:
        """Check out ``branch``, creating it at ``create_at`` when given."""
        if create_at is not None:
            self.git("checkout", "-q", "-b", branch, create_at)
        else:
            self.git("checkout", "-q", branch)

    def merge(self, branch: str, message: str) -> str:
        """Merge ``branch`` into the current branch with a merge commit (--no-ff); return its sha."""
        self.git("merge", "-q", "--no-ff", "-m", message, branch)
        return self.rev("HEAD")

    def read(self, rev: str, path: str) -> str:
        """A file's content at a revision."""
        return self.git("show", f"{rev}:{path}")

    def make_patch(
        self, at: str, files: Mapping[str, str | None], out_dir: Path, message: str = "local patch", name: str | None = None
    ) -> Path:
        """A `git format-patch` file that changes ``files`` on top of commit ``at``.

        Made in a throwaway worktree so the repository's own checkout is left alone.
        """
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        scratch = self.path.parent / f".patch-scratch-{self._tick}"
        self.git("worktree", "add", "-q", "--detach", str(scratch), at)
        try:
            self.write(files, root=scratch)
            self.git("add", "-A", cwd=scratch)
            self.git("commit", "-q", "-m", message, cwd=scratch)
            text = self.git("format-patch", "-1", "--stdout", "--full-index", "HEAD", cwd=scratch)
        finally:
            self.git("worktree", "remove", "--force", str(scratch))
        if name is None:
            name = f"{len(list(out_dir.glob('*.patch'))) + 1:04d}-{message.replace(' ', '-')}.patch"
        path = out_dir / name
        path.write_text(text)
        return path


def lines(n: int, tag: str = "line") -> str:
    """``n`` numbered lines: enough context for patches to apply at a distance from upstream edits."""
    return "".join(f"{tag} {i}\n" for i in range(n))


def fast_history(path: Path, n: int, *, files: int = 20, extra: Mapping[int, Mapping[str, str]] | None = None) -> list[str]:
    """A first-parent history of ``n`` commits written by one ``git fast-import`` (fast at thousands):
    commit i edits ``src/mod_{i % files}.py``; ``extra[i]`` adds files to commit i. Shas, oldest first."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **_ENV}
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=path, check=True, env=env, capture_output=True)
    chunks: list[bytes] = []

    def data(text: str) -> None:
        raw = text.encode()
        chunks.append(b"data %d\n" % len(raw) + raw + b"\n")

    for i in range(n):
        chunks.append(b"commit refs/heads/main\nmark :%d\n" % (i + 1))
        chunks.append(b"committer Test Committer <committer@example.invalid> %d +0000\n" % (1_700_000_000 + 60 * i))
        data(f"c{i}\n")
        if i:
            chunks.append(b"from :%d\n" % i)
        for rel, text in {f"src/mod_{i % files:02d}.py": f"VERSION = {i}\n", **(extra or {}).get(i, {})}.items():
            chunks.append(f"M 100644 inline {rel}\n".encode())
            data(text)
    chunks.append(b"done\n")
    subprocess.run(["git", "fast-import", "--quiet", "--done"], cwd=path, input=b"".join(chunks), check=True, env=env)
    subprocess.run(["git", "checkout", "-q", "main"], cwd=path, check=True, env=env, capture_output=True)
    out = subprocess.run(["git", "rev-list", "--first-parent", "--reverse", "main"], cwd=path, check=True,
                         capture_output=True, text=True, env=env).stdout.split()
    return out


def target_table(repo: Path, cache_dir: Path) -> str:
    """The ``[target]`` table of a test's perfbisect.toml: this repository, this interpreter, its own cache."""
    return (f"[target]\nrepo = {json.dumps(str(repo))}\npython = {json.dumps(sys.executable)}\n"
            f"cache_dir = {json.dumps(str(cache_dir))}\n")


def command_config(dir: Path, repo: Path, command: str, extra: str = "") -> Path:
    """``dir``/perfbisect.toml: a ``command`` workload (``command``: its argv as a TOML list) printing ``ops_per_s``,
    no warm-up, its own cache under ``dir``; ``extra`` follows the [workload] table (more of its keys, or tables)."""
    config = dir / "perfbisect.toml"
    config.write_text(target_table(repo, dir / "cache") + '[workload]\nkind = "command"\n'
                      f'command = {command}\nmetric = "ops_per_s"\nwarmup = 0\n' + extra)
    return config
