"""Ordering keys on every backend, in one process: bad keys refused with the database
unchanged, the fingerprint (keyless jobs keep theirs), the relay handing a key's intents
off in order, and the line held by a retry, a backoff wait and a snooze, released by an
acknowledgement, a dead letter and a cancellation.

The racing half (worker processes, SIGKILLs, a start/end ledger) is in
``tests/reliability/test_ordering_processes.py``.
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any

import pytest
from opentelemetry import trace

from outbox import (
    Job,
    PermanentFailure,
    Registry,
    Snooze,
    cancel_job,
    push,
    push_many,
    record,
    record_many,
)
from outbox.db.connection import Connection, Database
from outbox.db.rows import JobDeadLetter
from outbox.errors import DatabaseError, IdempotencyConflict, InvalidJob
from outbox.job import BLOCKED_OFFSET_MS, NormalJob, fingerprint, normalise
from outbox.queue import Worker, WorkerConfig
from outbox.queue.backoff import Backoff
from outbox.relay import Relay, RelayConfig
from outbox.relay.target import SqlQueueTarget
from outbox.status import status
from tests.fixtures.databases import raw_connect
from tests.fixtures.gaps import Gap, skip_gap
from tests.fixtures.queue_ops import (
    Failure,
    ack,
    ack_and_claim,
    claim,
    dead_letter,
    now_ms,
    release,
)
from tests.fixtures.statements import Counting
from tests.fixtures.tracing import spans  # noqa: F401  (the fixture)
from tests.fixtures.workers import count

TABLES = ("outbox_keys", "outbox_messages", "outbox_jobs", "outbox_ordering_keys")
LEASE = 30_000


def _counts(conn: Connection) -> dict[str, int]:
    return {t: count(conn, t) for t in TABLES}


def _relay(database: Database, *, in_python: bool = False, batch: int = 100) -> int:
    with Relay(database, RelayConfig(verify_in_python=in_python, batch_size=batch)) as relay:
        return relay.run_once().handed_off


def _record_statements(monkeypatch: pytest.MonkeyPatch, conn: Connection, sent: list[str]) -> None:
    """Append the name of every statement ``conn`` runs to ``sent`` (those sent at once
    too, each by its name)."""
    for method in ("execute", "execute_count"):
        run = getattr(conn, method)

        def named(name: str, params: Any = None, run: Any = run) -> Any:
            sent.append(name)
            return run(name, params)

        monkeypatch.setattr(conn, method, named)
    at_once = conn.transact_at_once

    def steps_named(steps: Any, *, operation: str) -> Any:
        sent.extend(name for name, _ in steps)
        return at_once(steps, operation=operation)

    monkeypatch.setattr(conn, "transact_at_once", steps_named)


def _names(jobs: list[Any]) -> list[Any]:
    import orjson

    return [orjson.loads(j.payload)["n"] for j in jobs]


BAD_KEYS = [
    ("x" * 201, "ordering_key is 201 bytes; the limit is 200"),
    ("order:\x07", "ordering_key has a character outside printable ASCII"),
    ("ordre:é", "ordering_key has a character outside printable ASCII"),
    ("", "ordering_key is empty"),
    (42, "ordering_key must be a str or None (got int)"),
    (b"order:1", "ordering_key must be a str or None (got bytes)"),
]


@pytest.mark.parametrize(("bad", "says"), BAD_KEYS)
def test_bad_ordering_key_is_refused_naming_the_problem_and_nothing_is_written(
    conn: Connection, app_conn: Any, bad: Any, says: str
) -> None:
    before = _counts(conn)
    job = Job("o.run", {"n": 1}, ordering_key=bad)
    for write in (
        lambda: record(app_conn, "k:bad", job),
        lambda: push(app_conn, job),
        lambda: record_many(app_conn, [("k:ok", Job("o.run")), ("k:bad", job)]),
        lambda: push_many(app_conn, [Job("o.run"), job]),
    ):
        with pytest.raises(InvalidJob, match=says.replace("(", r"\(").replace(")", r"\)")):
            write()
    app_conn.commit()
    assert _counts(conn) == before


def test_keyless_fingerprint_is_unchanged_and_a_key_is_sealed_in_it() -> None:
    plain = normalise(Job("o.run", {"n": 1}))
    legacy = hashlib.sha256(b'v1\no.run\ndefault\n\n\n{"n":1}').hexdigest()
    assert fingerprint(plain, None) == legacy
    keyed = normalise(Job("o.run", {"n": 1}, ordering_key="order:42"))
    digest = hashlib.sha256(b"order:42").hexdigest()
    assert keyed.ordering_key == digest
    layout = f'v3\no.run\ndefault\n\n\n0\n{digest}\n{{"n":1}}'.encode()
    assert fingerprint(keyed, None) == hashlib.sha256(layout).hexdigest()
    other = NormalJob(*keyed[:-1], ordering_key=hashlib.sha256(b"order:43").hexdigest())
    assert fingerprint(other, None) != fingerprint(keyed, None)


def test_same_idempotency_key_with_another_ordering_key_is_a_conflict(app_conn: Any) -> None:
    first = record(app_conn, "k:1", Job("o.run", {"n": 1}, ordering_key="order:1"))
    assert record(app_conn, "k:1", Job("o.run", {"n": 1}, ordering_key="order:1")) == first
    with pytest.raises(IdempotencyConflict):
        record(app_conn, "k:1", Job("o.run", {"n": 1}, ordering_key="order:2"))
    with pytest.raises(IdempotencyConflict):
        record(app_conn, "k:1", Job("o.run", {"n": 1}))


@pytest.mark.parametrize("in_python", [False, True], ids=["sql-verify", "python-verify"])
def test_relay_hands_a_keys_intents_off_in_order_only_the_first_claimable(
    database: Database, conn: Connection, app_conn: Any, in_python: bool
) -> None:
    record_many(
        app_conn,
        [(f"k:{n}", Job("o.run", {"n": n}, ordering_key=f"order:{n % 2}")) for n in range(6)]
        + [("k:free", Job("o.run", {"n": "free"}))],
    )
    app_conn.commit()
    assert _relay(database, in_python=in_python, batch=4) == 4
    assert _relay(database, in_python=in_python, batch=4) == 3
    assert count(conn, "outbox_messages") == 0
    jobs = claim(conn, "default", 10, "w1", LEASE)
    assert sorted(map(str, _names(jobs))) == ["0", "1", "free"]
    assert claim(conn, "default", 10, "w1", LEASE) == []
    for expected in ([2, 3], [4, 5]):
        ack(conn, "w1", jobs)
        jobs = claim(conn, "default", 10, "w1", LEASE)
        assert sorted(_names(jobs)) == expected
    ack(conn, "w1", jobs)
    assert _counts(conn)["outbox_jobs"] == 0
    assert count(conn, "outbox_ordering_keys") == 0


def test_a_tampered_ordering_key_is_quarantined(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    mid = record(app_conn, "k:t", Job("o.run", {"n": 1}, ordering_key="order:1"))
    app_conn.commit()
    with conn.transaction():
        conn.execute_sql(
            "UPDATE outbox_messages SET ordering_key = 'f' WHERE message_id = "
            + repr(mid).replace('"', "'")
        )
    assert _relay(database) == 0
    assert conn.execute_sql("SELECT failure_reason FROM outbox_messages") == [
        ("fingerprint_mismatch",)
    ]


def test_a_retry_and_its_backoff_hold_the_line_a_dead_letter_releases_it(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    for n in range(3):
        record(app_conn, f"k:{n}", Job("o.run", {"n": n}, ordering_key="order:1"))
    app_conn.commit()
    _relay(database)
    (first,) = claim(conn, "default", 10, "w1", LEASE)
    assert release(conn, "w1", first, 0, "boom")  # a failed attempt, due again at once
    (again,) = claim(conn, "default", 10, "w1", LEASE)
    assert _names([again]) == [0]  # the same job: nothing later in the key ran
    assert release(conn, "w1", again, 60_000, "boom")  # a backoff wait
    assert claim(conn, "default", 10, "w1", LEASE) == []
    with conn.transaction():
        conn.execute_sql("UPDATE outbox_jobs SET available_at = 0 WHERE available_at < "
                         f"{BLOCKED_OFFSET_MS}")  # fmt: skip
    (third_try,) = claim(conn, "default", 10, "w1", LEASE)
    assert dead_letter(conn, "w1", third_try, Failure("Boom", "boom", ""))
    (second,) = claim(conn, "default", 10, "w1", LEASE)
    assert _names([second]) == [1]
    (row,) = conn.execute_sql("SELECT ordering_key FROM outbox_failed_jobs")
    assert row[0] == hashlib.sha256(b"order:1").hexdigest()


def test_cancelling_a_waiting_job_keeps_the_others_in_order(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    mids = [push(app_conn, Job("o.run", {"n": n}, ordering_key="order:1")) for n in range(3)]
    app_conn.commit()
    assert cancel_job(database, mids[1]) == "dead"
    (first,) = claim(conn, "default", 10, "w1", LEASE)
    assert _names([first]) == [0]
    assert cancel_job(database, mids[0]) == "flagged"  # held: its worker records it
    ack(conn, "w1", [first])  # ... here it finished first: the ack is refused
    with conn.transaction():
        conn.execute_sql("UPDATE outbox_jobs SET cancel_requested_at = NULL")
    ack(conn, "w1", [first])
    (last,) = claim(conn, "default", 10, "w1", LEASE)
    assert _names([last]) == [2]


def test_a_cancelled_job_in_its_turn_passes_the_turn_on(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    mids = [push(app_conn, Job("o.run", {"n": n}, ordering_key="order:1")) for n in range(2)]
    app_conn.commit()
    assert cancel_job(database, mids[0]) == "dead"
    (job,) = claim(conn, "default", 10, "w1", LEASE)
    assert _names([job]) == [1]


def test_push_behind_a_recorded_job_of_the_key_waits_its_turn(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    record(app_conn, "k:1", Job("o.run", {"n": 0}, ordering_key="order:1"))
    app_conn.commit()
    _relay(database)
    push(app_conn, Job("o.run", {"n": 1}, ordering_key="order:1"), delay=0)
    push(app_conn, Job("o.run", {"n": "free"}))
    app_conn.commit()
    jobs = claim(conn, "default", 10, "w1", LEASE)
    assert sorted(map(str, _names(jobs))) == ["0", "free"]
    ack(conn, "w1", jobs)
    assert _names(claim(conn, "default", 10, "w1", LEASE)) == [1]


def test_a_waiting_job_keeps_its_own_due_time(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    push(app_conn, Job("o.run", {"n": 0}, ordering_key="order:1"))
    push(app_conn, Job("o.run", {"n": 1}, ordering_key="order:1"), delay=3600)
    app_conn.commit()
    jobs = claim(conn, "default", 10, "w1", LEASE)
    ack(conn, "w1", jobs)
    assert claim(conn, "default", 10, "w1", LEASE) == []  # its turn, but not yet due
    (due,) = conn.execute_sql("SELECT available_at FROM outbox_jobs")[0:1]
    assert now_ms(conn) + 3_500_000 < due[0] < BLOCKED_OFFSET_MS


ordered = Registry()
SEEN: list[tuple[str, int]] = []
SNOOZED: set[int] = set()


@ordered.job("o.seq", max_attempts=5, backoff=Backoff(base=0.01, cap=0.01))
def _seq(payload: dict[str, Any], ctx: Any) -> None:
    n = payload["n"]
    if n % 3 == 0 and n not in SNOOZED:
        SNOOZED.add(n)
        raise Snooze(0)
    SEEN.append((payload["key"], n))
    if n % 4 == 1 and SEEN.count((payload["key"], n)) == 1:
        raise RuntimeError("fail once")


def test_a_worker_with_many_threads_runs_each_key_in_order(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    SEEN.clear()
    SNOOZED.clear()
    for n in range(12):
        key = f"order:{n % 3}"
        record(app_conn, f"k:{n}", Job("o.seq", {"n": n, "key": key}, ordering_key=key))
        if n % 2:
            app_conn.commit()
    app_conn.commit()
    _relay(database)
    config = WorkerConfig(concurrency=4, stop_when_empty=True)
    with Worker(database, ordered, config) as worker:
        deadline = time.monotonic() + 60  # a bound for a hung test, not a timed assert
        while count(conn, "outbox_jobs") and time.monotonic() < deadline:
            worker.run_once()
            time.sleep(0.005)  # retries wait a 10 ms backoff
    assert count(conn, "outbox_jobs") == 0 and count(conn, "outbox_failed_jobs") == 0
    for k in range(3):
        runs = [n for key, n in SEEN if key == f"order:{k}"]
        assert runs == sorted(runs), runs  # a retry runs again before the next one
        assert sorted(set(runs)) == [n for n in range(12) if n % 3 == k]


flaky = Registry()
FLAKY_RUNS: list[int] = []


@flaky.job("o.flaky", max_attempts=3, backoff=Backoff(base=10, cap=10))
def _flaky(payload: dict[str, Any], ctx: Any) -> None:
    FLAKY_RUNS.append(payload["n"])
    if payload["n"] == 0 and ctx.attempt == 1:
        raise RuntimeError("the first attempt fails")


def test_run_pending_holds_a_keys_line_through_a_retry_like_the_worker(app_conn: Any) -> None:
    from outbox.testing import Clock, run_pending

    FLAKY_RUNS.clear()
    clock = Clock()
    for n in range(3):
        record(app_conn, f"k:{n}", Job("o.flaky", {"n": n}, ordering_key="order:1"))
    record(app_conn, "k:free", Job("o.flaky", {"n": 9}))
    first = run_pending(app_conn, flaky, clock=clock)
    assert [r.outcome for r in first.ran] == ["retry", "done"]
    assert FLAKY_RUNS == [0, 9]  # the key's later jobs wait for its retry
    clock.advance(10)
    second = run_pending(app_conn, flaky, clock=clock)
    assert [r.outcome for r in second.ran] == ["done", "done", "done"]
    assert FLAKY_RUNS == [0, 9, 0, 1, 2]


def test_operator_removal_clear_and_retry_keep_each_key_in_line(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    mids = [push(app_conn, Job("o.run", {"n": n}, ordering_key="order:1")) for n in range(4)]
    app_conn.commit()
    (first,) = claim(conn, "default", 10, "w1", LEASE)
    assert dead_letter(conn, "w1", first, Failure("Boom", "boom", ""))  # releases the key
    assert conn.driver.job_remove(mids[1]) == 1  # the next in line: the turn passes on
    assert conn.driver.dead_requeue([mids[0]], 10) == 1  # joins the end of the line
    order = []
    while jobs := claim(conn, "default", 10, "w1", LEASE):
        assert len(jobs) == 1
        order += _names(jobs)
        ack(conn, "w1", jobs)
    assert order == [2, 3, 0]
    assert count(conn, "outbox_ordering_keys") == 0
    for n in range(3):
        push(app_conn, Job("o.run", {"n": n}, ordering_key=f"order:{n % 2}", queue="q2"))
    push(app_conn, Job("o.run", {"n": 9}, ordering_key="order:0"))
    app_conn.commit()
    assert conn.driver.queue_clear("q2") == 3
    assert _names(claim(conn, "default", 10, "w1", LEASE)) == [9]  # its turn came
    assert count(conn, "outbox_ordering_keys") == 1


holding = Registry()


@holding.job("o.held", max_attempts=1, dead_letter_holds_key=True)
def _held(payload: dict[str, Any], ctx: Any) -> None:
    if payload["n"] == 0 and payload.get("fail", True):
        raise PermanentFailure("the first job fails for good")


def test_a_dead_letter_that_holds_its_key_blocks_it_until_forget(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    mids = [push(app_conn, Job("o.held", {"n": n}, ordering_key="order:1")) for n in range(2)]
    push(app_conn, Job("o.held", {"n": 5}, ordering_key="order:2"))
    app_conn.commit()
    with Worker(database, holding, WorkerConfig(stop_when_empty=True)) as worker:
        worker.run()
    assert count(conn, "outbox_failed_jobs") == 1 and count(conn, "outbox_jobs") == 1
    push(app_conn, Job("o.held", {"n": 2}, ordering_key="order:1"))  # waits too
    app_conn.commit()
    ordering = status(conn).ordering
    assert (ordering.waiting, ordering.waiting_keys) == (2, 1)
    assert [h.message_id for h in ordering.held] == [mids[0]]
    assert ordering.held[0].key == hashlib.sha256(b"order:1").hexdigest()[:12]
    assert status(conn).as_dict()["ordering"]["held_keys"][0]["message_id"] == mids[0]
    assert conn.driver.dead_delete(mids[0]) == 1  # forget: the key's turn passes on
    assert _names(claim(conn, "default", 10, "w1", LEASE)) == [1]
    assert status(conn).ordering.held == ()


def test_requeueing_a_dead_letter_that_holds_its_key_runs_it_first(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    mids = [push(app_conn, Job("o.held", {"n": n}, ordering_key="order:1")) for n in range(3)]
    app_conn.commit()
    (first,) = claim(conn, "default", 10, "w1", LEASE)
    held = JobDeadLetter("w1", first, Failure("Boom", "boom", ""), hold_key=True)
    assert conn.driver.job_dead_letter(held)
    assert claim(conn, "default", 10, "w1", LEASE) == []  # the key stays blocked
    assert conn.driver.dead_requeue([mids[0]], 10) == 1
    order = []
    while jobs := claim(conn, "default", 10, "w1", LEASE):
        assert len(jobs) == 1
        order += _names(jobs)
        ack(conn, "w1", jobs)
    assert order == [0, 1, 2]


def test_status_command_shows_blocked_keys(
    database: Database, conn: Connection, app_conn: Any, db_url: str
) -> None:
    from click.testing import CliRunner

    from outbox.cli import main

    mid = push(app_conn, Job("o.held", {"n": 0}, ordering_key="order:1"))
    push(app_conn, Job("o.held", {"n": 1}, ordering_key="order:1"))
    app_conn.commit()
    with Worker(database, holding, WorkerConfig(stop_when_empty=True)) as worker:
        worker.run()
    out = CliRunner().invoke(main, ["--database-url", db_url, "status"])
    assert out.exit_code == 0, out.output
    assert "1 jobs wait their turn on 1 keys" in out.output
    assert mid in out.output and "outbox queue forget ID" in out.output


def test_the_reaper_gives_a_turn_no_one_passed_on(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    """Code of the previous version acknowledges a keyed job without passing its turn
    on (a rolling upgrade): the next reap does."""
    for n in range(2):
        push(app_conn, Job("o.run", {"n": n}, ordering_key="order:1"))
    app_conn.commit()
    (first,) = claim(conn, "default", 10, "w1", LEASE)
    with conn.transaction():  # the previous version's job_ack: a plain delete
        conn.execute_sql(f"DELETE FROM outbox_jobs WHERE id = {first.id}")
    assert claim(conn, "default", 10, "w1", LEASE) == []
    result = conn.driver.job_reap(lambda name, n: 3, 100)
    assert result.unstuck == 1
    assert _names(claim(conn, "default", 10, "w1", LEASE)) == [1]
    assert conn.driver.job_reap(lambda name, n: 3, 100).unstuck == 0


keeping = Registry()
KEPT: list[int] = []


@keeping.job("o.keeps", keep_result=True)
def _keeps(payload: dict[str, Any], ctx: Any) -> int:
    KEPT.append(payload["n"])
    return int(payload["n"])


def test_a_job_that_keeps_its_result_passes_its_keys_turn_on(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    """The acknowledgement that writes a result (``result_ack``) passes the key's turn
    as the plain one does: the next job of the key is claimable at once, not left to the
    reaper's heal."""
    KEPT.clear()
    for n in range(3):
        push(app_conn, Job("o.keeps", {"n": n}, ordering_key="order:kept"))
    app_conn.commit()
    with Worker(database, keeping, WorkerConfig(stop_when_empty=True)) as worker:
        for _ in range(3):
            worker.run_once()
    assert KEPT == [0, 1, 2]
    assert count(conn, "outbox_jobs") == 0 and count(conn, "outbox_ordering_keys") == 0


