"""Run by perfbisect with the *target's* interpreter (``python versions_probe.py``), never imported.

Prints one line, ``PERFBISECT_VERSIONS {json}``: the python, torch, CUDA, NCCL, sglang, sgl-kernel,
flashinfer and transformers versions that interpreter sees (a missing package has no entry).
Importing torch here is fine (a separate, short-lived process); perfbisect empties
CUDA_VISIBLE_DEVICES for it so that nothing in it can create a context on the GPUs.

Keep it to the standard library and to Python 3 syntax any target might still run.
"""
import os
import sys

# Run as a script, Python puts this file's folder (perfbisect/, whose bisect.py, config.py, ...
# would shadow the target's modules) first on sys.path; put back what `python -c` had there: the
# working directory, i.e. the target's checkout. os and sys are loaded before any path is searched.
if sys.path and os.path.realpath(sys.path[0] or os.curdir) == os.path.dirname(os.path.realpath(__file__)):
    sys.path[0] = ""

import json  # noqa: E402
from importlib import metadata  # noqa: E402

out = {"python": sys.version.split()[0]}


def dist(*names):
    for n in names:
        try:
            return metadata.version(n)
        except Exception:
            pass
    return None


for key, names in (("torch", ("torch",)), ("sglang", ("sglang",)),
                   ("sgl-kernel", ("sgl-kernel", "sgl_kernel")),
                   ("flashinfer", ("flashinfer-python", "flashinfer")),
                   ("transformers", ("transformers",))):
    v = dist(*names)
    if v:
        out[key] = v
if "torch" in out:
    try:
        import torch
        if torch.version.cuda:
            out["cuda"] = str(torch.version.cuda)
        try:
            # ncclGetVersion is a plain library call: it creates no CUDA context.
            v = torch.cuda.nccl.version()
            out["nccl"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
            out["nccl_source"] = "torch"
        except Exception:
            pass
    except Exception as exc:
        out["torch_import_error"] = type(exc).__name__ + ": " + str(exc)[:200]
if "nccl" not in out:
    for n in ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"):
        v = dist(n)
        if v:
            out["nccl"] = v
            out["nccl_source"] = n
            break
print("PERFBISECT_VERSIONS " + json.dumps(out))
