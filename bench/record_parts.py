"""Where a single ``record()`` spends its time beyond its floor, on PostgreSQL.

``python -m bench.record_parts [--url URL] [--rounds 12] [--calls 1000]`` (NOTIFY off:
set ``OUTBOX_NOTIFY=0``, as the record scenario's target is). Four ways of writing one
intent, each call on its own key, interleaved round by round on one psycopg connection
in one transaction per round (committed between rounds); medians of the per-call time:

- ``by hand``: record()'s two rows through a hand-made statement with six positional
  parameters on one reused cursor (a uuid4, one SHA-256 as key and fingerprint) — the
  ``byhand`` floor of ``bench/w_record.py`` without its business row;
- ``our statement, one cursor``: ``Intent.build`` (validation, canonical JSON, two
  digests, a UUIDv7) and ``record_insert`` with its eleven named parameters, same cursor;
- ``our statement, new cursor``: the same with a cursor per call, as ``record()`` does
  (a caller's connection may be shared; a cursor holds its results);
- ``record()``: the whole call (adapt, transaction check, plan, holder).

Each step's difference to the one before is what that step costs. It is a diagnostic
for ``docs/explanation/performance.md``, not a scenario of ``python -m bench``.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import statistics
import time
import uuid
from collections.abc import Callable

import orjson
import psycopg

from outbox import Job, record
from outbox.db.adapters import adapt
from outbox.db.connection import Database
from outbox.db.migrate import migrate
from outbox.db.sql import queries
from outbox.record import Intent

SCHEMA = "bench_record_parts"
BY_HAND = (
    "WITH k AS (INSERT INTO outbox_keys (key_digest, message_id, fingerprint, created_at) "
    "VALUES (%s, %s, %s, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) "
    "ON CONFLICT (key_digest) DO NOTHING "
    "RETURNING key_digest, message_id, fingerprint, created_at) "
    "INSERT INTO outbox_messages (message_id, key_digest, fingerprint, job_name, queue, "
    "payload, max_attempts, available_at, state, created_at, keyed) "
    "SELECT k.message_id, k.key_digest, k.fingerprint, %s, %s, %s, NULL, NULL, 'pending', "
    "k.created_at, 1 FROM k RETURNING message_id"
)
PAYLOAD = {"to": "someone@example.com", "template": "welcome", "n": 1}


def measure(url: str, rounds: int, calls: int) -> dict[str, list[float]]:
    """Per-call microseconds of each way, one sample per round."""
    scoped = f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{SCHEMA}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        admin.execute(f"CREATE SCHEMA {SCHEMA}")
    try:
        with Database(scoped).connect() as c:
            migrate(c)
        return _rounds(scoped, rounds, calls)
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


def _rounds(url: str, rounds: int, calls: int) -> dict[str, list[float]]:
    conn = psycopg.connect(url)
    job = Job("send_email", PAYLOAD, queue="default")
    ours = queries(adapt(conn).dialect)["record_insert"].driver
    conn.rollback()
    keys = itertools.count()
    cur = conn.cursor()

    def by_hand() -> None:
        body = orjson.dumps(PAYLOAD, option=orjson.OPT_SORT_KEYS).decode()
        digest = hashlib.sha256(f"parts:{next(keys)}".encode()).hexdigest()
        cur.execute(BY_HAND, (digest, str(uuid.uuid4()), digest, "send_email", "default", body))
        cur.fetchall()

    def one_cursor() -> None:
        cur.execute(ours, Intent.build(f"parts:{next(keys)}", job, 0).params())
        cur.fetchall()

    def new_cursor() -> None:
        c = conn.cursor()
        c.execute(ours, Intent.build(f"parts:{next(keys)}", job, 0).params())
        c.fetchall()
        c.close()

    def whole() -> None:
        record(conn, f"parts:{next(keys)}", job)

    ways: dict[str, Callable[[], None]] = {
        "by hand": by_hand,
        "our statement, one cursor": one_cursor,
        "our statement, new cursor": new_cursor,
        "record()": whole,
    }
    samples: dict[str, list[float]] = {name: [] for name in ways}
    try:
        for _ in range(rounds):
            for name, way in ways.items():
                started = time.perf_counter()
                for _ in range(calls):
                    way()
                samples[name].append((time.perf_counter() - started) / calls * 1e6)
                conn.commit()
    finally:
        conn.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--calls", type=int, default=1_000)
    args = parser.parse_args()
    samples = measure(args.url, args.rounds, args.calls)
    print(f"| way | median µs per call | spread | step |  ({args.rounds} rounds of {args.calls})")
    print("| --- | ---: | --- | ---: |")
    before: float | None = None
    for name, values in samples.items():
        median = statistics.median(values)
        step = "" if before is None else f"+{median - before:.1f}"
        print(f"| {name} | {median:.1f} | [{min(values):.1f}..{max(values):.1f}] | {step} |")
        before = median


if __name__ == "__main__":
    main()
