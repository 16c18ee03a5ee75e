#!/usr/bin/env bash
# Quick start 2: the test suite, against a real Iceberg REST server started without Docker.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
exec .venv/bin/python -m pytest -q "$@"
