"""Every part of outbox through PgBouncer in transaction pooling mode.

An application configures its engine with ``prepare_threshold=None`` (README); our own
processes run in pooler mode (``OUTBOX_POOLER=transaction``: no automatic prepared
statements, no LISTEN). Nothing of ours may leave session state on a server connection
that PgBouncer then hands to another client: the worker's asynchronous commit is set per
statement, for its own transaction only.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import psycopg
import pytest
from click.testing import CliRunner, Result
from sqlalchemy import create_engine
from sqlalchemy.engine import Engine

from outbox import Job, record, record_many
from outbox.cli import main
from outbox.config import settings
from outbox.db.connection import Database
from outbox.db.rows import JobClaim, JobFence
from outbox.errors import OutboxError
from outbox.queue import Worker, WorkerConfig, push
from outbox.relay import Relay, RelayConfig
from tests.ops.apps import LEDGER_DDL, registry
from tests.ops.pgbouncer import PgBouncer

THREADS = 8
TXNS_PER_THREAD = 12  # psycopg prepares a statement on its 6th run on one connection
# PgBouncer re-sends these to the server itself as clients come and go; not ours.
_STATE = "SELECT state FROM outbox_messages WHERE message_id = %s"
BOUNCER_TRACKED = ("application_name", "client_encoding", "DateStyle", "TimeZone")


@pytest.fixture
def pooler_mode() -> Iterator[None]:
    old = settings.pooler
    settings.pooler = True
    yield
    settings.pooler = old


@pytest.fixture(scope="module")
def ledger(pgbouncer: PgBouncer) -> None:
    with psycopg.connect(pgbouncer.direct_url, autocommit=True) as c:
        c.execute(LEDGER_DDL)


def _engine(bouncer: PgBouncer, *, single: bool = False, **connect_args: Any) -> Engine:
    url = bouncer.url(single=single, driver="postgresql+psycopg")
    return create_engine(url, connect_args=connect_args, pool_size=THREADS)


def _cli(url: str, *args: str) -> Result:
    result = CliRunner().invoke(main, ["--database-url", url, *args])
    assert result.exit_code == 0, f"outbox {' '.join(args)}: {result.output}"
    return result


def _one(bouncer: PgBouncer, sql: str, *params: Any) -> Any:
    with psycopg.connect(bouncer.direct_url) as c:
        row = c.execute(sql, params).fetchone()
    return None if row is None else row[0]


def _key() -> str:
    return f"bouncer:{uuid.uuid4()}"


def test_an_engine_that_prepares_statements_breaks_behind_pgbouncer(pgbouncer: PgBouncer) -> None:
    """Why the README's engine setting matters: psycopg's default prepares on the 6th run."""
    engine = _engine(pgbouncer, single=True)
    try:
        with pytest.raises(OutboxError) as failed:
            for _ in range(TXNS_PER_THREAD):
                for conn in (engine.connect(), engine.connect()):
                    with conn, conn.begin():
                        record(conn, _key(), Job("ops.noop", queue="bouncer_broken"))
        sqlstate = getattr(getattr(failed.value.__cause__, "orig", None), "sqlstate", None)
        assert sqlstate in ("42P05", "26000")  # prepared statement already exists / missing
    finally:
        engine.dispose()


def test_record_and_push_from_eight_threads_through_sqlalchemy(pgbouncer: PgBouncer) -> None:
    engine = _engine(pgbouncer, prepare_threshold=None)
    keys = [[_key() for _ in range(TXNS_PER_THREAD)] for _ in range(THREADS)]
    ids: list[list[str]] = [[] for _ in range(THREADS)]
    errors: list[BaseException] = []

    def produce(n: int) -> None:
        try:
            for key in keys[n]:
                with engine.begin() as conn:
                    ids[n].append(record(conn, key, Job("ops.noop", {"n": n}, queue="bouncer_rec")))
                    record_many(conn, [(key, Job("ops.noop", {"n": n}, queue="bouncer_rec"))])
                    push(conn, Job("ops.noop", queue="bouncer_push"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    engine.dispose()
    assert not errors, errors
    recorded = _one(pgbouncer, "SELECT count(*) FROM outbox_messages WHERE queue = 'bouncer_rec'")
    pushed = _one(pgbouncer, "SELECT count(*) FROM outbox_jobs WHERE queue = 'bouncer_push'")
    assert recorded == pushed == THREADS * TXNS_PER_THREAD
    assert len({i for per in ids for i in per}) == THREADS * TXNS_PER_THREAD


def test_relay_worker_and_every_command_through_pgbouncer(
    pgbouncer: PgBouncer, pooler_mode: None, ledger: None
) -> None:
    url, q = pgbouncer.url(), "bouncer_run"
    engine = _engine(pgbouncer, prepare_threshold=None)
    with engine.begin() as conn:
        jobs = [Job("ops.noop", queue=q) for _ in range(20)]
        jobs += [Job("ledger.credit", {"amount": n}, queue=q) for n in range(1, 11)]
        jobs += [Job("ops.permanent", queue=q) for _ in range(3)]
        recorded = [record(conn, _key(), job) for job in jobs]
    _cli(url, "migrate")
    _cli(url, "relay", "--batch-size", "2")
    assert all(_one(pgbouncer, _STATE, m) is None for m in recorded)  # moved to the queue

    worker = Worker(
        Database(url), registry, WorkerConfig(queues={q: 4}, prefetch=2, stop_when_empty=True)
    )
    stats = worker.run()
    assert worker.listener is None  # pooler mode: polling only
    assert (stats.succeeded, stats.dead, stats.lost) == (30, 3, 0)
    assert _one(pgbouncer, "SELECT sum(amount) FROM ops_ledger") == sum(range(1, 11))

    # relay --watch, polling only, while intents keep coming.
    stop = threading.Event()
    relay = Relay(Database(url), RelayConfig(batch_size=5, poll_interval=0.05))
    watching = threading.Thread(target=relay.watch, args=(stop,))
    watching.start()
    try:
        for _ in range(12):
            with engine.begin() as conn:
                record(conn, _key(), Job("ops.noop", queue=q))
        for _ in range(400):
            if not _one(pgbouncer, "SELECT count(*) FROM outbox_messages WHERE state = 'pending'"):
                break
            time.sleep(0.05)
    finally:
        stop.set()
        watching.join()
        relay.close()
    assert not _one(pgbouncer, "SELECT count(*) FROM outbox_messages WHERE state = 'pending'")

    # Every operator command (one intent quarantined by hand for retry to find).
    with engine.begin() as conn:
        quarantined = record(conn, _key(), Job("ops.noop", queue=q))
    with psycopg.connect(pgbouncer.direct_url, autocommit=True) as c:
        c.execute(
            "UPDATE outbox_messages SET state = 'failed', failure_reason = 'x', payload = %s "
            "WHERE message_id = %s",
            ('{"b": 1, "a": 2}', quarantined),
        )
    dead = [str(r) for r in _cli(url, "queue", "failed").stdout.split() if r.count("-") == 4]
    assert len(dead) == 3
    for args in (
        ("status",),
        ("status", "--json"),
        ("failed",),
        ("retry", quarantined, "--accept-current"),
        ("prune", "0"),
        ("queue", "jobs"),
        ("queue", "stats"),
        ("queue", "failed", "--show", dead[0]),
        ("queue", "forget", dead[0], "--yes"),
        ("queue", "retry", dead[1]),
        ("queue", "retry", "all"),
        ("queue", "remove", dead[1], "--yes"),
        ("queue", "clear", "--queue", q, "--yes"),
    ):
        _cli(url, *args)
    engine.dispose()


def test_no_session_setting_of_ours_reaches_another_client(
    pgbouncer: PgBouncer, pooler_mode: None, ledger: None
) -> None:
    """One server connection shared by all: after our relay, worker (transactional
    handlers included), producers and commands ran on it, a new client finds it clean."""
    url, q = pgbouncer.url(single=True), "bouncer_leak"
    with pgbouncer.connect(single=True, autocommit=True) as first:
        first.execute("DISCARD ALL")  # what an earlier test's engine left on it
    engine = _engine(pgbouncer, single=True, prepare_threshold=None)
    with engine.begin() as conn:  # enough for every statement to run more than 5 times
        for n in range(40):
            job = Job("ledger.credit" if n % 2 else "ops.noop", {"amount": 0}, queue=q)
            record(conn, _key(), job)
    _cli(url, "relay", "--batch-size", "2")
    stats = Worker(
        Database(url), registry, WorkerConfig(queues={q: 2}, prefetch=2, stop_when_empty=True)
    ).run()
    assert (stats.succeeded, stats.lost) == (40, 0)
    _cli(url, "status")
    engine.dispose()
    with pgbouncer.connect(single=True, autocommit=True) as other:
        assert other.execute("SHOW synchronous_commit").fetchone() == ("on",)
        assert other.execute("SELECT name FROM pg_prepared_statements").fetchall() == []
        changed = other.execute(
            "SELECT name FROM pg_settings WHERE source = 'session' AND name <> ALL(%s)",
            (list(BOUNCER_TRACKED),),
        ).fetchall()
    assert changed == []


def test_worker_commits_asynchronously_in_its_own_transaction_only(pgbouncer: PgBouncer) -> None:
    """The worker's hot statements turn synchronous_commit off for their own transaction;
    the session (the server connection PgBouncer shares) keeps the server's setting."""
    q = f"bouncer_async_{uuid.uuid4().hex[:8]}"
    base = {"queue": q, "limit": 1, "worker": "w", "lease_ms": 60_000}
    with Database(pgbouncer.direct_url).connect() as conn:
        with conn.transaction():
            push(conn.raw, Job("ops.noop", queue=q))
            push(conn.raw, Job("ops.noop", queue=q))

        def in_transaction(statement: str, **params: Any) -> list[Any]:
            assert conn.execute_sql("SHOW synchronous_commit") == [("on",)]
            with conn.transaction():
                rows = conn.execute(statement, {**base, **params})
                assert rows, statement  # it wrote: a claim or an acknowledgement
                assert conn.execute_sql("SHOW synchronous_commit") == [("off",)], statement
            assert conn.execute_sql("SHOW synchronous_commit") == [("on",)], statement
            return rows

        (first,) = in_transaction("job_claim")
        done = {"ids": [first[0]], "attempts": [first[5]]}
        rows = in_transaction("job_ack_claim", **done)
        (second,) = [r for r in rows if r[1] is not None]  # the claimed one; NULL: acked
        assert [r[0] for r in rows if r[1] is None] == [first[0]]
        in_transaction("job_ack", ids=[second[0]], attempts=[second[5]])


