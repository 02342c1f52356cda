"""Ordering keys on Redis held by real processes racing: one relay process with
``--target redis:// --in-flight 3`` (two on SQLite, one batch each), three ``outbox
worker --broker redis://`` processes, 20 keys x 30 jobs recorded in interleaved
transactions, handlers failing at random (a retry holds its key) and snoozing now and
then, one worker SIGKILLed a third of the way in and every worker that holds a hanging
job SIGKILLed too, each replaced. The check is the one of the SQL and JetStream runs
(``tests/reliability/test_ordering_processes.py``): per key, the starts follow commit
order and no two runs of a key overlap (a killed run ends when its process died): 0
violations."""

from __future__ import annotations

import random
from typing import Any

import pytest

from outbox.db.connection import Connection
from outbox.queue.redis import names
from tests.fixtures.redis_servers import drop_queue, queue_name
from tests.fixtures.workers import count
from tests.redis import entries
from tests.reliability.test_ordering_processes import (
    Ledger,
    _check,
    _produce,
    _run_to_the_end,
    _stop,
    _worker,
    ledger,
    spawn,
)

__all__ = ["ledger", "spawn"]  # the fixtures, used by name


@pytest.mark.slow
def test_three_redis_workers_run_each_key_in_commit_order_through_sigkills(
    app_conn: Any, conn: Connection, spawn: Any, ledger: Ledger
) -> None:
    rng = random.Random(29)
    r, queue = entries.client(), queue_name("ord")
    broker = ("--broker", entries.URL)
    relay = ("relay", "--watch", "--poll-interval", "0.05", "--batch-size", "20",
             "--target", entries.URL)  # fmt: skip
    if conn.dialect.name == "sqlite":
        relays = [spawn(*relay) for _ in range(2)]  # their batches race, one each
    else:
        relays = [spawn(*relay, "--in-flight", "3")]
    try:
        workers = [_worker(spawn, queue, *broker) for _ in range(3)]
        committed = _produce(app_conn, rng, queue)
        killed = _run_to_the_end(ledger, workers, lambda: _worker(spawn, queue, *broker))
        _stop(workers, relays)
        _check(ledger, committed, killed)
        assert count(conn, "outbox_messages") == 0
        assert entries.left(r, queue) == 0 and entries.dead(r, queue) == []
        assert r.hlen(names.held_key(queue)) == 0
    finally:
        drop_queue(r, queue)
        r.close()
