"""Versions of the packages the *target's* interpreter imports, and the GPU driver's.

The probe, :file:`versions_probe.py` beside this module, runs in the target's Python (an argument
list, ``[python, probe]``): importing torch here would initialise CUDA in the measuring process and
perturb the very thing being measured. The driver comes from the GPU collector (NVML/nvidia-smi).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import ConfigError
from .sysstate import CollectorSet

# A real file, shipped inside the package (the wheel takes every file under perfbisect/).
PROBE = Path(__file__).with_name("versions_probe.py")


OLDEST_TARGET_PYTHON = (3, 8)  # the version probe's importlib.metadata


def too_old(python: str, version: str) -> str:
    return (f"The target interpreter {python!r} is Python {version}; perfbisect needs Python "
            f"{'.'.join(map(str, OLDEST_TARGET_PYTHON))} or newer there (to read which packages each trial ran with; "
            f"SGLang itself needs 3.10 or newer). Set [target] python in perfbisect.toml to a newer interpreter.")


def check_target_python(python: str) -> None:
    """A ConfigError where ``python`` is older than the version probe reads (``python_version_problem``)."""
    problem = python_version_problem(python)
    if problem:
        raise ConfigError(problem)


def python_version_problem(python: str, timeout_s: float = 60.0) -> str | None:
    """Why ``python`` cannot be the target's interpreter because it is older than the probe reads, or None. One short
    `-c` any Python answers (Python 2 included), so `plan` and `run` say it before any trial; an interpreter that
    cannot be run is left to the checks that name what runs it."""
    try:
        proc = subprocess.run([python, "-c", "import sys; print('%d.%d.%d' % tuple(sys.version_info[:3]))"],
                              capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    try:
        version = tuple(int(p) for p in proc.stdout.strip().split("."))
    except ValueError:
        return None  # not a Python that prints its version: the probe says what it is
    if version[:2] < OLDEST_TARGET_PYTHON:
        return too_old(python, proc.stdout.strip())
    return None


def target_versions(
    python: str,
    cwd: Path | None = None,
    collectors: Sequence[Any] | None = None,
    timeout_s: float = 180.0,
    extra_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """torch, CUDA, NCCL, sglang, sgl-kernel, flashinfer, transformers and python versions of the
    target's interpreter, plus the driver from NVML/nvidia-smi; a missing package has no entry.

    ``extra_env`` is what the server gets (PYTHONPATH to the checkout): the versions are those the
    server imports."""
    env = dict(os.environ, **(extra_env or {}), CUDA_VISIBLE_DEVICES="")
    try:
        proc = subprocess.run(
            [python, str(PROBE)],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        raise ConfigError(
            f"The target interpreter {python!r} cannot be run ({exc.strerror or exc}). Set "
            "[target] python in perfbisect.toml to the Python that runs SGLang, e.g. "
            "/path/to/venv/bin/python."
        ) from None
    except subprocess.TimeoutExpired:
        raise ConfigError(
            f"The target interpreter {python!r} did not report its package versions within "
            f"{timeout_s:.0f} s. Check that `{python} -c 'import torch'` works quickly, or set "
            "[target] python to the right interpreter."
        ) from None
    old = next((ln for ln in proc.stdout.splitlines() if ln.startswith("PERFBISECT_TOO_OLD ")), None)
    if old is not None:
        raise ConfigError(too_old(python, old.split(" ", 1)[1]))
    line = next(
        (ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("PERFBISECT_VERSIONS ")),
        None,
    )
    if proc.returncode != 0 or line is None:
        tail = (proc.stderr or proc.stdout).strip()[-400:]
        raise ConfigError(
            f"The target interpreter {python!r} could not report its package versions (exit "
            f"{proc.returncode}): {tail}. Set [target] python in perfbisect.toml to a Python 3 "
            "interpreter that runs SGLang."
        )
    found = json.loads(line.split(" ", 1)[1])
    versions = {str(k): str(v) for k, v in found.items() if v is not None}
    cset = CollectorSet(collectors)
    try:
        driver = cset.driver_version()
        if driver:
            versions["driver"] = driver
        cuda_driver = getattr(cset.gpu, "cuda_driver_version", None)
        if cuda_driver is not None:
            value = cuda_driver()
            if value:
                versions["cuda_driver"] = value
    finally:
        cset.close()
    return versions
