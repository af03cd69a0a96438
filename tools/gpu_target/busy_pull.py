"""On the GPU machine: a real `git pull` with perfbisect's hook installed while a real matmul holds the
GPU. The check must wait (``perfbisect status`` says why, naming the matmul's pid) and run only
once the GPU has been free for ``[hook] idle_s``.

    python tools/gpu_target/busy_pull.py OUTDIR      (the repo root on PYTHONPATH; torch importable)

Writes OUTDIR/busy-pull.json (what was seen, in order) and prints a short account.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from perfbisect.hook import checkqueue, hook  # noqa: E402
from perfbisect.config import load_config  # noqa: E402
from perfbisect.measure.host import gpu_busy_processes  # noqa: E402
from tests.hook_setup import git, make_pull_setup  # noqa: E402

MATMUL = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for _ in range(20):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
"""


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    seen: list[dict] = []
    t0 = time.monotonic()

    def note(what: str, **data) -> None:
        row = {"t": round(time.monotonic() - t0, 1), "what": what, **data}
        seen.append(row)
        print(json.dumps(row), flush=True)

    root = Path(tempfile.mkdtemp(prefix="pb-busy-"))
    os.environ.setdefault("PERFBISECT_LOCK_DIR", str(root / "locks"))
    setup = make_pull_setup(root, hook_table='idle_s = 5\naction = "check"\nmodes = ["eagle3"]\n')
    text = setup.config.read_text().replace("[stats]\n", "[stats]\nmax_trials_per_commit = 3\n")
    setup.config.write_text(text)
    hook.install(setup.clone, setup.config, python=sys.executable)
    cfg = load_config(setup.config)

    busy_s = 45.0
    matmul = subprocess.Popen([sys.executable, "-c", MATMUL, str(busy_s)])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(pid == matmul.pid for _, pid, _ in gpu_busy_processes()):
        time.sleep(0.5)
    note("matmul on the GPU", pid=matmul.pid, busy=[list(p) for p in gpu_busy_processes()])

    t = time.monotonic()
    pull = git(setup.clone, "pull", "-q", check=False)
    note("git pull returned", rc=pull.returncode, seconds=round(time.monotonic() - t, 3),
         output=(pull.stdout + pull.stderr).strip()[-300:])

    waited_on_matmul = False
    while matmul.poll() is None:
        state = checkqueue.status(cfg)
        worker = state["worker"]
        if worker["phase"] == "waiting" and f"pid {matmul.pid}" in (worker.get("detail") or ""):
            waited_on_matmul = True
        if not seen or seen[-1].get("detail") != worker.get("detail"):
            note("status", phase=worker["phase"], detail=worker.get("detail"), checks_done=len(setup.history()))
        time.sleep(2.0)
    ran_while_busy = len(setup.history()) > 0
    note("matmul ended", checks_done_while_busy=len(setup.history()))

    done = setup.wait_for_checks(1, timeout=400)
    note("check finished", verdict=done[0].get("verdict"), line=done[0].get("line"), report=done[0].get("report"))
    ok = waited_on_matmul and not ran_while_busy and pull.returncode == 0
    result = {"ok": ok, "waited_on_matmul": waited_on_matmul, "ran_while_busy": ran_while_busy,
              "status_lines": checkqueue.format_status(checkqueue.status(cfg)), "seen": seen}
    (out / "busy-pull.json").write_text(json.dumps(result, indent=1))
    print("OK: the check waited for the matmul and ran after it" if ok else "FAILED: see busy-pull.json")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "/tmp/pb-busy-out"))))
