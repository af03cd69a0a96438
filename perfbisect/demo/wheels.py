"""Real wheels of a tiny package, written without a build backend: the demo's stand-in for sgl-kernel.

A wheel is a zip archive with the package's files, a ``.dist-info`` directory (``METADATA``,
``WHEEL``, ``RECORD`` with each file's sha256) and a name that carries its version and tags
(PEP 427). Writing one directly keeps the demo offline and free of setuptools; pip and uv install
it like any other. The archive is byte-for-byte the same on every machine (fixed dates).
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

DEMO_KERNEL = "demo-kernel"  # the distribution name (SGLang's is sgl-kernel)
_EPOCH = (2026, 1, 1, 0, 0, 0)


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def write_wheel(wheel_dir: Path, name: str, version: str, modules: dict[str, str] | None = None,
                requires: tuple[str, ...] = (), extras: tuple[str, ...] = ()) -> Path:
    """Write ``name``'s wheel of ``version`` (pure Python, any platform) into ``wheel_dir``.

    ``modules``: path inside the wheel → source; by default one package that knows its version.
    ``requires``: its ``Requires-Dist`` lines (what torch's wheel says of its CUDA packages); ``extras``: its
    ``Provides-Extra`` names (``flashinfer-python[cu13]``), whose requirements carry ``; extra == "NAME"``.
    """
    dist = name.replace("-", "_")
    modules = modules or {f"{dist}/__init__.py": f'"""{name} {version} (a demo stand-in for a compiled kernel package)."""\n\n__version__ = "{version}"\n'}
    info = f"{dist}-{version}.dist-info"
    files: dict[str, bytes] = {path: text.encode() for path, text in modules.items()}
    requires_dist = "".join(f"Provides-Extra: {e}\n" for e in extras) + "".join(f"Requires-Dist: {r}\n" for r in requires)
    files[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: perfbisect demo package\n"
                                 f"{requires_dist}").encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: perfbisect-demo\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = [_record_line(path, data) for path, data in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel_dir = Path(wheel_dir)
    wheel_dir.mkdir(parents=True, exist_ok=True)
    out = wheel_dir / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in files.items():
            zf.writestr(zipfile.ZipInfo(path, _EPOCH), data)
    return out
