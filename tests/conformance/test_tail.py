"""The pipeline's tail: a relay batch's commit wakes the worker, and the worker's next
round trip is the claim (``docs/incoming/tail.md``).

The mechanisms, not their speed (that lives in ``bench/s_pipeline.py``): which round
trip comes next, with an injected clock, and when a notification is delivered.
"""

from __future__ import annotations

from typing import Any

from outbox import Job, Registry
from outbox.db.connection import Connection, Database
from outbox.queue import push
from outbox.queue.config import WorkerConfig
from outbox.queue.worker import Worker
from tests.fixtures.clock import FakeClock
from tests.fixtures.databases import raw_connect
from tests.fixtures.gaps import Gap, skip_gap
from tests.fixtures.relays import record_many

Q = "tail"


def _push(db_url: str, name: str) -> None:
    conn = raw_connect(db_url)
    try:
        push(conn, Job(name, {}, queue=Q))
        conn.commit()
    finally:
        conn.close()


def _jobs(conn: Connection) -> dict[str, str | None]:
    """job name → its holder, for every job still in the queue."""
    rows = conn.execute_sql("SELECT job_name, reserved_by FROM outbox_jobs WHERE queue = 'tail'")
    return {str(name): holder for name, holder in rows}


def test_a_wake_up_sends_the_pending_acks_with_its_claim_not_alone(
    database: Database, db_url: str, conn: Connection
) -> None:
    """A job finished and a wake-up came (however long ago): the next round trip is the
    claim, with the acknowledgement in it, not a lone ack the claim would wait behind."""
    clock = FakeClock()
    registry = Registry()
    registry.job("t.first")(lambda payload, ctx: None)
    registry.job("t.second")(lambda payload, ctx: None)
    _push(db_url, "t.first")
    config = WorkerConfig(queues={Q: 1}, prefetch=1, listen=False)
    with Worker(database, registry, config, clock=clock) as worker:
        d = worker._d
        assert d.claim_round() == 1
        d.wait_for_outcome(30.0)  # t.first ran; its ack is pending
        assert [j.job_name for j in d.to_ack] == ["t.first"]
        clock.advance(0.5)  # the queue is still dry (sleep is 1 s): only a wake-up claims
        _push(db_url, "t.second")
        worker.wake()  # the relay's NOTIFY
        d.collect()
        assert _jobs(conn) == {"t.first": worker.worker_id, "t.second": None}, "acked alone"
        assert d.claim_round() == 1
        assert _jobs(conn) == {"t.second": worker.worker_id}  # acked by the claim
        assert d.to_ack == []


def test_acks_go_alone_at_once_when_no_claim_is_due(
    database: Database, db_url: str, conn: Connection
) -> None:
    """The other side: the queue is dry and nothing woke the worker; the ack goes on
    its own at once: a LISTENing worker no longer holds it for the next NOTIFY."""
    clock = FakeClock()
    registry = Registry()
    registry.job("t.first")(lambda payload, ctx: None)
    _push(db_url, "t.first")
    config = WorkerConfig(queues={Q: 1}, prefetch=1, listen=False, sleep=60.0)
    with Worker(database, registry, config, clock=clock) as worker:
        d = worker._d
        assert d.claim_round() == 1
        d.wait_for_outcome(30.0)
        assert _jobs(conn) == {"t.first": worker.worker_id}
        d.collect()
        assert _jobs(conn) == {}
        assert d.to_ack == []


def test_the_relay_batch_commits_asynchronously_in_its_own_transaction_only(
    database: Database, db_url: str
) -> None:
    """The batch's commit does not wait for the disk (the NOTIFY to the workers goes
    at commit); the session keeps the server's setting."""
    if database.dialect.name != "postgresql":
        skip_gap(Gap.SYNCHRONOUS_COMMIT)
    record_many(db_url, ["a1", "a2"])
    with database.connect() as relay:
        assert relay.execute_sql("SHOW synchronous_commit") == [("on",)]
        with relay.transaction():
            rows = relay.execute("relay_handoff", {"batch_size": 10, "notify": True})
            assert rows[0][1] == 2  # handed off
            assert relay.execute_sql("SHOW synchronous_commit") == [("off",)]
        assert relay.execute_sql("SHOW synchronous_commit") == [("on",)]


def test_the_relay_wakes_workers_when_its_batch_commits_not_before(
    database: Database, db_url: str
) -> None:
    """A worker woken before the batch commits would claim nothing and wait for the
    next wake-up; the NOTIFY is delivered with the commit."""
    if not database.dialect.supports_listen:
        skip_gap(Gap.LISTEN_NOTIFY)
    record_many(db_url, ["n1"])
    listener = database.connect()
    relay = database.connect()
    try:
        listener.execute_sql("LISTEN outbox_jobs")
        with relay.transaction():
            rows: Any = relay.execute("relay_handoff", {"batch_size": 10, "notify": True})
            assert rows[0][1] == 1
            assert list(listener.raw.notifies(timeout=0.5, stop_after=1)) == []
        got = list(listener.raw.notifies(timeout=30, stop_after=1))
        assert [n.channel for n in got] == ["outbox_jobs"]
    finally:
        relay.close()
        listener.close()
