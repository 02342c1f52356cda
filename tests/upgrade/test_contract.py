"""The contract step (migration "drop schema 1 compatibility"), on every backend: held
back, naming why, while code of schema version 1 left traces recently; applied once
those traces are gone; applied straight away on a fresh database.

A version-1 write is made as version 1 made it: an INSERT into outbox_messages without
a key row and without ``keyed`` (what the compatibility trigger completes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from click.testing import CliRunner

from outbox import Job, record
from outbox.cli import main
from outbox.db.connection import Connection, Database
from outbox.db.migrate import (
    CONTRACT,
    LATEST,
    SCHEMA_1_GUARD,
    SCHEMA_1_WINDOW_MS,
    applied_versions,
    apply_locked,
    held_back,
    migrate,
    version_of,
)
from outbox.job import key_digest
from tests.conformance.test_migrate import schema_of
from tests.fixtures.databases import raw_connect
from tests.fixtures.gaps import Gap, skip_unless
from tests.fixtures.records import counts, db_now_ms
from tests.upgrade.test_migration_2 import v1

BEFORE = version_of(CONTRACT) - 1
# The steps after the contract step that are not held back with it: applied while it waits.
NOT_HELD = [v for v in range(BEFORE + 1, LATEST + 1)
            if v not in (version_of(CONTRACT), version_of(SCHEMA_1_GUARD))]


def at_version_before_contract(db_url: str) -> Connection:
    """A database migrated up to the step before the contract step."""
    conn = Database(db_url).connect()
    if conn.dialect.transactional_ddl:
        conn.transact(lambda c: apply_locked(c, BEFORE), operation="migrate")
    else:
        apply_locked(conn, BEFORE)
    assert max(applied_versions(conn)) == BEFORE
    return conn


def v1_record(conn: Connection, key: str, message_id: str, created_at: int) -> None:
    """What version 1's record() sent: the intent alone, ``keyed`` left NULL."""
    digest = key_digest(key)
    conn.execute_sql(
        "INSERT INTO outbox_messages (message_id, key_digest, fingerprint, job_name, queue,"
        f" payload, state, created_at) VALUES ('{message_id}', '{digest}', '{'f' * 64}',"
        f" 'notes.index', 'default', '{{}}', 'pending', {created_at})"
    )


def key_rows(conn: Connection) -> list[tuple[Any, ...]]:
    return sorted(
        tuple(r) for r in conn.execute_sql("SELECT key_digest, message_id FROM outbox_keys")
    )


def test_recent_schema_1_intents_hold_the_step_back_and_say_why(db_url: str) -> None:
    conn = at_version_before_contract(db_url)
    try:
        v1_record(conn, "note:1", "m-v1-1", db_now_ms(conn))
        assert migrate(conn) == NOT_HELD
        why = held_back(conn)
        assert why is not None
        assert f"migration {version_of(CONTRACT)} ({CONTRACT})" in why
        assert "1 intent(s) written by schema-1 code in the last 24 h" in why, why
        said = CliRunner().invoke(main, ["--database-url", db_url, "migrate"])
        assert said.exit_code == 0 and why in said.output, said.output
        assert version_of(CONTRACT) not in applied_versions(conn)
        # The compatibility trigger is still there: it completes each v1 insert with
        # its key row.
        v1_record(conn, "note:2", "m-v1-2", db_now_ms(conn))
        assert key_rows(conn) == sorted(
            [(key_digest("note:1"), "m-v1-1"), (key_digest("note:2"), "m-v1-2")]
        )
    finally:
        conn.close()


def test_recent_schema_1_tombstones_hold_the_step_back_too(db_url: str) -> None:
    conn = at_version_before_contract(db_url)
    try:
        now = db_now_ms(conn)
        conn.execute_sql(
            "INSERT INTO outbox_messages (message_id, key_digest, fingerprint, job_name, queue,"
            f" state, created_at, published_at, keyed) VALUES ('m-t', '{'d' * 64}',"
            f" '{'f' * 64}', 'a.b', 'default', 'published', {now}, {now}, 1)"
        )
        assert migrate(conn) == NOT_HELD
        why = held_back(conn)
        assert why is not None and "1 tombstone(s) left by a schema-1 relay or producer" in why
    finally:
        conn.close()