class _TwoLanes(SqlQueueTarget):
    in_flight = 2  # the lanes a broker target asks for (outbox.relay.inflight), on SQL


@pytest.mark.parametrize("lanes", [1, 2])
def test_a_drain_whose_rows_wait_for_another_batch_pauses_instead_of_spinning(
    database: Database, conn: Connection, app_conn: Any, db_url: str, lanes: int
) -> None:
    """Another batch (a lane, a relay) holds a key's older intent: every later intent of
    the key is deferred, batch after batch, until it commits. The drain, and each of its
    lanes, pauses between such batches (outbox.relay.pauses.Deferred); they used to claim
    them again at once, a busy loop on the database for as long as the other batch took."""
    if database.dialect.name == "sqlite":
        skip_gap(Gap.SQLITE_ONE_WRITER)
    if database.dialect.name == "mysql":
        skip_gap(Gap.MARIADB_MOVE_WAITS)
    record_many(app_conn, [(f"k:{n}", Job("o.run", {"n": n}, ordering_key="order:h"))
                           for n in range(3)])  # fmt: skip
    app_conn.commit()
    holder = raw_connect(db_url)
    batches: list[int] = []
    try:
        cur = holder.cursor()
        cur.execute("SELECT id FROM outbox_messages ORDER BY id LIMIT 1 FOR UPDATE")
        target = _TwoLanes() if lanes == 2 else SqlQueueTarget()
        with Relay(database, target=target) as relay:
            drain = threading.Thread(target=relay.run, kwargs={
                "progress": lambda b: batches.append(b.handed_off)})  # fmt: skip
            drain.start()
            time.sleep(1.0)
            held = list(batches)
            holder.rollback()
            drain.join(30)
        assert not drain.is_alive()
    finally:
        holder.rollback()
        holder.close()
    assert held and set(held) == {0}  # deferred while the first intent was held
    assert len(held) <= 12 * lanes  # pauses of 10 ms doubling to the poll interval: ~7 in 1 s
    assert sum(batches) == 3
    jobs = claim(conn, "default", 10, "w1", LEASE)
    assert _names(jobs) == [0]  # in order: the first in its turn, the others wait


