"""Three scheduler processes race over a simulated day, on every backend: every tick is
recorded exactly once, and every scheduler that saw a tick got the same message id."""

from __future__ import annotations

import multiprocessing

import pytest

from outbox.db.connection import Connection, Database
from tests.fixtures.schedulers import digest, expected_keys, race_one_day

SCHEDULERS = 3


@pytest.mark.slow
def test_three_racing_schedulers_record_every_tick_of_a_day_once(
    database: Database, db_url: str, conn: Connection
) -> None:
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=race_one_day, args=(db_url, seed, start, results))
        for seed in range(SCHEDULERS)
    ]
    for proc in procs:
        proc.start()
    start.set()
    seen = [results.get(timeout=240) for _ in procs]
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    expected = {digest(k) for k in expected_keys()}
    # Berlin skips 02:00-02:59 this day: its wall ticks there land on 03:xx, one each.
    assert len(expected) == 144 + 24 + 72
    rows = conn.execute_sql("SELECT key_digest, message_id FROM outbox_messages")
    assert len(rows) == len(expected)
    stored = {str(d): str(m) for d, m in rows}
    assert set(stored) == expected
    for one in seen:  # each saw the whole day; a replay got the winner's id back
        assert set(one) == expected
        assert one == stored