def test_once_the_traces_are_old_the_step_drops_the_trigger_and_the_index(
    db_url: str, backend: str
) -> None:
    conn = at_version_before_contract(db_url)
    try:
        old = db_now_ms(conn) - SCHEMA_1_WINDOW_MS - 60_000
        v1_record(conn, "note:1", "m-v1-1", old)  # a day-old v1 intent, still pending
        highest = conn.execute_sql("SELECT max(id) FROM outbox_messages")[0][0]
        conn.execute_sql("DELETE FROM outbox_messages")  # handed off
        v1_record(conn, "note:2", "m-v1-2", old)
        assert held_back(conn) is None

        # Up to the contract step only: the step after it refuses version-1 rows on
        # MariaDB (test_schema_1_code_is_refused_by_the_newest_schema).
        contract = version_of(CONTRACT)
        if conn.dialect.transactional_ddl:
            step = conn.transact(lambda c: apply_locked(c, contract), operation="migrate")
        else:
            step = apply_locked(conn, contract)
        assert step == [contract]
        assert held_back(conn) is None
        # The rows survived the step (SQLite rebuilds the table), ids are never reused.
        rows = conn.execute_sql("SELECT id, message_id, keyed FROM outbox_messages")
        assert [(r[1], r[2]) for r in rows] == [("m-v1-2", None)]
        assert rows[0][0] > highest

        # No trigger: an insert without a key row stays as it is, and writes no key row.
        before = key_rows(conn)
        v1_record(conn, "note:3", "m-v1-3", db_now_ms(conn))
        assert key_rows(conn) == before
        # No unique index on key_digest: the key row alone guards a key.
        v1_record(conn, "note:3", "m-v1-4", db_now_ms(conn))
        assert counts(conn, ("outbox_messages",))["outbox_messages"] == 3
        conn.execute_sql("DELETE FROM outbox_messages WHERE message_id IN ('m-v1-3', 'm-v1-4')")

        app = raw_connect(db_url)
        try:
            job = Job("notes.index", {"note_id": 5})
            first = record(app, "note:5", job)
            assert record(app, "note:5", job) == first
            app.commit()
            new_id = conn.execute_sql(
                f"SELECT id FROM outbox_messages WHERE message_id = '{first}'"
            )[0][0]
            assert new_id > rows[0][0]
        finally:
            app.close()
        assert counts(conn, ("outbox_messages",))["outbox_messages"] == 2
        said = CliRunner().invoke(main, ["--database-url", db_url, "migrate"]).output
        assert f"to version {LATEST}" in said and "held back" not in said, said
        # The version-1 row kept from before the step survived the rest of them too.
        left = conn.execute_sql("SELECT message_id FROM outbox_messages ORDER BY id")
        assert [r[0] for r in left] == ["m-v1-2", first]
    finally:
        conn.close()


def test_a_fresh_database_gets_the_step_at_once(database: Database) -> None:
    with database.connect() as conn:
        assert version_of(CONTRACT) in applied_versions(conn)
        assert held_back(conn) is None


def test_the_printed_ddl_marks_the_contract_step(backend: str) -> None:
    from outbox.db.dialect import dialect_named
    from outbox.db.migrate import render_sql

    script = render_sql(dialect_named(backend))
    step = script.index(f"-- migration {version_of(CONTRACT)}: {CONTRACT}")
    assert script.index("-- The contract step: on a database code of schema version 1") > step
    assert "outbox_v1_record" in script[step:]


# The tables the steps from the contract step on alter (an ALTER needs their owner).
# outbox_jobs too: at the latest version ``migrate`` builds the ring (the default on
# PostgreSQL), which replaces the table, as its owner.
OWNED = ("outbox_messages", "outbox_schema_version", "outbox_keys", "outbox_workflows",
         "outbox_workflow_nodes", "outbox_ordering_keys", "outbox_jobs")