def test_push_many_enters_each_keys_line_in_the_given_order(
    conn: Connection, app_conn: Any
) -> None:
    push_many(app_conn, [Job("o.run", {"n": n}, ordering_key=f"order:{k}")
                         for n, k in ((0, "a"), (1, "a"), (2, "b"), (3, "a"))]
              + [Job("o.run", {"n": 4})])  # fmt: skip
    app_conn.commit()
    assert count(conn, "outbox_ordering_keys") == 2
    jobs = claim(conn, "default", 10, "w1", LEASE)
    assert sorted(_names(jobs)) == [0, 2, 4]  # each key's first, and the keyless one
    for expected in ([1], [3]):
        ack(conn, "w1", jobs)
        jobs = claim(conn, "default", 10, "w1", LEASE)
        assert _names(jobs) == expected
    ack(conn, "w1", jobs)
    assert count(conn, "outbox_ordering_keys") == 0


def test_push_many_under_a_span_leaves_keyless_jobs_out_of_any_line(
    conn: Connection, app_conn: Any, spans: Any  # noqa: F811
) -> None:
    """The batch's trace context is no ordering key: with a span active, keyless jobs
    are all claimable at once and no key row is written."""
    with trace.get_tracer("test").start_as_current_span("request"):
        push_many(app_conn, [Job("o.run", {"n": n}) for n in range(3)])
    app_conn.commit()
    assert count(conn, "outbox_ordering_keys") == 0
    assert sorted(_names(claim(conn, "default", 10, "w1", LEASE))) == [0, 1, 2]


