#!/usr/bin/env bash
# Start PostgreSQL, MariaDB, NATS and Redis on loopback if they are down, then wait until each
# answers; install Chromium (the dashboard's browser tests) if it is missing. Safe to run
# when they are already up.
set -euo pipefail

wait_for() {  # name, probe command...
  local name=$1; shift
  for _ in $(seq 1 60); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  echo "services: $name did not come up" >&2
  return 1
}

tcp_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
fi
wait_for postgresql pg_isready -q -h 127.0.0.1 -p 5432

if ! mariadb-admin -h 127.0.0.1 -uroot ping >/dev/null 2>&1; then
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd || true
fi
wait_for mariadb mariadb-admin -h 127.0.0.1 -uroot ping

# The NATS tests start their own nats-server processes (tests/nats/servers.py): the
# binary must be there even when the shared server is up.
if ! command -v nats-server >/dev/null 2>&1 && [ ! -x /usr/sbin/nats-server ]; then
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server >/dev/null
  fi
  systemctl disable --now nats-server >/dev/null 2>&1 || true
fi

if ! tcp_open 4222; then
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log || true
fi
wait_for nats tcp_open 4222

# Redis 7: the Redis broker's tests use the shared server on 6379 (private ones, a
# cluster and an AOF server, they start themselves from redis-server on free ports).
if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  fi
  systemctl disable --now redis-server >/dev/null 2>&1 || true
fi
if ! tcp_open 6379; then
  mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
fi
wait_for redis tcp_open 6379

# PgBouncer: the tests start their own on a free port (tests/ops/pgbouncer.py); a fresh
# machine does not have it.
if ! command -v pgbouncer >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
  fi
  # The package's own service is not ours to run.
  systemctl disable --now pgbouncer >/dev/null 2>&1 || service pgbouncer stop >/dev/null 2>&1 || true
fi

# Chromium for the dashboard's browser tests (Debian's package; Playwright drives it).
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      chromium fonts-dejavu-core >/dev/null
  else
    echo "services: chromium is missing; install it with: sudo apt-get install -y chromium" >&2
    exit 1
  fi
fi
