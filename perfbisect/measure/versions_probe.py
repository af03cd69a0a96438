"""Run by perfbisect with the *target's* interpreter (``python versions_probe.py``), never imported.

Prints one line, ``PERFBISECT_VERSIONS {json}``: the python, torch, CUDA, NCCL, sglang, sgl-kernel,
flashinfer and transformers versions that interpreter sees (a missing package has no entry), and
``sglang_file``: where ``import sglang`` would load it from (found, not imported). The version is the
installed distribution's (since SGLang 0.5.9 ``sglang.__version__`` is that too, not the checkout's),
so the file is what says which code serves.
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

# Python 3.8 is the oldest this probe runs on (importlib.metadata): an older one says so, in syntax Python 2 reads.
if sys.version_info < (3, 8):
    sys.stdout.write("PERFBISECT_TOO_OLD %d.%d.%d\n" % tuple(sys.version_info[:3]))
    sys.exit(3)

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
                   ("sgl-kernel", ("sglang-kernel", "sglang_kernel", "sgl-kernel", "sgl_kernel")),  # renamed at 0.5.10
                   ("flashinfer", ("flashinfer-python", "flashinfer")),
                   ("flashinfer-cubin", ("flashinfer-cubin", "flashinfer_cubin")),
                   ("transformers", ("transformers",))):
    v = dist(*names)
    if v:
        out[key] = v
try:
    from importlib.util import find_spec

    spec = find_spec("sglang")  # finds the package without running its __init__
    if spec is not None:
        where = spec.origin if spec.origin not in (None, "namespace") else None
        if where is None and spec.submodule_search_locations:
            where = list(spec.submodule_search_locations)[0]  # a namespace package: its first folder
        if where:
            out["sglang_file"] = os.path.abspath(where)
except Exception:
    pass
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