def test_a_batch_enters_and_leaves_the_line_in_a_fixed_number_of_statements(
    conn: Connection,
) -> None:
    """200 jobs of 100 keys (the second of each key waits): entering is the lock and one
    read for the whole batch, leaving the lock, one promotion and one drop, whatever the
    number of keys (they were 2 statements a key entering and 3-4 leaving); the drop
    only for keys that got no turn, where the promotion says which it gave (MariaDB's
    UPDATE cannot: its drop always runs). The line still holds: each key's first job
    runs, its second gets the turn when it leaves, and the rows go with the last."""
    from outbox.db import ordering
    from outbox.db.caller import drive

    keys = [hashlib.sha256(f"order:{i}".encode()).hexdigest() for i in range(100)]

    def enter(t: Any) -> list[bool]:
        sent = Counting(t)
        waits = drive(ordering.enter(keys + keys), sent)  # type: ignore[arg-type]
        assert sent.names == ["ordering_lock", "ordering_any_job"]
        return waits

    waits = conn.transact(enter, operation="test")
    assert waits == [False] * 100 + [True] * 100
    with conn.transaction():
        jobs = [Job("t.ok", {"i": i}, queue="q", ordering_key=f"order:{i % 100}")
                for i in range(200)]
        push_many(conn.raw, jobs)
    held = claim(conn, "q", 500, "w:order", LEASE)
    assert sorted(_i(j) for j in held) == list(range(100))  # one a key
    with conn.transaction():
        for j in held:
            conn.execute_sql(f"DELETE FROM outbox_jobs WHERE id = {j.id}")  # as old code

    def leave(t: Any) -> list[str]:
        sent = Counting(t)
        drive(ordering.leave(keys), sent)  # type: ignore[arg-type]
        return list(sent.names)

    promoted = ["ordering_lock", "ordering_promote_free"]
    if conn.dialect.name == "mysql":
        promoted.append("ordering_drop_free")
    assert conn.transact(leave, operation="test") == promoted  # every key got a turn
    second = claim(conn, "q", 500, "w:order", LEASE)
    assert sorted(_i(j) for j in second) == list(range(100, 200))
    assert count(conn, "outbox_ordering_keys") == 100  # each key still has its job
    with conn.transaction():
        for j in second:
            conn.execute_sql(f"DELETE FROM outbox_jobs WHERE id = {j.id}")
    assert conn.transact(leave, operation="test") == [
        "ordering_lock", "ordering_promote_free", "ordering_drop_free"]
    assert count(conn, "outbox_ordering_keys") == 0  # no job left: no key row