def test_a_migrator_owning_the_tables_but_not_the_function_applies_the_step(
    db_url: str, backend: str
) -> None:
    """As ops/sql/postgresql-grants.sql sets it up: the migrator role owns the tables;
    the trigger's function belongs to whoever ran migration 2."""
    skip_unless(backend, "postgresql", gap=Gap.PSYCOPG_CONNECTION)
    conn = at_version_before_contract(db_url)
    role = f"contract_migrator_{abs(hash(db_url)) % 10**8}"
    try:
        conn.execute_sql(f"CREATE ROLE {role}")
        schema = conn.execute_sql("SELECT current_schema()")[0][0]
        conn.execute_sql(f"GRANT USAGE, CREATE ON SCHEMA {schema} TO {role}")
        for table in OWNED:
            conn.execute_sql(f"ALTER TABLE {table} OWNER TO {role}")
        conn.execute_sql(f"SET ROLE {role}")
        assert migrate(conn) == list(range(version_of(CONTRACT), LATEST + 1))
        conn.execute_sql("RESET ROLE")
        triggers = conn.execute_sql(
            "SELECT count(*) FROM pg_trigger WHERE tgname = 'outbox_v1_record'"
        )
        assert triggers[0][0] == 0
    finally:
        conn.execute_sql("RESET ROLE")
        for table in OWNED:
            conn.execute_sql(f"ALTER TABLE {table} OWNER TO CURRENT_USER")
        conn.execute_sql(f"DROP OWNED BY {role}")
        conn.execute_sql(f"DROP ROLE IF EXISTS {role}")
        conn.close()


def test_this_release_runs_while_the_step_is_held_back(db_url: str) -> None:
    """The contract step only removes: relays and workers start, and /readyz is ready,
    on a database where it is held back."""
    from outbox.cli import preflight
    from outbox.metrics import Exporter

    conn = at_version_before_contract(db_url)
    try:
        v1_record(conn, "note:1", "m-v1-1", db_now_ms(conn))
        assert migrate(conn) == NOT_HELD and held_back(conn) is not None
        preflight.check_schema(conn, Database(db_url))  # raises when the schema is too old
    finally:
        conn.close()
    exporter = Exporter(Database(db_url), "worker", queues=["q"])
    try:
        assert exporter.ready() == (True, f"ok: schema version {max(NOT_HELD, default=BEFORE)}")
    finally:
        exporter.stop()


def test_schema_1_code_is_refused_by_the_newest_schema(
    v1_package: Path, db_url: str, backend: str
) -> None:
    """Version 1's own record(), run by mistake against a contracted database: the same
    key three times, the third with another job. Each call fails (it raises; on MariaDB
    the CHECK of migration "refuse schema 1 writers", elsewhere the ON CONFLICT that
    names the dropped index) and writes nothing. Before that migration MariaDB gave two
    intents for the key and no error."""
    with Database(db_url).connect() as conn:
        migrate(conn)
        assert max(applied_versions(conn)) == LATEST
    calls = v1(v1_package, db_url, "record-same", "user:42")["calls"]
    assert len(calls) == 3
    assert not any(len(c) == 36 for c in calls), calls  # no call got a message id
    with Database(db_url).connect() as conn:
        assert counts(conn, ("outbox_messages", "outbox_keys")) == {
            "outbox_messages": 0,
            "outbox_keys": 0,
        }
        app = raw_connect(db_url)  # this release still records the key, once
        try:
            first = record(app, "user:42", Job("upgrade.echo", {"key": "user:42"}))
            assert record(app, "user:42", Job("upgrade.echo", {"key": "user:42"})) == first
            app.commit()
        finally:
            app.close()
        assert counts(conn, ("outbox_messages",))["outbox_messages"] == 1


def test_held_back_steps_applied_late_give_the_schema_of_steps_in_order(
    db_url: str, other_url: str
) -> None:
    """While schema-1 code holds the contract step and its guard back, every later step is
    applied; the two follow once the traces are gone. The schema must come out as a fresh
    database's (in order). It would not if a later step changed what the contract step
    rebuilds (SQLite rebuilds outbox_messages): this test is the rule's keeper."""
    conn = at_version_before_contract(db_url)
    try:
        v1_record(conn, "note:1", "m-v1-1", db_now_ms(conn))
        later = [v for v in range(version_of(CONTRACT), LATEST + 1)]
        held = [version_of(CONTRACT), version_of(SCHEMA_1_GUARD)]
        assert migrate(conn) == [v for v in later if v not in held]
        assert held_back(conn) is not None
        conn.execute_sql("DELETE FROM outbox_messages")  # the v1 intent was handed off
        assert migrate(conn) == held
        late = schema_of(conn)
    finally:
        conn.close()
    with Database(other_url).connect() as fresh:
        migrate(fresh)
        assert schema_of(fresh) == late
