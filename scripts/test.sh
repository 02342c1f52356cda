#!/usr/bin/env bash
# The whole test suite on SQLite, PostgreSQL and MariaDB: installs the project into
# .venv (if needed), starts the database servers if they are down, runs pytest across
# OUTBOX_TEST_WORKERS processes (default 4: on two cores about half of a test's time is
# spent waiting on a server's DDL or on a child process, so four processes keep both
# cores busy; measured 61 s for tests/conformance against 107 s with two).
# Extra arguments go to pytest (e.g. ./scripts/test.sh -k relay, -m "not slow", -n 0).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
./scripts/system-deps.sh  # mysqlclient's headers (Django's MySQL driver, in the dev extra)
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
./scripts/services.sh
# Compile each module once for the whole run, into the venv (the tree stays clean): many
# tests start the real `outbox` in a fresh interpreter, and with bytecode off (as some
# shells set PYTHONDONTWRITEBYTECODE) each of them compiled outbox's modules again.
export PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX="$PWD/.venv/pycache"
exec .venv/bin/python -m pytest -n "${OUTBOX_TEST_WORKERS:-4}" --dist loadgroup --durations=25 "$@"
