#!/usr/bin/env bash
# Quick start 1: the main job end to end on the embedded local Iceberg REST catalog: Spark writes,
# Spark SQL, lancedb and DuckDB (through lance-iceberg-ns serve) read, versions, drop and undrop.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh demo
exec .venv/bin/lance-iceberg-ns demo --data-dir demo-data "$@"
