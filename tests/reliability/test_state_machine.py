"""Model-based test: random interleavings of every operation on intents and jobs, checked
after each step against a small in-memory model.

Operations: record (commit / rollback / replay / conflict), relay batches, claims by
several workers, acknowledgements, failures (retry and permanent), lease expiry and
reaping, heartbeats and acknowledgements by fenced-out workers holding stale claims,
retry of dead letters, quarantine (a corrupted fingerprint) and its repair and retry,
prune. Invariants: every intent is in exactly one state, nothing committed disappears,
no message is in the queue twice, a fenced-out worker changes nothing.

Lease expiry is simulated by moving ``lease_expires_at`` into the past (a fake clock for
one row) rather than waiting. SQLite in CI; PostgreSQL in soak mode (``OUTBOX_SOAK=1``).
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from outbox import Job, record
from outbox.db.connection import Connection, Database
from outbox.db.migrate import migrate
from outbox.db.rows import ClaimedJob, Failure
from outbox.errors import IdempotencyConflict
from outbox.queue import admin as queue_admin
from outbox.relay import Relay, RelayConfig
from outbox.relay import admin as relay_admin
from tests.fixtures import queue_ops as ops
from tests.fixtures.databases import raw_connect
from tests.fixtures.gaps import Gap, skip_mark
from tests.fixtures.pg_cluster import PgCluster
from tests.reliability.conftest import SOAK

QUEUE, NAME, MAX_ATTEMPTS = "sm", "sm.job", 2
WORKERS = ("w0", "w1", "w2")
LONG_LEASE_MS = 600_000
LATER_MS = 3_600_000
KEYS = [f"k{i}" for i in range(5)]


@dataclass
class M:
    """The model's view of one message."""

    message_id: str
    key: str
    variant: int
    seq: int
    outbox: str = "pending"  # pending | handed_off | failed | pruned
    queue: str | None = None  # None | ready | delayed | reserved | dead | done
    attempts: int = 0
    holder: str | None = None
    expired: bool = False
    fingerprint: str | None = None  # the true one, kept while corrupted
    queue_id: int | None = None  # outbox_jobs.id of the current claim


@dataclass
class Handle:
    worker: str
    job: ClaimedJob


@dataclass
class Model:
    by_id: dict[str, M] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    handles: list[Handle] = field(default_factory=list)

    def where(self, **want: Any) -> list[M]:
        return sorted(
            (m for m in self.by_id.values() if all(getattr(m, k) == v for k, v in want.items())),
            key=lambda m: m.seq,
        )

    def holds(self, h: Handle) -> bool:
        """Does the claim behind ``h`` still hold: same queue row, holder and attempt?"""
        m = self.by_id[h.job.message_id]
        return (
            m.queue == "reserved"
            and m.queue_id == h.job.id
            and m.holder == h.worker
            and m.attempts == h.job.attempts
        )


NEW_URL: list[Callable[[], str]] = []


