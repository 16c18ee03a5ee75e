#!/usr/bin/env bash
# Quick start 1: the main job end to end on the embedded local Iceberg REST catalog.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh local
exec .venv/bin/lance-iceberg-ns demo --data-dir demo-data "$@"
