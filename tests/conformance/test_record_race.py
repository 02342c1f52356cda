"""Two producer processes recording one key in open transactions at the same time.

Whatever the interleaving, exactly one intent exists afterwards; the loser gets the
winner's id (same job) or ``IdempotencyConflict`` naming it (other job), or -- where the
database can only say so by aborting -- ``RetryTransaction``. Never a second row, never
an unexplained database error.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from typing import Any

import pytest

from outbox.db.connection import Connection, Database
from outbox.db.migrate import migrate
from outbox.job import key_digest
from tests.fixtures import databases as backends
from tests.fixtures.records import (
    counts,
    create_notes,
    message_rows,
    producer_child,
    racing_child,
)

SPAWN = multiprocessing.get_context("spawn")
# One worker runs the whole module: the producer pair of each backend (two spawned
# interpreters, 3-5 s to start on a loaded machine) is then started once per backend;
# spread over the workers, each started its own pairs, and again whenever its next test
# was of another backend than its last.
pytestmark = pytest.mark.xdist_group("record_race")
ANSWER_TIMEOUT_S = 60


class Producer:
    """One child process with its own application connection, driven step by step."""

    def __init__(self, db_url: str) -> None:
        self.pipe, child_end = SPAWN.Pipe()
        self.process = SPAWN.Process(target=producer_child, args=(db_url, child_end), daemon=True)
        self.process.start()
        self.send("pid")
        self._session: int | None = None

    @property
    def session(self) -> int:
        """The database's id for this producer's connection (asked once, at start)."""
        if self._session is None:
            self._session = int(self.result())
        return self._session

    def send(self, *cmd: Any) -> None:
        self.pipe.send(cmd)

    def ready(self) -> bool:
        return self.pipe.poll()

    def result(self) -> Any:
        assert self.pipe.poll(ANSWER_TIMEOUT_S), "the producer process did not answer"
        return self.pipe.recv()

    def call(self, *cmd: Any) -> Any:
        self.send(*cmd)
        return self.result()

    def stop(self) -> None:
        if self.process.is_alive():
            self.pipe.send(("stop",))
            self.process.join(ANSWER_TIMEOUT_S)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join()


@pytest.fixture(scope="module", params=backends.BACKENDS)
def race_url(
    request: pytest.FixtureRequest,
    _servers: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """One migrated database per backend for this module's step-driven races; every
    test uses keys of its own, so the producers can be started once."""
    backend = str(request.param)
    if backend == "sqlite":
        url = backends.sqlite_url(tmp_path_factory.mktemp("race"))
    else:
        url = _servers[backend].new_url()
    with Database(url).connect() as c:
        migrate(c)
        create_notes(c)
    yield url
    if backend != "sqlite":
        _servers[backend].drop_url(url)


@pytest.fixture(scope="module")
def pair(race_url: str) -> Iterator[tuple[Producer, Producer]]:
    first, second = Producer(race_url), Producer(race_url)
    try:
        assert first.session >= 0 and second.session >= 0
        yield first, second
    finally:
        first.stop()
        second.stop()


@pytest.fixture
def rconn(race_url: str) -> Iterator[Connection]:
    with Database(race_url).connect() as c:
        yield c


def rows_for(conn: Connection, key: str) -> list[dict[str, Any]]:
    return [r for r in message_rows(conn) if r["key_digest"] == key_digest(key)]


def wait_until_blocked(conn: Connection, backend: str, session: int) -> None:
    """Until the database shows ``session`` waiting for a lock (SQLite shows nothing)."""
    probe = {
        "postgresql": "SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted",
        "mysql": "SELECT count(*) FROM information_schema.innodb_trx"
        " WHERE trx_mysql_thread_id = %s AND trx_state = 'LOCK WAIT'",
    }
    if backend not in probe:
        time.sleep(0.3)
        return
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while conn.execute_sql(probe[backend], (session,))[0][0] == 0:
        assert time.monotonic() < deadline, "the second producer never waited for the first"
        time.sleep(0.2)  # MariaDB refreshes innodb_trx only when unread for 100 ms


def loser_waits_for_winner(
    pair: tuple[Producer, Producer],
    conn: Connection,
    backend: str,
    key: str,
    payloads: tuple[object, object],
    winner_ends: str,
    loser_snapshot: bool = False,
) -> tuple[str, Any]:
    """Winner records and holds its transaction open; the loser records the same key and
    must wait; then the winner commits or rolls back. Returns (winner id, loser outcome)."""
    winner, loser = pair
    if loser_snapshot and backend == "postgresql":
        assert loser.call("repeatable_read", True)[0] == "ok"
    assert winner.call("begin")[0] == "ok"
    assert loser.call("begin")[0] == "ok"
    if loser_snapshot and backend == "sqlite":
        assert loser.call("read")[0] == "ok"
    state, winner_id, _ = winner.call("record", key, payloads[0])
    assert state == "ok"
    loser.send("record", key, payloads[1])
    if not (loser_snapshot and backend == "sqlite"):  # SQLite refuses that one at once
        wait_until_blocked(conn, backend, loser.session)
        assert not loser.ready(), "the loser decided before the winner's transaction ended"
    assert winner.call(winner_ends)[0] == "ok"
    got = loser.result()
    assert loser.call("commit" if got[0] == "ok" else "rollback")[0] == "ok"
    if loser_snapshot and backend == "postgresql":
        assert loser.call("repeatable_read", False)[0] == "ok"
    return winner_id, got


def test_loser_gets_the_winners_id_for_the_same_job(
    pair: tuple[Producer, Producer], rconn: Connection
) -> None:
    backend = rconn.dialect.name
    winner_id, got = loser_waits_for_winner(
        pair, rconn, backend, "same", ({"n": 1}, {"n": 1}), "commit"
    )
    assert got == ("ok", winner_id, "")
    assert [r["message_id"] for r in rows_for(rconn, "same")] == [winner_id]


def test_loser_gets_a_conflict_naming_the_winner_for_another_job(
    pair: tuple[Producer, Producer], rconn: Connection
) -> None:
    backend = rconn.dialect.name
    winner_id, got = loser_waits_for_winner(
        pair, rconn, backend, "other", ({"n": 1}, {"n": 2}), "commit"
    )
    assert got[:2] == ("conflict", winner_id)
    assert [r["message_id"] for r in rows_for(rconn, "other")] == [winner_id]


def test_loser_records_its_own_intent_when_the_winner_rolls_back(
    pair: tuple[Producer, Producer], rconn: Connection
) -> None:
    backend = rconn.dialect.name
    winner_id, got = loser_waits_for_winner(
        pair, rconn, backend, "undo", ({"n": 1}, {"n": 2}), "rollback"
    )
    assert got[0] == "ok" and got[1] != winner_id
    rows = rows_for(rconn, "undo")
    assert [(r["message_id"], r["payload"]) for r in rows] == [(got[1], '{"n":2}')]


# A loser whose snapshot predates the winner's commit: PostgreSQL REPEATABLE READ and an
# SQLite read transaction cannot see the winning row, so the database aborts the write
# and record() says RetryTransaction. InnoDB's locking read sees the latest row instead.
SNAPSHOT_OUTCOME = {"postgresql": "retry", "sqlite": "retry", "mysql": "ok"}


def test_loser_with_an_older_snapshot_is_told_to_retry_or_gets_the_id(
    pair: tuple[Producer, Producer], rconn: Connection
) -> None:
    backend = rconn.dialect.name
    winner_id, got = loser_waits_for_winner(
        pair, rconn, backend, "snap", ({"n": 1}, {"n": 1}), "commit", loser_snapshot=True
    )
    assert got[0] == SNAPSHOT_OUTCOME[backend], got
    if got[0] == "retry":
        assert "roll the transaction back and run all of it again" in got[2]
    else:
        assert got[1] == winner_id
    assert [r["message_id"] for r in rows_for(rconn, "snap")] == [winner_id]


ROUNDS = 8


def test_producers_racing_from_a_barrier_leave_one_intent_per_key(
    db_url: str, conn: Connection, backend: str
) -> None:
    create_notes(conn)
    barrier = SPAWN.Barrier(2)
    pipes, procs = [], []
    for who in (1, 2):
        parent, child = SPAWN.Pipe()
        proc = SPAWN.Process(target=racing_child, args=(db_url, who, ROUNDS, barrier, child))
        proc.start()
        pipes.append(parent)
        procs.append(proc)
    try:
        results = [p.recv() if p.poll(120) else [] for p in pipes]
    finally:
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.terminate()
    assert all(len(r) == ROUNDS for r in results), results
    rows = {r["key_digest"]: r for r in message_rows(conn)}
    assert len(rows) == ROUNDS
    oks = 0
    for n in range(ROUNDS):
        stored = rows[key_digest(f"race:{n}")]["message_id"]
        outcomes = sorted((r[n][2], r[n][3]) for r in results)
        expected = [("ok", stored)] * 2 if n % 2 else [("conflict", stored), ("ok", stored)]
        assert outcomes == expected, (n, results)
        oks += 2 if n % 2 else 1
    assert counts(conn)["notes"] == oks  # every business write went with its intent
