#!/usr/bin/env bash
# The system packages the dev extra builds from: mysqlclient (Django's MySQL/MariaDB
# driver) needs Debian's client library headers and pkg-config. scripts/test.sh runs this
# before its pip install; it does nothing (and no apt-get update) when they are there.
set -euo pipefail
if dpkg -s default-libmysqlclient-dev pkg-config >/dev/null 2>&1; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q default-libmysqlclient-dev pkg-config >/dev/null 2>&1 || {
  apt-get update -q >/dev/null
  apt-get install -y -q default-libmysqlclient-dev pkg-config >/dev/null
}