class Machine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.url = NEW_URL[0]()
        self.db = Database(self.url)
        self.conn: Connection = self.db.connect()
        migrate(self.conn)
        self.app = raw_connect(self.url)
        self.ph = "?" if self.db.dialect.name == "sqlite" else "%s"
        self.relay = Relay(self.db, RelayConfig(batch_size=10))
        self.model = Model()
        self.seq = itertools.count()

    def teardown(self) -> None:
        self.relay.close()
        self.conn.close()
        self.app.close()

    def _sql(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        cur = self.app.cursor()
        cur.execute(sql.replace("?", self.ph), params)
        rows = [tuple(r) for r in cur.fetchall()] if cur.description else []
        self.app.commit()
        return rows

    # -- producers -----------------------------------------------------------------

    @rule(key=st.sampled_from(KEYS), variant=st.integers(0, 1), commit=st.booleans())
    def record(self, key: str, variant: int, commit: bool) -> None:
        job = Job(NAME, {"key": key, "v": variant}, queue=QUEUE, max_attempts=MAX_ATTEMPTS)
        known = self.model.by_id.get(self.model.keys.get(key, ""))
        try:
            mid = record(self.app, key, job)
        except IdempotencyConflict as exc:
            self.app.rollback()
            assert known is not None and known.variant != variant
            assert exc.message_id == known.message_id
            return
        if known is not None:
            # A replay compares against the key row, as recorded: corrupting the outbox
            # row (which the relay then quarantines) does not change what the key holds.
            assert mid == known.message_id and known.variant == variant
        if not commit:
            self.app.rollback()
            return
        self.app.commit()
        if known is None:
            self.model.by_id[mid] = M(mid, key, variant, next(self.seq))
            self.model.keys[key] = mid

    # -- relay and quarantine ------------------------------------------------------

    @rule(n=st.integers(1, 4))
    def relay_batch(self, n: int) -> None:
        batch = self.relay.run_once(n)
        expected = self.model.where(outbox="pending")[:n]
        assert batch.claimed == len(expected)
        for m in expected:
            if m.fingerprint is not None:
                m.outbox = "failed"
            else:
                m.outbox, m.queue, m.attempts = "handed_off", "ready", 0

    @precondition(lambda self: self.model.where(outbox="pending"))
    @rule(data=st.data())
    def corrupt(self, data: st.DataObject) -> None:
        m = data.draw(st.sampled_from(self.model.where(outbox="pending")))
        if m.fingerprint is None:
            m.fingerprint = self._sql(
                "SELECT fingerprint FROM outbox_messages WHERE message_id = ?", (m.message_id,)
            )[0][0]
        self._sql(
            "UPDATE outbox_messages SET fingerprint = 'bad' WHERE message_id = ?", (m.message_id,)
        )

    @precondition(lambda self: self.model.where(outbox="failed"))
    @rule(data=st.data())
    def repair_and_retry(self, data: st.DataObject) -> None:
        m = data.draw(st.sampled_from(self.model.where(outbox="failed")))
        self._sql(
            "UPDATE outbox_messages SET fingerprint = ? WHERE message_id = ?",
            (m.fingerprint, m.message_id),
        )
        assert relay_admin.retry(self.conn, m.message_id) == "requeued"
        m.outbox, m.fingerprint = "pending", None

    @rule()
    def prune(self) -> None:
        handed_off = self.model.where(outbox="handed_off")
        assert relay_admin.prune(self.conn, 0) == len(handed_off)
        for m in handed_off:
            m.outbox = "pruned"
            del self.model.keys[m.key]

    # -- workers -------------------------------------------------------------------

    @rule(worker=st.sampled_from(WORKERS), n=st.integers(1, 3))
    def claim(self, worker: str, n: int) -> None:
        ready = {m.message_id for m in self.model.where(queue="ready")}
        jobs = ops.claim(self.conn, QUEUE, n, worker, LONG_LEASE_MS)
        got = {j.message_id for j in jobs}
        assert got <= ready and len(jobs) == len(got) == min(n, len(ready))
        for j in jobs:
            m = self.model.by_id[j.message_id]
            m.queue, m.holder, m.attempts, m.expired = "reserved", worker, m.attempts + 1, False
            assert j.attempts == m.attempts
            m.queue_id = j.id
            self.model.handles.append(Handle(worker, j))

    @precondition(lambda self: self.model.handles)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        h = data.draw(st.sampled_from(self.model.handles))
        held = self.model.holds(h)
        acked = ops.ack(self.conn, h.worker, [h.job])
        assert acked == ({h.job.id} if held else set())
        if held:
            m = self.model.by_id[h.job.message_id]
            m.queue, m.holder = "done", None

    @precondition(lambda self: self.model.handles)
    @rule(data=st.data(), later=st.booleans(), permanent=st.booleans())
    def fail(self, data: st.DataObject, later: bool, permanent: bool) -> None:
        h = data.draw(st.sampled_from(self.model.handles))
        held = self.model.holds(h)
        m = self.model.by_id[h.job.message_id]
        if permanent or h.job.attempts >= MAX_ATTEMPTS:
            ok = ops.dead_letter(self.conn, h.worker, h.job, Failure("Boom", "boom", ""))
            new = "dead"
        else:
            ok = ops.release(self.conn, h.worker, h.job, LATER_MS if later else 0, "Boom")
            new = "delayed" if later else "ready"
        assert ok == held
        if held:
            m.queue, m.holder = new, None
            if new == "dead":
                m.attempts = h.job.attempts

    @precondition(lambda self: self.model.handles)
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        h = data.draw(st.sampled_from(self.model.handles))
        held = self.model.holds(h)
        assert ops.heartbeat(self.conn, h.worker, [h.job], LONG_LEASE_MS) == int(held)
        if held:
            self.model.by_id[h.job.message_id].expired = False

    @precondition(lambda self: self.model.where(queue="reserved"))
    @rule(data=st.data())
    def expire_lease(self, data: st.DataObject) -> None:
        m = data.draw(st.sampled_from(self.model.where(queue="reserved")))
        self._sql(
            "UPDATE outbox_jobs SET lease_expires_at = 1 WHERE message_id = ?", (m.message_id,)
        )
        m.expired = True

    @rule()
    def reap(self) -> None:
        expired = self.model.where(queue="reserved", expired=True)
        result = ops.reap(self.conn, lambda name, recorded: recorded or 3)
        assert result.requeued + result.dead == len(expired)
        for m in expired:
            m.queue = "dead" if m.attempts >= MAX_ATTEMPTS else "ready"
            m.holder, m.expired = None, False

    @precondition(lambda self: self.model.where(queue="dead"))
    @rule(data=st.data())
    def retry_dead(self, data: st.DataObject) -> None:
        m = data.draw(st.sampled_from(self.model.where(queue="dead")))
        assert queue_admin.retry(self.conn, m.message_id) == 1
        m.queue, m.attempts = "ready", 0

    # -- invariants ----------------------------------------------------------------

    @invariant()
    def database_matches_the_model(self) -> None:
        outbox = dict(self._sql("SELECT message_id, state FROM outbox_messages"))
        keys = {r[0] for r in self._sql("SELECT message_id FROM outbox_keys")}
        intents = {m.message_id: m.outbox for m in self.model.by_id.values()}
        assert outbox == {i: s for i, s in intents.items() if s in ("pending", "failed")}
        assert keys == {i for i, s in intents.items() if s != "pruned"}
        rows = self._sql("SELECT message_id, attempts, reserved_by FROM outbox_jobs")
        assert len(rows) == len({r[0] for r in rows}), "a message is in the queue twice"
        queued = {
            m.message_id: (m.attempts, m.holder)
            for m in self.model.by_id.values()
            if m.queue in ("ready", "delayed", "reserved")
        }
        assert {r[0]: (r[1], r[2]) for r in rows} == queued
        dead = self._sql("SELECT message_id FROM outbox_failed_jobs")
        assert sorted(r[0] for r in dead) == sorted(
            m.message_id for m in self.model.where(queue="dead")
        )


def _sqlite_factory() -> Callable[[], str]:
    root = Path(tempfile.mkdtemp(prefix="outbox-sm-"))
    counter = itertools.count()
    return lambda: f"sqlite:///{root / f'sm{next(counter)}.db'}"


def _run(factory: Callable[[], str], examples: int, steps: int) -> None:
    NEW_URL[:] = [factory]
    try:
        Machine.TestCase.settings = settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
        Machine.TestCase().runTest()
    finally:
        NEW_URL.clear()


def test_random_interleavings_match_the_model_on_sqlite() -> None:
    _run(_sqlite_factory(), examples=400 if SOAK else 40, steps=60)


@pytest.mark.soak
@skip_mark(not SOAK, Gap.SOAK_ONLY)
@pytest.mark.timeout(3600)
def test_random_interleavings_match_the_model_on_postgresql(pg_private: PgCluster) -> None:
    counter = itertools.count()

    def new_database() -> str:
        name = f"sm_{next(counter)}"
        with psycopg.connect(pg_private.url(), autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return pg_private.url(name)

    _run(new_database, examples=100, steps=60)


def test_a_stale_claim_on_a_reused_job_id_changes_nothing(
    database: Database, app_conn: Any
) -> None:
    """The shrunk counterexample the machine found: a worker's stale claim of a finished
    job must not acknowledge a newer job that got the same ``outbox_jobs.id``."""
    job = Job(NAME, {"n": 1}, queue=QUEUE)
    with database.connect() as conn:
        record(app_conn, "first", job)
        app_conn.commit()
        with Relay(database) as relay:
            relay.run_once()
        [stale] = ops.claim(conn, QUEUE, 1, "w1", LONG_LEASE_MS)
        assert ops.ack(conn, "w1", [stale]) == {stale.id}
        second = record(app_conn, "second", Job(NAME, {"n": 2}, queue=QUEUE))
        app_conn.commit()
        with Relay(database) as relay:
            relay.run_once()
        [fresh] = ops.claim(conn, QUEUE, 1, "w1", LONG_LEASE_MS)
        assert fresh.message_id == second

        assert ops.ack(conn, "w1", [stale]) == set()  # a duplicate ack of the finished job
        assert ops.heartbeat(conn, "w1", [stale], LONG_LEASE_MS) == 0
        rows = conn.execute_sql("SELECT message_id, reserved_by FROM outbox_jobs")
    assert rows == [(second, "w1")]
