"""The hygiene run's producer: ``python -m bench.w_hygiene URL START COUNT``.

An application's transactions as they look in production: ``record()`` of 20 intents on
a psycopg connection, commit, repeat. Keys ``hygiene:START+i`` never repeat, so every
intent is new.
"""

from __future__ import annotations

import sys

import psycopg

from bench.data import JOB_NAME, QUEUE, payload

PER_TRANSACTION = 20


def produce(url: str, start: int, count: int) -> None:
    from outbox import Job, record

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        for first in range(start, start + count, PER_TRANSACTION):
            with conn.transaction():
                for i in range(first, min(first + PER_TRANSACTION, start + count)):
                    record(conn, f"hygiene:{i}", Job(JOB_NAME, payload(i), queue=QUEUE))


if __name__ == "__main__":
    produce(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
