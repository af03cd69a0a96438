"""No secret in a report: values of variables that look like secrets (and those `[server] secret_env` names) are
redacted in every kind of HTML report and in the index — a real seeded demo bisection, comparison and calibration."""

from __future__ import annotations

from pathlib import Path

from perfbisect.demo.target import make_demo_target
from perfbisect.report.secrets import is_secret, redact
from tests.cli_runner import run_command

SECRETS = ("hf_SECRETVALUE_one", "sk-SECRETVALUE-two", "plain-SECRETVALUE-three")


def test_every_report_kind_and_the_index_redact_secret_values(tmp_path):
    target = make_demo_target(tmp_path / "demo", commits=6, seeded=True)
    text = target.config.read_text()
    text = text.replace("[server.env]\n", f'[server.env]\nHF_TOKEN = "{SECRETS[0]}"\nMY_PLAIN = "{SECRETS[2]}"\n', 1)
    text = text.replace("[modes.baseline]\nargs = []\n", f'[modes.baseline]\nargs = []\n', 1)
    text = text.replace('env = { PERFBISECT_SEEDED_MODE = "baseline" }',
                        f'env = {{ PERFBISECT_SEEDED_MODE = "baseline", OPENAI_API_KEY = "{SECRETS[1]}" }}', 1)
    text = text.replace("shutdown_grace_s = 5\n", 'shutdown_grace_s = 5\nsecret_env = ["MY_PLAIN"]\n', 1)
    target.config.write_text(text)
    cfg, db = str(target.config), str(tmp_path / "r.sqlite")
    assert "OPENAI_API_KEY" in text and "secret_env" in text
    runs = [
        run_command("run", f"good={target.good}", f"bad={target.bad}", "-c", cfg, "--db", db, timeout=600),
        run_command("compare", target.good, target.bad, "-m", "baseline", "--max-trials", "2", "-c", cfg, "--db", db),
        run_command("calibrate", target.bad, "-n", "2", "-m", "baseline", "-c", cfg, "--db", db),
        run_command("report", "--index", str(tmp_path / "site"), "-c", cfg, "--db", db),
    ]
    for proc in runs:
        assert proc.returncode in (0, 1, 3), proc.stderr
    pages = list(tmp_path.rglob("*.html"))
    kinds = {p.name.split("-")[0] for p in pages}
    assert len(pages) >= 4 and any("bisection" in p.name for p in pages) and any("comparison" in p.name for p in pages), kinds
    assert any("calibrat" in p.name for p in pages) and (tmp_path / "site" / "index.html").is_file(), [p.name for p in pages]
    shown = 0
    for page in pages:
        html = page.read_text()
        for secret in SECRETS:
            assert secret not in html, f"{secret} in {page}"
        if "Configured environment" in html:
            shown += 1
            assert "HF_TOKEN=REDACTED" in html and "MY_PLAIN=REDACTED" in html and "NCCL_PROTO=LL" in html
            assert "Values redacted" in html and "OPENAI_API_KEY" in html
    assert shown >= 3  # the bisection's, the comparison's and the calibration's reports show the environment


def test_names_that_look_like_secrets():
    assert all(is_secret(n) for n in ("HF_TOKEN", "OPENAI_API_KEY", "api_key", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY"))
    assert not any(is_secret(n) for n in ("NCCL_PROTO", "PYTHONPATH", "CUDA_VISIBLE_DEVICES", "NCCL_BUFFSIZE"))
    shown, hidden = redact({"HF_TOKEN": "x", "NCCL_ALGO": "Ring", "MINE": "y"}, ["MINE"])
    assert shown == {"HF_TOKEN": "REDACTED", "NCCL_ALGO": "Ring", "MINE": "REDACTED"} and hidden == ["HF_TOKEN", "MINE"]


def test_report_o_writes_only_regular_files_and_leaves_anything_else_untouched(demo_run, tmp_path):
    """`report -o` onto a FIFO, a symlink and a character device: exit 2, each left exactly as it was; onto a
    regular file or a new path: written."""
    import os
    import stat

    db = demo_run.result["db"]
    fifo = tmp_path / "pipe.html"
    os.mkfifo(fifo)
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    cases = [fifo, link]
    device = tmp_path / "full"
    if os.geteuid() == 0:  # as root, as the probe that turned /dev/full into an HTML file
        os.mknod(device, stat.S_IFCHR | 0o600, os.makedev(1, 7))
        cases.append(device)
    for path in cases:
        before = os.lstat(path)
        proc = run_command("report", "latest", "--db", db, "-o", str(path))
        assert proc.returncode == 2, (path, proc.stdout, proc.stderr)
        assert "only written as a regular file" in proc.stderr and "was left as it is" in proc.stderr
        after = os.lstat(path)
        assert (after.st_mode, after.st_ino, after.st_size) == (before.st_mode, before.st_ino, before.st_size)
    assert target.read_text() == "keep me" and os.readlink(link) == str(target)
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary file left behind
    regular = tmp_path / "old.html"
    regular.write_text("old")
    for path in (regular, tmp_path / "new.html"):
        proc = run_command("report", "latest", "--db", db, "-o", str(path))
        assert proc.returncode == 0, proc.stderr
        assert path.read_text().startswith("<!doctype html") or "<html" in path.read_text()[:500]
