#!/usr/bin/env bash
# Prepares a fresh machine: the JDK the local Iceberg REST catalog and Spark run on (their jars come
# from Maven Central on first use, into the project's cache), and the virtual environment at .venv/
# (or $VENV) with the project installed (extras given as arguments).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-local}"
venv="${VENV:-.venv}"

need_apt=()
command -v javac >/dev/null 2>&1 || need_apt+=(openjdk-17-jdk-headless)
# Node, for the tests' Azure emulator (below)
[ "$extras" != dev ] || command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm)
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  echo "Installing Debian packages: ${need_apt[*]}"
  $sudo_cmd apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q "${need_apt[@]}" >/dev/null
fi

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
fi
# setuptools notes, on every editable install, that a folder named like the package may shadow it
# (it is the package itself here)
PYTHONWARNINGS="ignore:Editable installation" "$venv/bin/python" -m pip install -q -e ".[${extras}]" 2>&1 \
  | grep -v "^WARNING: Location" || true
"$venv/bin/python" -c "import lance_iceberg_ns" # fails loudly if the install did not work

# The tests' Azure Blob storage: Azurite, the official emulator (npm), kept out of the repository
if [ "$extras" = dev ]; then
  azurite_home="${XDG_CACHE_HOME:-$HOME/.cache}/azurite"
  [ -x "$azurite_home/node_modules/.bin/azurite-blob" ] \
    || npm install -s --prefix "$azurite_home" --no-audit --no-fund azurite@3.35.0 >/dev/null
fi
