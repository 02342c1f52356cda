"""The plain table on PostgreSQL (``OUTBOX_QUEUE_STORAGE=heap``), now that the ring is
the default there and the rest of the suite runs on the ring: every statement on jobs is
the same on both storages (ADR 5), so what differs is the table they meet. Here a heap
made by ``migrate`` when asked for runs a real worker through the paths whose
statements touch ``outbox_jobs`` the most: plain jobs, a dead letter, an ordering key
in commit order, a workflow whose node waits for another, the relay's hand-off; and no
ring appears."""

from __future__ import annotations

from typing import Any

import pytest

from outbox import Job, Registry, Relay, Workflow, record
from outbox.config import settings
from outbox.db.connection import Database
from outbox.db.migrate import migrate
from outbox.queue import Worker, WorkerConfig, push
from tests.fixtures.factories import count_rows
from tests.fixtures.gaps import Gap, skip_unless

QUEUE = "heap"


def test_a_heap_asked_for_runs_every_kind_of_job(
    backend: str, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    skip_unless(backend, "postgresql", gap=Gap.RING_STORAGE)
    monkeypatch.setattr(settings, "queue_storage", "heap")
    database = Database(db_url)
    ran: list[Any] = []
    registry = Registry()
    registry.job("heap.echo")(lambda body, ctx: ran.append(body["n"]))

    @registry.job("heap.fails", max_attempts=1)
    def fails(body: Any, ctx: Any) -> None:
        raise RuntimeError("no")

    with database.connect() as conn:
        migrate(conn)
        assert conn.execute_sql("SELECT relkind FROM pg_class"
                                " WHERE oid = CAST('outbox_jobs' AS regclass)") == [("r",)]
        assert conn.execute_sql("SELECT to_regclass('outbox_queue_ring')") == [(None,)]

        def enqueue(t: Any) -> None:
            for i in range(3):
                push(t.raw, Job("heap.echo", {"n": i}, queue=QUEUE))
            push(t.raw, Job("heap.fails", {"n": "x"}, queue=QUEUE))
            for i in range(3):
                record(t.raw, f"keyed:{i}",
                       Job("heap.echo", {"n": f"k{i}"}, queue=QUEUE, ordering_key="acct"))
            wf = Workflow("heap:wf")
            first = wf.add(Job("heap.echo", {"n": "wf-a"}, queue=QUEUE), name="a")
            wf.add(Job("heap.echo", {"n": "wf-b"}, queue=QUEUE), name="b", after=[first])
            record(t.raw, "heap:wf", wf)

        conn.transact(enqueue, operation="test")
        with Relay(database) as relay:
            relay.run_once()
        config = WorkerConfig(queues={QUEUE: None}, stop_when_empty=True, sleep=0.01,
                              concurrency=1, prefetch=1)
        with Worker(database, registry, config) as worker:
            worker.run()
        assert sorted(str(n) for n in ran) == sorted(
            ["0", "1", "2", "k0", "k1", "k2", "wf-a", "wf-b"])
        keyed = [n for n in ran if str(n).startswith("k")]
        assert keyed == ["k0", "k1", "k2"]  # the key's commit order
        assert ran.index("wf-a") < ran.index("wf-b")
        assert count_rows(conn, "outbox_jobs") == 0
        assert count_rows(conn, "outbox_failed_jobs") == 1
        assert conn.execute_sql("SELECT to_regclass('outbox_queue_ring')") == [(None,)]