def test_keyed_acknowledgements_sent_at_once_keep_each_key_in_line_through_pgbouncer(
    pgbouncer: PgBouncer, pooler_mode: None
) -> None:
    """A keyed acknowledgement goes out as one pipeline (BEGIN, the keys' lock, the
    statement, COMMIT: ``Connection.transact_at_once``). Through PgBouncer in transaction
    mode, on the one-connection pool another client uses between them, each key's jobs
    still come one after the other, in order, and nothing is left."""
    q = f"bouncer_keys_{uuid.uuid4().hex[:8]}"
    database = Database(pgbouncer.url(single=True))
    with database.connect() as conn, database.connect() as other:
        with conn.transaction():
            for n in range(3):
                for k in ("a", "b"):
                    push(conn.raw, Job("ops.noop", {"n": n, "k": k}, queue=q,
                                       ordering_key=f"{q}:{k}"))  # fmt: skip
        ran: list[tuple[str, int]] = []
        done: list[Any] = []
        while True:
            claim = JobClaim(q, 10, "w", 60_000)
            acked, jobs = conn.driver.job_ack_claim(JobFence("w", done), claim)
            assert acked == {j.id for j in done}
            assert other.execute_sql("SELECT 1") == [(1,)]
            if not jobs:
                break
            ran += [(orjson.loads(j.payload)["k"], orjson.loads(j.payload)["n"]) for j in jobs]
            done = jobs
    for k in ("a", "b"):
        assert [n for key, n in ran if key == k] == [0, 1, 2]
    assert _one(pgbouncer, "SELECT count(*) FROM outbox_jobs WHERE queue = %s", q) == 0
    assert _one(pgbouncer, "SELECT count(*) FROM outbox_ordering_keys") == 0