def _i(job: Any) -> int:
    import orjson

    return int(orjson.loads(job.payload)["i"])


def test_a_relay_batch_of_keyed_intents_is_one_statement_on_postgresql(
    database: Database, conn: Connection, app_conn: Any, db_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The keyed rows of a batch move in relay_handoff's one statement on PostgreSQL (the
    look for an older intent, the keys' locks and the turns were three statements more,
    each a probe a key): a key with a job in the queue waits behind it, a new key's first
    intent runs and its second waits, a key whose older intent another relay holds stays
    in the outbox, keyless rows run; the trace contexts of the keyed rows come back too.
    Elsewhere the same batch in steps gives the same queue."""
    from outbox.db.rows import OutboxHandoff
    from outbox.relay.verify import reason_for

    push(app_conn, Job("o.run", {"n": "queued"}, ordering_key="order:busy"))
    record_many(app_conn, [("k:held", Job("o.run", {"n": "held"}, ordering_key="order:held"))])
    app_conn.commit()
    record_many(app_conn, [
        ("k:b1", Job("o.run", {"n": "busy1"}, ordering_key="order:busy")),
        ("k:n1", Job("o.run", {"n": "new1"}, ordering_key="order:new")),
        ("k:h2", Job("o.run", {"n": "held2"}, ordering_key="order:held")),
        ("k:n2", Job("o.run", {"n": "new2"}, ordering_key="order:new")),
        ("k:free", Job("o.run", {"n": "free"})),
    ])  # fmt: skip
    app_conn.commit()
    one_writer = database.dialect.name == "sqlite"  # no other relay can hold a row
    holder = None if one_writer else raw_connect(db_url)
    sent: list[str] = []
    relay = database.connect()
    try:
        if holder is not None:  # another relay's batch holds the key's older intent
            holder.cursor().execute(
                "SELECT id FROM outbox_messages ORDER BY id LIMIT 1 FOR UPDATE")
        _record_statements(monkeypatch, relay, sent)
        result = relay.driver.outbox_handoff(OutboxHandoff(100, False), reason_for)
    finally:
        relay.close()
        if holder is not None:
            holder.rollback()
            holder.close()
    if database.dialect.name == "postgresql":
        assert sent == ["relay_handoff"]
    if not one_writer:
        assert result.handed_off == 4  # busy1, new1, new2, free; held2 waits for "held"
        assert count(conn, "outbox_messages") == 2
        assert _relay(database) == 2  # the held intent, then its key's second
    assert count(conn, "outbox_messages") == 0
    jobs = claim(conn, "default", 10, "w1", LEASE)
    assert sorted(_names(jobs)) == ["free", "held", "new1", "queued"]
    for expected in (["busy1", "held2", "new2"], []):
        ack(conn, "w1", jobs)
        jobs = claim(conn, "default", 10, "w1", LEASE)
        assert sorted(_names(jobs)) == expected
    assert count(conn, "outbox_ordering_keys") == 0


def test_a_key_row_left_without_jobs_makes_the_relays_job_wait_until_the_reaper(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    """On PostgreSQL and SQLite the relay reads a key's row as its line (relay_handoff,
    ordering.enter_created): a row that outlived its key's jobs (code of the previous
    version deleted the job and left it) makes the next job of the key wait, and the
    reaper's heal gives it its turn. MariaDB's steps read the key's jobs and run it at
    once."""
    digest = hashlib.sha256(b"order:stale").hexdigest()
    with conn.transaction():
        conn.execute_sql(f"INSERT INTO outbox_ordering_keys (key_digest) VALUES ('{digest}')")
    record(app_conn, "k:s", Job("o.run", {"n": 1}, ordering_key="order:stale"))
    app_conn.commit()
    assert _relay(database) == 1
    jobs = claim(conn, "default", 10, "w1", LEASE)
    if database.dialect.name != "mysql":
        assert jobs == []
        assert conn.driver.job_reap(lambda name, n: 3, 100).unstuck == 1
        jobs = claim(conn, "default", 10, "w1", LEASE)
    assert _names(jobs) == [1]
    ack(conn, "w1", jobs)
    assert count(conn, "outbox_ordering_keys") == 0


def test_a_late_acknowledgement_or_dead_letter_leaves_no_key_row_behind(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    """A worker whose job another one already took out (a lost lease) acknowledges or
    dead-letters it: nothing of the job is left, and neither is the key's row its lock
    created (the relay would read that row as a line and make the key's next job wait
    for the reaper)."""
    for n in range(2):
        push(app_conn, Job("o.run", {"n": n}, ordering_key=f"order:late{n}"))
    app_conn.commit()
    first, second = sorted(claim(conn, "default", 10, "w1", LEASE), key=lambda j: j.id)
    with conn.transaction():  # another worker took both out, and the keys' rows with them
        conn.execute_sql("DELETE FROM outbox_jobs")
        conn.execute_sql("DELETE FROM outbox_ordering_keys")
    assert ack(conn, "w1", [first]) == set()
    assert not dead_letter(conn, "w1", second, Failure("Boom", "boom", ""))
    assert count(conn, "outbox_ordering_keys") == 0


def test_an_acknowledgement_passes_each_keys_turn_on_in_one_statement_after_the_lock(
    database: Database, conn: Connection, app_conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL an acknowledgement of keyed jobs is the keys' lock and one statement
    (ordering_ack_leave: the delete, the promotion, the drop; they were three), sent
    together with BEGIN and COMMIT (transact_at_once). A key
    with a waiting job gives it the turn, a key with nothing left loses its row, a keyless
    job is acknowledged beside them; the same on every backend."""
    push_many(app_conn, [Job("o.run", {"n": n}, ordering_key=k)
                         for n, k in ((0, "order:a"), (1, "order:a"), (2, "order:b"))]
              + [Job("o.run", {"n": 3})])  # fmt: skip
    app_conn.commit()
    jobs = claim(conn, "default", 10, "w1", LEASE)
    assert sorted(_names(jobs)) == [0, 2, 3]
    sent: list[str] = []
    _record_statements(monkeypatch, conn, sent)
    assert ack(conn, "w1", jobs) == {j.id for j in jobs}
    monkeypatch.undo()
    if database.dialect.name == "postgresql":
        assert sent == ["ordering_lock", "ordering_ack_leave"]
    assert count(conn, "outbox_ordering_keys") == 1  # "a" has its second job
    (second,) = claim(conn, "default", 10, "w1", LEASE)
    assert _names([second]) == [1]
    ack(conn, "w1", [second])
    assert count(conn, "outbox_ordering_keys") == 0 and count(conn, "outbox_jobs") == 0


