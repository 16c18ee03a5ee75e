#!/usr/bin/env bash
# Quick start 2: the test suite, against a real Iceberg REST server started without Docker; with
# no arguments, the Spark tests then run once more on PySpark 3.5, in .venv-pyspark35/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
# Two workers, each taking whole test files (a file's fixtures stay in one process): on two cores the
# suite waits on the catalog, subprocesses and timeouts as much as it computes.
.venv/bin/python -m pytest -q -n "${TEST_WORKERS:-2}" --dist loadfile "$@"
if [ $# -eq 0 ]; then
  echo "The Spark tests on PySpark 3.5:"
  VENV=.venv-pyspark35 bash scripts/setup.sh pyspark35
  # PySpark 3.5's own pandas checks use distutils' LooseVersion, deprecated on every call
  .venv-pyspark35/bin/python -m pytest -q -p no:cacheprovider \
    -W "ignore:distutils Version classes are deprecated:DeprecationWarning" tests/spark/test_spark.py tests/spark/test_spark_iceberg.py \
    tests/spark/test_spark_iceberg_teams.py tests/spark/test_spark_sql.py
fi
