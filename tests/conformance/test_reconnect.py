"""Workers and relays whose connections the server ends, on PostgreSQL and MariaDB.

A failover or an operator (``pg_terminate_backend``, ``KILL``) ends a service's session:
the service reconnects at once, without its back-off pause, and carries on. Only when
the reconnect itself fails does it back off (``outbox.db.reconnect``). What each test
checks is what the service did (its log events say the pause it chose), never how long
anything took.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from outbox import Job, Registry, record
from outbox.db.connection import Connection, Database
from outbox.queue import Worker, WorkerConfig, push
from outbox.relay import Relay, RelayConfig
from tests.fixtures.gaps import Gap, skip_gap
from tests.fixtures.processes import wait_until
from tests.fixtures.relays import captured_logs, queued_ids

Events = list[MutableMapping[str, Any]]


class Server:
    """The server's side of the services' sessions: end them, refuse new ones, admit
    again. The services log in as a user of their own, so that refusing it refuses them
    and no one else (the test's own sessions, other tests' databases)."""

    def __init__(self, db_url: str, admin: Connection) -> None:
        self.admin = admin
        self.kind = admin.dialect.name
        self.user = f"oc_{secrets.token_hex(5)}"
        u = make_url(db_url)
        if self.kind == "postgresql":
            schema = admin.execute_sql("SELECT current_schema()")[0][0]
            admin.execute_sql(f'CREATE ROLE "{self.user}" LOGIN')
            admin.execute_sql(f'GRANT USAGE ON SCHEMA "{schema}" TO "{self.user}"')
            for what in ("TABLES", "SEQUENCES"):
                admin.execute_sql(f'GRANT ALL ON ALL {what} IN SCHEMA "{schema}" TO "{self.user}"')
        else:
            for host in self._hosts():
                admin.execute_sql(f"CREATE USER '{self.user}'@'{host}'")
                admin.execute_sql(f"GRANT ALL ON `{u.database}`.* TO '{self.user}'@'{host}'")
        self.url = u.set(username=self.user).render_as_string(hide_password=False)

    @staticmethod
    def _hosts() -> tuple[str, ...]:
        return ("%", "localhost", "127.0.0.1")

    def end_sessions(self) -> int:
        """End every session the services hold, as a failover or an operator would."""
        if self.kind == "postgresql":
            rows = self.admin.execute_sql(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (self.user,),
            )
            return len(rows)
        ids = self.admin.execute_sql(
            "SELECT id FROM information_schema.processlist WHERE user = %s", (self.user,)
        )
        for (session,) in ids:
            self.admin.execute_sql(f"KILL {int(session)}")
        return len(ids)

    def refuse(self, refused: bool) -> None:
        """Refuse (or admit again) new connections of the services."""
        if self.kind == "postgresql":
            login = "NOLOGIN" if refused else "LOGIN"
            self.admin.execute_sql(f'ALTER ROLE "{self.user}" {login}')
            return
        lock = "LOCK" if refused else "UNLOCK"
        for host in self._hosts():
            self.admin.execute_sql(f"ALTER USER '{self.user}'@'{host}' ACCOUNT {lock}")

    def close(self) -> None:
        self.refuse(False)
        self.end_sessions()
        if self.kind == "postgresql":
            self.admin.execute_sql(f'DROP OWNED BY "{self.user}"')
            self.admin.execute_sql(f'DROP ROLE IF EXISTS "{self.user}"')
            return
        for host in self._hosts():
            self.admin.execute_sql(f"DROP USER IF EXISTS '{self.user}'@'{host}'")


@pytest.fixture
def server(database: Database, db_url: str, conn: Connection) -> Iterator[Server]:
    if database.dialect.name == "sqlite":
        skip_gap(Gap.SQLITE_FILE)
    s = Server(db_url, conn)
    try:
        yield s
    finally:
        s.close()


def _events(logs: Events, name: str) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == name]


def _push(app_conn: Any, name: str) -> None:
    push(app_conn, Job(name, {}))
    app_conn.commit()


@contextmanager
def _running_worker(
    server: Server, sleep: float
) -> Iterator[tuple[Worker, dict[str, threading.Event], Events]]:
    """A worker on the services' login, in a thread, with its log events; yields once
    it is idle (and, where there is LISTEN, listening). Its handlers set events."""
    registry = Registry()
    ran = {name: threading.Event() for name in ("r.before", "r.after")}
    for name, event in ran.items():
        registry.job(name)(lambda payload, ctx, e=event: e.set())
    worker = Worker(Database(server.url), registry, WorkerConfig(sleep=sleep, lease=600))
    with captured_logs() as logs:
        thread = threading.Thread(target=worker.run)
        thread.start()
        try:
            assert worker.idle.wait(30)
            if worker.listener is not None:
                assert worker.listener.ready.wait(30)
            yield worker, ran, logs
        finally:
            worker.stop()
            thread.join(30)
    assert not thread.is_alive()


def _poll(kind: str) -> float:
    """The worker's idle poll: PostgreSQL's worker is woken by NOTIFY only (a poll of
    300 s never comes within a test), MariaDB's polls often since it has no NOTIFY."""
    return 300.0 if kind == "postgresql" else 0.1


