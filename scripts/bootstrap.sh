#!/usr/bin/env bash
# Create the project's virtual environment (.venv) and install the project with its test and analytics extras.
# On a fresh Debian machine `python3 -m venv` needs the python3-venv package; install it when we can.
set -euo pipefail
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
    rm -rf "$VENV"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-dev >/dev/null
      "$PYTHON" -m venv "$VENV"
    else
      echo "error: '$PYTHON -m venv' failed; install python3-venv (sudo apt-get install -y python3-venv)" >&2
      exit 1
    fi
  fi
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
# analytics: the flow-record pipeline's PySpark tests (docs/analytics.md)
"$VENV/bin/python" -m pip install -q -e ".[test,analytics]"
