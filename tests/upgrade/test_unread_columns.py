"""Migration "drop unread columns" (issue 41, item 7), on every backend: a database at the
version before it, holding a workflow half run and an ordered key with a job waiting its
turn (rows as the code of that version wrote them, with the columns that go), is
migrated; the columns are gone, and the workflow and the key finish under this code as
they would have: each node after its dependency, the key's jobs in order."""

from __future__ import annotations

import threading
from typing import Any

from outbox import Registry
from outbox.db.connection import Connection, Database
from outbox.db.migrate import LATEST, applied_versions, apply_locked, migrate, version_of
from outbox.ids import new_message_id, new_node_id
from outbox.job import BLOCKED_OFFSET_MS
from outbox.queue import JobContext, Worker, WorkerConfig
from outbox.workflows import get
from tests.fixtures.records import db_now_ms

STEP = version_of("drop unread columns")
GONE = {
    "outbox_workflow_nodes": {"deps_total"},
    "outbox_workflows": {"key_digest", "fingerprint"},
    "outbox_ordering_keys": {"created_at"},
}
KEY = "a" * 64

registry = Registry()
_lock = threading.Lock()
RAN: list[str] = []


@registry.job("upgrade.step")
def step(payload: Any, ctx: JobContext) -> None:
    with _lock:
        RAN.append(str(payload["n"]))


def at_version_before(db_url: str) -> Connection:
    conn = Database(db_url).connect()
    if conn.dialect.transactional_ddl:
        conn.transact(lambda c: apply_locked(c, STEP - 1), operation="migrate")
    else:
        apply_locked(conn, STEP - 1)
    assert max(applied_versions(conn)) == STEP - 1
    return conn


_COLUMNS = {
    "sqlite": "SELECT name FROM pragma_table_info('{t}')",
    "postgresql": "SELECT column_name FROM information_schema.columns"
                  " WHERE table_schema = current_schema() AND table_name = '{t}'",
    "mysql": "SELECT column_name FROM information_schema.columns"
             " WHERE table_schema = database() AND table_name = '{t}'",
}


def columns(conn: Connection) -> dict[str, set[str]]:
    sql = _COLUMNS[conn.dialect.name]
    return {t: {str(r[0]) for r in conn.execute_sql(sql.format(t=t))} for t in GONE}


def _job(conn: Connection, message_id: str, n: str, available_at: int, key: str | None,
         now: int) -> None:
    digest = "NULL" if key is None else f"'{key}'"
    conn.execute_sql(
        "INSERT INTO outbox_jobs (message_id, queue, job_name, payload, attempts,"
        " max_attempts, available_at, created_at, priority, ordering_key) VALUES"
        f" ('{message_id}', 'default', 'upgrade.step', '{{\"n\": \"{n}\"}}', 0, 3,"
        f" {available_at}, {now}, 0, {digest})"
    )


def written_before(conn: Connection) -> str:
    """What the code of the version before wrote: a chain a -> b -> c whose root is a
    queued job, and a key with one job in its turn and one waiting; the workflow's id."""
    now = db_now_ms(conn)
    wf, a, b, c = new_message_id(), new_node_id(), new_node_id(), new_node_id()
    with conn.transaction():
        conn.execute_sql(
            "INSERT INTO outbox_workflows (workflow_id, name, key_digest, fingerprint, state,"
            f" node_count, created_at) VALUES ('{wf}', 'chain', '{'b' * 64}', '{'f' * 64}',"
            f" 'running', 3, {now})"
        )
        for node, name, deps, state in ((a, "a", 0, "due"), (b, "b", 1, "waiting"),
                                        (c, "c", 1, "waiting")):
            due = now if state == "due" else "NULL"
            conn.execute_sql(
                "INSERT INTO outbox_workflow_nodes (node_id, workflow_id, name, job_name,"
                " queue, payload, max_attempts, priority, on_failure, deps_total, deps_left,"
                f" state, created_at, due_at) VALUES ('{node}', '{wf}', '{name}',"
                f" 'upgrade.step', 'default', '{{\"n\": \"{name}\"}}', 3, 0, 'stop', {deps},"
                f" {deps}, '{state}', {now}, {due})"
            )
        for parent, child in ((a, b), (b, c)):
            conn.execute_sql(
                "INSERT INTO outbox_workflow_edges (parent_id, child_id, workflow_id)"
                f" VALUES ('{parent}', '{child}', '{wf}')"
            )
        _job(conn, a, "a", now, None, now)
        conn.execute_sql(
            f"INSERT INTO outbox_ordering_keys (key_digest, created_at) VALUES ('{KEY}', {now})"
        )
        _job(conn, new_message_id(), "k1", now, KEY, now)
        _job(conn, new_message_id(), "k2", now + BLOCKED_OFFSET_MS, KEY, now)
    return wf


def test_the_step_drops_the_unread_columns_and_what_was_running_finishes(
    db_url: str,
) -> None:
    RAN.clear()
    conn = at_version_before(db_url)
    try:
        wf = written_before(conn)
        before = columns(conn)
        assert all(GONE[t] <= before[t] for t in GONE), before
        assert migrate(conn) == list(range(STEP, LATEST + 1))
        after = columns(conn)
        assert all(after[t] == before[t] - GONE[t] for t in GONE), after
    finally:
        conn.close()
    database = Database(db_url)
    config = WorkerConfig(stop_when_empty=True, sleep=0.02, concurrency=4)
    with Worker(database, registry, config) as w:
        w.run()
    assert [n for n in RAN if n in "abc"] == ["a", "b", "c"]
    assert [n for n in RAN if n.startswith("k")] == ["k1", "k2"]
    shown = get(database, wf)
    assert shown is not None and shown.state == "succeeded"
    with database.connect() as c:
        assert int(c.execute_sql("SELECT count(*) FROM outbox_ordering_keys")[0][0]) == 0
