"""Real relay processes racing producers, crashing and restarting, on every backend."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time

from outbox.db.connection import Connection, Database
from outbox.job import key_digest
from outbox.relay import Relay, RelayConfig
from tests.fixtures.gaps import Gap, skip_gap
from tests.fixtures.relays import (
    fill_pending,
    outbox_rows,
    produce,
    queued_ids,
    record_many,
    relay_forever,
    relay_until_told,
    spawn,
)

RELAYS = 3
PRODUCERS = 2
TRANSACTIONS = 9
PER_TX = 8


def test_racing_relays_hand_off_every_committed_intent_exactly_once(
    database: Database, db_url: str, conn: Connection
) -> None:
    done = multiprocessing.get_context("spawn").Event()
    relays = [spawn(relay_until_told, db_url, 5, done) for _ in range(RELAYS)]
    producers = [spawn(produce, db_url, f"p{n}", TRANSACTIONS, PER_TX) for n in range(PRODUCERS)]
    try:
        for proc in producers:
            proc.join(120)
        done.set()
        for proc in relays:
            proc.join(120)
    finally:
        for proc in relays + producers:
            if proc.is_alive():
                proc.kill()
                proc.join()
    assert [p.exitcode for p in producers + relays] == [0] * (PRODUCERS + RELAYS)

    committed = {
        key_digest(f"p{n}:{t}:{i}")
        for n in range(PRODUCERS)
        for t in range(TRANSACTIONS)
        if t % 3 != 2
        for i in range(PER_TX)
    }
    digests = {r[0] for r in conn.execute_sql("SELECT key_digest FROM outbox_keys")}
    assert digests == committed  # none of the rolled-back ones
    rows = outbox_rows(conn)
    assert set(rows.values()) == {("handed_off", None, True)}
    queued = queued_ids(conn)
    assert len(queued) == len(set(queued)) == len(committed)
    assert set(queued) == set(rows)


def test_relay_killed_at_random_points_loses_nothing_and_hands_off_nothing_twice(
    database: Database, db_url: str, conn: Connection
) -> None:
    rows = 4_000
    fill_pending(conn, rows)
    rng = random.Random(os.getpid())
    cut_mid_run = 0
    for _ in range(4):
        proc = spawn(relay_forever, db_url, 20)
        _wait_for_progress(conn, proc)
        time.sleep(rng.uniform(0, 0.05))
        if proc.is_alive() and proc.pid is not None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
        if len(queued_ids(conn)) < rows:
            cut_mid_run += 1
    assert cut_mid_run >= 1, "no kill landed during the handoff; the test proved nothing"
    with Relay(database, RelayConfig(batch_size=500)) as relay:
        relay.run()
    queued = queued_ids(conn)
    assert len(queued) == len(set(queued)) == rows
    states = outbox_rows(conn)
    assert set(states.values()) == {("handed_off", None, True)}
    assert set(queued) == set(states)


def test_relay_never_skips_a_long_transaction_committed_after_a_later_one(
    database: Database, db_url: str, conn: Connection, backend: str
) -> None:
    if backend == "sqlite":
        skip_gap(Gap.SQLITE_ONE_WRITER)
    from outbox import Job, record
    from tests.fixtures.databases import raw_connect

    long_tx = raw_connect(db_url)
    try:
        long_id = record(long_tx, "long", Job("tests.echo", {"n": 1}, queue="q1"))
        [short_id] = record_many(db_url, [_key_sorting_after("long")])
        short_pk = _row_id(conn, short_id)
        with Relay(database) as relay:
            assert relay.run().handed_off == 1
            assert queued_ids(conn) == [short_id]
            long_tx.commit()
            long_pk = _row_id(conn, long_id)
            assert relay.run().handed_off == 1
    finally:
        long_tx.close()
    assert queued_ids(conn) == [short_id, long_id]
    assert long_pk < short_pk  # the id order a high-water mark would have trusted


def _row_id(conn: Connection, message_id: str) -> int:
    """The outbox row's id (read while the intent is still pending: it leaves at handoff)."""
    [(pk,)] = conn.execute_sql(f"SELECT id FROM outbox_messages WHERE message_id = '{message_id}'")
    return int(pk)


def _key_sorting_after(key: str) -> str:
    """A key whose digest sorts after ``key``'s.

    MariaDB's record() (INSERT ... ON DUPLICATE KEY UPDATE under REPEATABLE READ) waits
    for an open transaction holding the next key digest up; this test is about the
    relay, so it keeps the two producers off each other's index gap.
    """
    return next(k for n in range(100) if key_digest(k := f"short{n}") > key_digest(key))


def _wait_for_progress(conn: Connection, proc: multiprocessing.process.BaseProcess) -> None:
    """Until the relay has handed something off (or exited); a deadline bounds a failure."""
    start = len(queued_ids(conn))
    end = time.monotonic() + 60
    while len(queued_ids(conn)) == start and proc.is_alive():
        assert time.monotonic() < end, "the relay made no progress before the deadline"
        time.sleep(0.005)
