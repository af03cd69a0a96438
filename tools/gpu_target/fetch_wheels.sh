#!/usr/bin/env bash
# Download (here, where PyPI is reachable) the wheels the device machine lacks, for its Python 3.12,
# into the repo's .whl/ (ignored by git; pass ".whl" in the device `run` call's carry).
# The device image already has anyio, h11, click, httpx, typer, rich, jinja2, markupsafe,
# typing-extensions, scipy, numpy, nvidia-ml-py, torch, transformers and tokenizers.
set -eu
repo=$(cd "$(dirname "$0")/../.." && pwd)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$repo/.whl" \
    starlette==1.10.0 uvicorn==0.54.0 \
    gitpython==3.2.1 gitdb==4.0.12 smmap==5.0.3 \
    sqlalchemy==2.1.9 alembic==1.20.1 mako==1.4.3 greenlet==3.5.6
ls -l "$repo/.whl"
