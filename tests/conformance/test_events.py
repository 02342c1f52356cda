"""Event fan-out on every backend: one intent per listener in the caller's transaction;
rollback, replay, a listener added later, a failing listener, no listeners, bad input,
and the async twin."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from structlog.testing import capture_logs

from outbox import Event, Registry, emit, emit_async
from outbox.db.connection import Connection
from outbox.errors import ConfigurationError, IdempotencyConflict, InvalidJob, InvalidKey
from outbox.testing import recorded, run_pending
from tests.fixtures.databases import sqlalchemy_url
from tests.fixtures.factories import count_rows
from tests.fixtures.gaps import Gap, skip_gap

EVENT = "user.registered"


def _keys(conn: Connection) -> int:
    """Intents recorded, handed off or not (each keeps its key row until pruned)."""
    return count_rows(conn, "outbox_keys")


def _rows(conn: Connection) -> list[tuple[Any, ...]]:
    return [
        tuple(r)
        for r in conn.execute_sql("SELECT job_name, queue FROM outbox_messages ORDER BY id")
    ]


class Listeners:
    """Two listeners of EVENT (a third can be added), noting what they ran."""

    def __init__(self, *, third: bool = False) -> None:
        self.ran: list[tuple[str, Any]] = []
        self.registry = Registry()
        self.registry.listen(EVENT, self.welcome, queue="mail")
        self.registry.listen(EVENT, self.crm, name="crm.sync")
        if third:
            self.registry.listen(EVENT, self.audit)

    def welcome(self, payload: Any, ctx: Any) -> None:
        self.ran.append(("welcome", payload))

    def crm(self, payload: Any, ctx: Any) -> None:
        self.ran.append(("crm", payload))
        if payload.get("crm_down"):
            raise ConnectionError("the CRM is down")

    def audit(self, payload: Any, ctx: Any) -> None:
        self.ran.append(("audit", payload))


def test_emit_records_one_intent_per_listener_in_the_callers_transaction(
    app_conn: Any, conn: Connection
) -> None:
    app = Listeners()
    ids = emit(app_conn, "user:1:registered", Event(EVENT, {"user_id": 1}), registry=app.registry)
    assert len(ids) == len(set(ids)) == 2
    assert _rows(conn) == []  # not committed yet
    app_conn.commit()
    assert _rows(conn) == [(f"{EVENT}.welcome", "mail"), ("crm.sync", "default")]
    run_pending(app_conn, app.registry)
    assert sorted(app.ran) == [("crm", {"user_id": 1}), ("welcome", {"user_id": 1})]


def test_a_rolled_back_emit_leaves_nothing(app_conn: Any, conn: Connection) -> None:
    app = Listeners()
    emit(app_conn, "user:1:registered", Event(EVENT, {"user_id": 1}), registry=app.registry)
    app_conn.rollback()
    assert _rows(conn) == []


def test_replaying_an_emit_returns_the_same_intents_also_after_they_ran(
    app_conn: Any, conn: Connection
) -> None:
    app = Listeners()
    event = Event(EVENT, {"user_id": 1})
    first = emit(app_conn, "user:1:registered", event, registry=app.registry)
    app_conn.commit()
    assert emit(app_conn, "user:1:registered", event, registry=app.registry) == first
    run_pending(app_conn, app.registry)
    app_conn.commit()
    assert emit(app_conn, "user:1:registered", event, registry=app.registry) == first
    app_conn.commit()
    assert _keys(conn) == 2 and len(app.ran) == 2  # handed off: their keys stay
    with pytest.raises(IdempotencyConflict):
        emit(app_conn, "user:1:registered", Event(EVENT, {"user_id": 2}), registry=app.registry)
    app_conn.rollback()
    assert _keys(conn) == 2


def test_a_listener_added_later_gets_new_events_not_old_ones(
    app_conn: Any, conn: Connection
) -> None:
    before = Listeners()
    old = emit(
        app_conn, "user:1:registered", Event(EVENT, {"user_id": 1}), registry=before.registry
    )
    app_conn.commit()
    after = Listeners(third=True)  # the next deploy adds the audit listener
    replay = emit(
        app_conn, "user:1:registered", Event(EVENT, {"user_id": 1}), registry=after.registry
    )
    assert replay == old  # the old event is not re-run for anyone, the newcomer included
    new = emit(app_conn, "user:2:registered", Event(EVENT, {"user_id": 2}), registry=after.registry)
    app_conn.commit()
    assert len(new) == 3
    run_pending(app_conn, after.registry)
    assert sorted((name, p["user_id"]) for name, p in after.ran) == [
        ("audit", 2),
        ("crm", 1),
        ("crm", 2),
        ("welcome", 1),
        ("welcome", 2),
    ]


def test_a_failing_listener_never_blocks_the_others(app_conn: Any) -> None:
    app = Listeners()
    emit(app_conn, "user:1:registered", Event(EVENT, {"crm_down": True}), registry=app.registry)
    report = run_pending(app_conn, app.registry)
    assert sorted((r.job_name, r.outcome) for r in report.ran) == [
        ("crm.sync", "retry"),
        (f"{EVENT}.welcome", "done"),
    ]
    assert [r.job_name for r in recorded(app_conn)] == ["crm.sync"]  # waiting for its retry


def test_an_event_with_no_listeners_is_recorded_nowhere_and_logged_once(
    app_conn: Any, conn: Connection
) -> None:
    with capture_logs() as logs:
        ids = emit(
            app_conn,
            "order:1:shipped",
            Event("order.shipped", {"secret": "s3cr3t"}),
            registry=Listeners().registry,
        )
    app_conn.commit()
    assert ids == [] and _rows(conn) == []
    assert [e for e in logs if e["event"] == "event.no_listeners"] == [
        {
            "event": "event.no_listeners",
            "log_level": "warning",
            "name": "order.shipped",
            "hint": "nothing recorded: no listener of this event is declared in this process"
            " (import the module that declares them, or pass registry=)",
        }
    ]


@pytest.mark.parametrize(
    ("key", "event", "error", "why"),
    [
        ("", Event(EVENT, {}), InvalidKey, "key is empty"),
        ("schedule:x", Event(EVENT, {}), InvalidKey, "reserved"),
        ("k", Event("bad name", {}), InvalidJob, "event name"),
        ("k", Event(EVENT, {"n": float("inf")}), InvalidJob, "NaN or Infinity"),
        ("k", {"name": EVENT}, InvalidJob, "expected an outbox.Event"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(
    app_conn: Any, conn: Connection, key: str, event: Any, error: type[Exception], why: str
) -> None:
    app = Listeners()
    with pytest.raises(error, match=why):
        emit(app_conn, key, event, registry=app.registry)
    app_conn.commit()
    assert _rows(conn) == []


def test_without_a_registry_emit_uses_the_listeners_declared_in_this_process(
    app_conn: Any, conn: Connection
) -> None:
    registry = Registry()
    registry.listen("t.process_wide", lambda payload, ctx: None, name="t.process_wide.one")
    assert len(emit(app_conn, "k", Event("t.process_wide", 1))) == 1
    app_conn.commit()
    assert _rows(conn) == [("t.process_wide.one", "default")]


def test_listen_checks_its_settings_at_declaration() -> None:
    registry = Registry()
    with pytest.raises(ConfigurationError, match="event name"):
        registry.listen("bad event", lambda p, c: None, name="x")
    with pytest.raises(ConfigurationError, match="pass name="):
        registry.listen(EVENT, lambda p, c: None)  # "<lambda>" is no job name
    registry.listen(EVENT, lambda p, c: None, name="t.one")
    with pytest.raises(ConfigurationError, match="already registered"):
        registry.listen(EVENT, lambda p, c: None, name="t.one")
    assert len(registry.listeners.of(EVENT)) == 1


def test_emit_async_records_like_emit(
    backend: str, db_url: str, database: Any, conn: Connection
) -> None:
    if backend == "mysql":
        skip_gap(Gap.NO_ASYNC_MYSQL_DRIVER)
    from sqlalchemy.ext.asyncio import create_async_engine

    app = Listeners()

    async def go() -> tuple[list[str], list[str]]:
        engine = create_async_engine(sqlalchemy_url(db_url, is_async=True))
        try:
            async with engine.begin() as c:
                first = await emit_async(
                    c, "u:1", Event(EVENT, {"user_id": 1}), registry=app.registry
                )
            async with engine.begin() as c:
                again = await emit_async(
                    c, "u:1", Event(EVENT, {"user_id": 1}), registry=app.registry
                )
        finally:
            await engine.dispose()
        return first, again

    first, again = asyncio.run(go())
    assert first == again and len(first) == 2
    assert len(_rows(conn)) == 2
