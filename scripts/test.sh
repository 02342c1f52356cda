#!/usr/bin/env bash
# The whole test suite on SQLite, PostgreSQL and MariaDB: installs the project into
# .venv (if needed), starts the database servers if they are down, runs pytest.
# Extra arguments go to pytest (e.g. ./scripts/test.sh -k relay).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
./scripts/services.sh
exec .venv/bin/python -m pytest "$@"
