"""A real single-node Slurm cluster in a temp directory, for the Slurm executor's tests.

``running_cluster(root)`` writes a sandbox ``slurm.conf`` (no cgroups: ``proctrack/linuxproc``,
``task/none``; this host's short name as controller and only node; state, spool, logs and pid files
under ``root``; free ports), starts ``munged`` with its own key and socket, ``slurmctld`` and
``slurmd``, waits until the node is idle, and stops all three at the end. Clients find it through
``SLURM_CONF`` (``cluster.env``). Needs root (slurmd runs jobs as their user) and Debian's
``slurm-wlm`` and ``munge`` packages.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tests.conftest import free_port

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "scancel", "sinfo")
START_TIMEOUT_S = 60.0


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None]


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    node: str
    env: dict[str, str]

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, check=check, timeout=60)

    def log(self, name: str) -> str:
        path = self.root / "log" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def slurm_conf(root: Path, munge_socket: Path, node: str, ctld_port: int, slurmd_port: int, cpus: int) -> str:
    """The sandbox configuration (the report of issue #14 quotes it)."""
    return f"""\
ClusterName=perfbisect-test
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
MinJobAge=600
KillWait=5
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


def _wait(what: str, ready, cluster_root: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready():
        if time.monotonic() > deadline:
            logs = "\n".join(
                f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted((cluster_root / "log").glob("*.log"))
            )
            raise RuntimeError(f"{what} did not come up within {START_TIMEOUT_S:.0f}s\n{logs}")
        time.sleep(0.2)


def _stop(pidfile: Path) -> None:
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@contextmanager
def running_cluster(root: Path) -> Iterator[SlurmCluster]:
    root = Path(root).resolve()
    for sub in ("state", "spool", "log", "run", "munge"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    node = socket.gethostname().split(".")[0]
    # munged refuses a socket in a directory whose ancestors not everyone may traverse (pytest's
    # temp directories are 0700): the socket gets a directory of its own under the temp root.
    socket_dir = Path(tempfile.mkdtemp(prefix="perfbisect-munge-"))
    socket_dir.chmod(0o755)
    socket_path = socket_dir / "munge.socket"
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, socket_path, node, free_port(), free_port(), os.cpu_count() or 1))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    cluster = SlurmCluster(root, conf, node, env)
    try:
        subprocess.run(
            ["munged", f"--socket={socket_path}", f"--key-file={key}", f"--log-file={root / 'log' / 'munged.log'}",
             f"--pid-file={root / 'run' / 'munged.pid'}", f"--seed-file={root / 'munge' / 'munged.seed'}"],
            check=True, capture_output=True, text=True, timeout=60,
        )
        subprocess.run(["slurmctld", "-f", str(conf)], env=env, check=True, capture_output=True, text=True, timeout=60)
        subprocess.run(["slurmd", "-f", str(conf)], env=env, check=True, capture_output=True, text=True, timeout=60)

        def idle() -> bool:
            out = cluster.run("sinfo", "--noheader", "--format=%t", check=False)
            return out.returncode == 0 and out.stdout.strip() == "idle"

        _wait("the Slurm node", idle, root)
        yield cluster
    finally:
        cluster.run("scancel", "--user", str(os.getuid()), check=False) if conf.exists() else None
        _stop(root / "run" / "slurmd.pid")
        _stop(root / "run" / "slurmctld.pid")
        _stop(root / "run" / "munged.pid")
        shutil.rmtree(socket_dir, ignore_errors=True)
