"""The per-minute completion counts on every backend: what a worker writes, where the
minute lands, how flushes add up, what prune removes, and what the dashboard reads."""

from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs

from outbox import Job, PermanentFailure, Registry
from outbox.dashboard import store
from outbox.db.connection import Connection, Database
from outbox.queue import JobContext, Worker, WorkerConfig, push, throughput
from outbox.queue.throughput import DEAD, RETRIED, SUCCEEDED, Tally
from tests.dashboard.seed import claimed
from tests.fixtures.databases import sqlite_url

MINUTE_MS = 60_000


def _rows(conn: Connection) -> list[tuple[Any, ...]]:
    rows = conn.execute_sql(
        "SELECT minute_at, queue, worker_id, succeeded, retried, dead FROM outbox_throughput "
        "ORDER BY minute_at, queue, worker_id"
    )
    return [(int(m), str(q), str(w), int(s), int(r), int(d)) for m, q, w, s, r, d in rows]


class Wall:
    """A worker's wall clock, set by the test (UNIX seconds)."""

    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


def _registry() -> Registry:
    reg = Registry()

    @reg.job("t.ok")
    def ok(payload: Any, ctx: JobContext) -> None:
        return None

    @reg.job("t.flaky", max_attempts=3)
    def flaky(payload: Any, ctx: JobContext) -> None:
        raise RuntimeError("not yet")

    @reg.job("t.bad")
    def bad(payload: Any, ctx: JobContext) -> None:
        raise PermanentFailure("never")

    @reg.job("t.tx", transactional=True)
    def tx(payload: Any, ctx: JobContext) -> None:
        return None

    return reg


def test_a_worker_writes_what_it_settled_per_queue_into_rows_of_its_own(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    for job in [Job("t.ok", queue="a")] * 4 + [Job("t.tx", queue="a"), Job("t.flaky", queue="b"),
                                               Job("t.bad", queue="b"), Job("t.ok", queue="b")]:
        push(app_conn, job)
    app_conn.commit()
    before = conn.driver.clock_now()
    config = WorkerConfig(queues={"a": None, "b": None}, stop_when_empty=True, sleep=0.05)
    worker = Worker(database, _registry(), config)
    stats = worker.run()  # the last flush happens at stop
    after = conn.driver.clock_now()
    assert (stats.succeeded, stats.retried, stats.dead) == (6, 1, 1)
    rows = _rows(conn)
    assert {(q, w, s, r, d) for _, q, w, s, r, d in rows} == {
        ("a", worker.worker_id, 5, 0, 0),  # the transactional job counts as succeeded
        ("b", worker.worker_id, 1, 1, 1),
    }
    minutes = {m for m, *_ in rows}
    assert minutes <= {before // MINUTE_MS * MINUTE_MS, after // MINUTE_MS * MINUTE_MS}
    chart = store.throughput(conn)
    assert chart.per_queue["a"].succeeded == 5
    assert (chart.per_queue["b"].retried, chart.per_queue["b"].dead) == (1, 1)
    assert sum(m.succeeded for m in chart.minutes) == 6
    assert len(chart.minutes) == store.CHART_MINUTES


def test_flushes_add_up_and_each_worker_keeps_its_own_row(conn: Connection) -> None:
    now_s = conn.driver.clock_now() / 1000
    wall = Wall(now_s // 60 * 60 + 30)  # the middle of the database's current minute
    one, two = Tally("w-one", wall=wall), Tally("w-two", wall=wall)
    one.add(SUCCEEDED, claimed("q", 3))
    one.flush(conn.driver)
    one.add(SUCCEEDED, claimed("q", 2))
    one.add(RETRIED, claimed("q"))
    one.flush(conn.driver)
    two.add(DEAD, claimed("q"))
    two.flush(conn.driver)
    assert not one.pending and not two.pending
    rows = _rows(conn)
    assert [(q, w, s, r, d) for _, q, w, s, r, d in rows] == [
        ("q", "w-one", 5, 1, 0),
        ("q", "w-two", 0, 0, 1),
    ]
    minute = rows[0][0]
    assert rows[1][0] == minute and minute % MINUTE_MS == 0
    assert abs(minute - (wall.at - 30) * 1000) <= MINUTE_MS  # this minute (or the next)
    chart = store.throughput(conn)
    assert [(m.succeeded, m.retried, m.dead) for m in chart.minutes if m.start_ms == minute] == [
        (5, 1, 1)
    ]


def test_minutes_are_placed_by_the_database_clock_not_the_worker_clock(conn: Connection) -> None:
    db_now = conn.driver.clock_now()
    behind = Wall(db_now / 1000 - 7 * 3600)  # a worker whose clock is seven hours behind
    tally = Tally("w-skewed", wall=behind)
    tally.add(SUCCEEDED, claimed("q"))
    behind.at += 5  # flushed five seconds later
    tally.flush(conn.driver)
    (minute, *_), = _rows(conn)
    assert abs(minute - db_now) <= 2 * MINUTE_MS  # where the database says now is


def test_prune_drops_minutes_older_than_a_day_and_keeps_the_rest(conn: Connection) -> None:
    db_now_s = conn.driver.clock_now() / 1000
    wall = Wall(db_now_s // 60 * 60 + 30)
    then = Wall(wall.at - 3 * 86_400)
    old = Tally("w-old", wall=then)
    old.add(SUCCEEDED, claimed("q"))
    then.at = wall.at  # flushed now, three days after it counted
    old.flush(conn.driver)
    recent = Tally("w-recent", wall=wall)
    recent.add(SUCCEEDED, claimed("q"))
    recent.flush(conn.driver)
    assert len(_rows(conn)) == 2
    assert throughput.prune(conn.driver) == 1
    assert [w for _, _, w, *_ in _rows(conn)] == ["w-recent"]
    assert throughput.prune(conn.driver) == 0


def test_a_refused_flush_keeps_the_counts_for_the_next_one(tmp_path: Any) -> None:
    from outbox.db.migrate import migrate

    url = sqlite_url(tmp_path)
    with Database(url).connect() as conn:
        migrate(conn)
        conn.execute_sql("ALTER TABLE outbox_throughput RENAME TO throughput_away")
        tally = Tally("w-kept")
        tally.add(SUCCEEDED, claimed("q", 2))
        with capture_logs() as logs:
            tally.flush(conn.driver)
            tally.add(SUCCEEDED, claimed("q"))
            tally.flush(conn.driver)  # still refused: logged once
        assert tally.pending
        assert [e["event"] for e in logs] == ["worker.throughput_not_written"]
        assert "q" not in str(logs)  # the error's class, no message
        conn.execute_sql("ALTER TABLE throughput_away RENAME TO outbox_throughput")
        tally.flush(conn.driver)
        assert not tally.pending
        assert [(s, r, d) for *_, s, r, d in _rows(conn)] == [(3, 0, 0)]