def test_an_ack_with_a_claim_takes_the_keys_next_job_in_the_write_that_gives_it_its_turn(
    database: Database, conn: Connection, app_conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL an acknowledgement of keyed jobs with a claim riding along is the
    keys' lock and one statement (ordering_ack_claim; it was three: the acknowledgement,
    then job_claim, which wrote the promoted job a second time), sent together. It takes
    what a claim after the acknowledgement would: most urgent first, so a keyless job of
    a more urgent priority goes before the key's next job, which still gets its turn,
    and the key's next job is claimed, due and in its turn, when it is the most urgent.
    The same jobs on every backend."""
    push_many(app_conn, [Job("o.run", {"n": n}, ordering_key="order:c", priority=5)
                         for n in range(3)])  # fmt: skip
    app_conn.commit()
    (first,) = claim(conn, "default", 1, "w1", LEASE)
    push(app_conn, Job("o.run", {"n": "urgent"}))
    app_conn.commit()
    acked, jobs = ack_and_claim(conn, "w1", [first], "default", 1, LEASE)
    assert acked == {first.id} and _names(jobs) == ["urgent"]
    acked, jobs = ack_and_claim(conn, "w1", jobs, "default", 2, LEASE)
    assert _names(jobs) == [1]  # its turn given by the acknowledgement before
    sent: list[str] = []
    _record_statements(monkeypatch, conn, sent)
    acked, (third,) = ack_and_claim(conn, "w1", jobs, "default", 2, LEASE)
    monkeypatch.undo()
    if database.dialect.name == "postgresql":
        assert sent == ["ordering_lock", "ordering_ack_claim"]
    assert acked == {jobs[0].id} and _names([third]) == [2]
    assert third.attempts == 1 and third.available_at < BLOCKED_OFFSET_MS
    assert count(conn, "outbox_jobs") == 1
    assert ack(conn, "w1", [third]) == {third.id}
    assert count(conn, "outbox_ordering_keys") == 0 and count(conn, "outbox_jobs") == 0


def test_statements_sent_at_once_leave_nothing_written_when_one_fails(
    database: Database, conn: Connection
) -> None:
    """``transact_at_once`` (the keyed acknowledgement's BEGIN, lock, statement and
    COMMIT in one round trip on PostgreSQL, one after the other elsewhere): a step the
    database refuses rolls back the steps before it, the error names the operation, and
    the connection goes on."""
    key = hashlib.sha256(b"order:at-once").hexdigest()
    lock = ("ordering_lock", {"keys": [key], "keys_json": f'["{key}"]'})
    refused = ("queue_push", {"message_id": None, "queue": "default", "job_name": "o.run",
                              "payload": "{}", "max_attempts": 3, "delay_ms": 0,
                              "priority": 0, "trace_context": None,
                              "ordering_key": key})  # fmt: skip
    with pytest.raises(DatabaseError) as caught:
        conn.transact_at_once([lock, refused], operation="ack")
    assert caught.value.operation == "ack"
    assert count(conn, "outbox_ordering_keys") == 0
    assert conn.transact_at_once([lock], operation="ack") == []
    assert count(conn, "outbox_ordering_keys") == 1


def test_a_keys_intent_past_the_rows_the_batch_could_see_waits_for_a_later_batch(
    database: Database, conn: Connection, app_conn: Any, db_url: str
) -> None:
    """relay_handoff reads the intents another relay holds from the pending rows up to
    the batch's newest keyed row, at most 8 batches of them: a key's older intent held
    past those (here the 17th pending row, with a batch of 2) is unseen, so the batch's
    keyed rows past the rows seen wait for a later batch rather than run before it."""
    if database.dialect.name == "sqlite":
        skip_gap(Gap.SQLITE_ONE_WRITER)
    if database.dialect.name == "mysql":
        skip_gap(Gap.MARIADB_MOVE_WAITS)
    record_many(app_conn, [(f"k:{n}", Job("o.run", {"n": n})) for n in range(16)]
                + [("k:a1", Job("o.run", {"n": "a1"}, ordering_key="order:far")),
                   ("k:a2", Job("o.run", {"n": "a2"}, ordering_key="order:far"))])  # fmt: skip
    app_conn.commit()
    holder = raw_connect(db_url)
    try:  # another relay's batches hold the 17 oldest, the key's first intent the last
        holder.cursor().execute("SELECT id FROM outbox_messages ORDER BY id LIMIT 17 FOR UPDATE")
        assert _relay(database, batch=2) == 0  # a2 saw 16 rows, not a1 behind them
    finally:
        holder.rollback()
        holder.close()
    while _relay(database, batch=2):
        pass
    assert count(conn, "outbox_messages") == 0
    jobs = [j for j in claim(conn, "default", 100, "w1", LEASE) if j.ordering_key]
    assert _names(jobs) == ["a1"]
    ack(conn, "w1", jobs)
    assert _names(claim(conn, "default", 100, "w1", LEASE)) == ["a2"]