def test_worker_whose_sessions_the_server_ends_reconnects_at_once_and_runs_jobs(
    server: Server, app_conn: Any
) -> None:
    with _running_worker(server, _poll(server.kind)) as (worker, ran, logs):
        _push(app_conn, "r.before")
        assert ran["r.before"].wait(60)
        # Idle, with the first job's acknowledgement committed (a worker may hold an ack
        # back briefly for the next claim; ending the session then would lose that ack,
        # and the job would run again after its lease, not within this test).
        wait_until(
            lambda: worker.idle.is_set() and worker.stats.succeeded == 1,
            what="the worker to go idle with its job acknowledged",
        )
        assert server.end_sessions() >= 1
        _push(app_conn, "r.after")
        # PostgreSQL: no poll comes; the listener's reconnect wakes the worker, whose
        # claim then finds its own session gone and must claim again on a new one.
        assert ran["r.after"].wait(60), "the job waited for a poll after the reconnect"
        wait_until(lambda: _events(logs, "worker.database_error"), what="the lost session")
    errors = _events(logs, "worker.database_error")
    assert errors and all(e["retry_in_s"] == 0 for e in errors), errors
    lost_listens = _events(logs, "worker.listen_lost")
    assert all(e["retry_in_s"] == 0 for e in lost_listens), lost_listens
    if server.kind == "postgresql":
        assert lost_listens
    assert worker.stats.succeeded == 2 and worker.stats.lost == 0


def test_worker_backs_off_when_its_reconnect_fails_then_carries_on(
    server: Server, app_conn: Any
) -> None:
    with _running_worker(server, 0.2) as (worker, ran, logs):
        server.refuse(True)
        assert server.end_sessions() >= 1
        wait_until(
            lambda: any(e["retry_in_s"] > 0 for e in _events(logs, "worker.database_error")),
            what="a failed reconnect",
        )
        server.refuse(False)
        _push(app_conn, "r.after")
        assert ran["r.after"].wait(60)
    errors = _events(logs, "worker.database_error")
    # The lost session is retried at once; the reconnect that the server refuses, paused on.
    assert errors[0]["retry_in_s"] == 0
    assert all(e["retry_in_s"] == pytest.approx(0.2) for e in errors[1:]), errors
    assert worker.stats.succeeded == 1


@contextmanager
def _watching_relay(server: Server) -> Iterator[tuple[Relay, Events]]:
    relay = Relay(Database(server.url), RelayConfig(poll_interval=0.05, max_poll_interval=0.2))
    stop = threading.Event()
    with captured_logs() as logs:
        thread = threading.Thread(target=relay.watch, args=(stop,))
        thread.start()
        try:
            wait_until(lambda: _events(logs, "relay.watch"), what="the relay to start")
            yield relay, logs
        finally:
            stop.set()
            thread.join(30)
            relay.close()
    assert not thread.is_alive()


def _record(app_conn: Any, key: str) -> str:
    message_id = record(app_conn, key, Job("r.relayed", {}))
    app_conn.commit()
    return message_id


def test_relay_whose_sessions_the_server_ends_reconnects_at_once(
    server: Server, app_conn: Any, conn: Connection
) -> None:
    with _watching_relay(server) as (_, logs):
        first = _record(app_conn, "k1")
        wait_until(lambda: queued_ids(conn) == [first], what="the first handoff")
        assert server.end_sessions() >= 1
        second = _record(app_conn, "k2")
        wait_until(lambda: queued_ids(conn) == sorted([first, second]), what="the second")
        wait_until(lambda: _events(logs, "relay.batch_failed"), what="the lost session")
    failed = _events(logs, "relay.batch_failed")
    assert all(e["retry_in_s"] == 0 for e in failed), failed
    lost_listens = _events(logs, "relay.listen_lost")
    assert all(e["retry_in_s"] == 0 for e in lost_listens), lost_listens


def test_relay_backs_off_when_its_reconnect_fails_then_carries_on(
    server: Server, app_conn: Any, conn: Connection
) -> None:
    with _watching_relay(server) as (_, logs):
        wait_until(lambda: _events(logs, "relay.batch"), what="a first batch")
        server.refuse(True)
        assert server.end_sessions() >= 1
        wait_until(
            lambda: any(e["retry_in_s"] > 0 for e in _events(logs, "relay.batch_failed")),
            what="a failed reconnect",
        )
        server.refuse(False)
        message_id = _record(app_conn, "k3")
        wait_until(lambda: queued_ids(conn) == [message_id], what="the handoff")
    failed = _events(logs, "relay.batch_failed")
    assert failed[0]["retry_in_s"] == 0
    pauses = [e["retry_in_s"] for e in failed[1:]]
    assert pauses and all(p > 0 for p in pauses), failed
    assert pauses == sorted(pauses)  # doubling while the server refuses
