#!/usr/bin/env bash
# Set up on a fresh machine and run the main job end to end on the bundled sample crawl.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/install.sh
exec .venv/bin/python -m pipelines.run sample --out out --train "$@"
