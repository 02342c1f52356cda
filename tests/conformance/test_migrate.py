"""Migrations: idempotent, safe from two processes at once, and the printed DDL a DBA
applies by hand gives exactly the schema ``migrate`` gives."""

from __future__ import annotations

import multiprocessing
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy.engine import make_url

from outbox.cli import main
from outbox.db import migrate as migrations
from outbox.db.connection import Connection, Database
from outbox.db.migrate import LATEST, MIGRATIONS, applied_versions, migrate
from outbox.errors import DatabaseError
from tests.fixtures import databases as backends
from tests.fixtures.gaps import Gap, skip_unless
from tests.fixtures.records import db_now_ms, migrate_child

SPAWN = multiprocessing.get_context("spawn")
OUTBOX_TABLES = {
    "outbox_keys",
    "outbox_messages",
    "outbox_jobs",
    "outbox_failed_jobs",
    "outbox_schema_version",
    "outbox_throughput",
}
ALL = list(range(1, LATEST + 1))
NEXT = LATEST + 1


@pytest.fixture
def fresh(db_url: str) -> Iterator[Connection]:
    """Our connection to the test's empty, never migrated database."""
    with Database(db_url).connect() as c:
        yield c


@pytest.fixture
def other_url(backend: str, _servers: dict[str, Any], tmp_path: Path) -> Iterator[str]:
    """A second empty database on the same backend, for the hand-applied script."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'by_hand.db'}"
        return
    url = _servers[backend].new_url()
    yield url
    _servers[backend].drop_url(url)


def version_rows(conn: Connection) -> list[tuple[Any, ...]]:
    return conn.execute_sql("SELECT version, description, applied_at FROM outbox_schema_version")


def test_migrate_creates_every_table_then_applies_nothing_the_second_time(
    fresh: Connection,
) -> None:
    assert applied_versions(fresh) == []
    before = db_now_ms(fresh)
    assert migrate(fresh) == ALL
    after = db_now_ms(fresh)
    assert migrate(fresh) == []
    assert migrate(fresh) == []
    assert set(schema_of(fresh)["tables"]) >= OUTBOX_TABLES
    rows = version_rows(fresh)
    assert [(v, d) for v, d, _ in rows] == [(m.version, m.description) for m in MIGRATIONS]
    assert all(before <= applied_at <= after for _, _, applied_at in rows)


def test_sqlite_database_is_in_wal_mode(fresh: Connection, backend: str) -> None:
    skip_unless(backend, "sqlite", gap=Gap.SQLITE_JOURNAL)
    migrate(fresh)
    assert fresh.execute_sql("PRAGMA journal_mode")[0][0] == "wal"


def test_two_processes_migrating_at_once_both_succeed_with_one_schema(
    db_url: str, fresh: Connection
) -> None:
    barrier = SPAWN.Barrier(3)
    pipes, procs = [], []
    for _ in range(3):
        parent, child = SPAWN.Pipe()
        proc = SPAWN.Process(target=migrate_child, args=(db_url, barrier, child))
        proc.start()
        pipes.append(parent)
        procs.append(proc)
    try:
        results = [p.recv() if p.poll(120) else ("no answer",) for p in pipes]
    finally:
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.terminate()
    assert sorted(results) == [("ok", []), ("ok", []), ("ok", ALL)], results
    assert [row[0] for row in version_rows(fresh)] == ALL
    assert set(schema_of(fresh)["tables"]) >= OUTBOX_TABLES


def test_printed_sql_applied_by_hand_gives_the_same_schema_as_migrate(
    db_url: str, other_url: str, backend: str
) -> None:
    result = CliRunner().invoke(main, ["migrate", "--sql", "--dialect", backend])
    assert result.exit_code == 0, result.output
    script = result.output
    assert script.startswith(f"-- outbox schema, version {LATEST}, for {backend}")
    apply_by_hand(other_url, script)
    with Database(db_url).connect() as c:
        before = db_now_ms(c)
        migrate(c)
        expected = schema_of(c)
    with Database(other_url).connect() as c:
        assert schema_of(c) == expected
        rows = version_rows(c)
        assert [v for v, _, _ in rows] == ALL
        assert all(applied_at >= before - 60_000 for _, _, applied_at in rows)
        assert migrate(c) == []  # the version row came with the DDL


def test_sql_without_a_dialect_prints_the_database_urls(db_url: str, backend: str) -> None:
    result = CliRunner().invoke(main, ["--database-url", db_url, "migrate", "--sql"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"-- outbox schema, version {LATEST}, for {backend}")


def test_migrate_command_says_what_it_did(db_url: str) -> None:
    runner = CliRunner()
    first = runner.invoke(main, ["--database-url", db_url, "migrate"])
    assert first.exit_code == 0, first.output
    assert f"to version {LATEST} (applied {ALL})" in first.output
    second = runner.invoke(main, ["--database-url", db_url, "migrate"])
    assert second.exit_code == 0
    assert f"is up to date (version {LATEST})" in second.output


def test_dialect_without_sql_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["migrate", "--dialect", "sqlite"])
    assert result.exit_code == 2
    assert "--dialect goes with --sql" in result.output


def test_unknown_dialect_is_a_usage_error_listing_the_choices() -> None:
    result = CliRunner().invoke(main, ["migrate", "--sql", "--dialect", "oracle"])
    assert result.exit_code == 2
    assert "mysql" in result.output and "postgresql" in result.output


def test_a_failing_migration_leaves_no_half_migrated_database(
    fresh: Connection, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(_: object) -> list[str]:
        return ["CREATE TABLE IF NOT EXISTS outbox_extra (id INTEGER)", "CREATE TABLE broken ("]

    monkeypatch.setattr(
        migrations, "MIGRATIONS", (*MIGRATIONS, migrations.Migration(NEXT, "broken", broken))
    )
    with pytest.raises(DatabaseError, match=r"^migrate failed: \w+Error"):
        migrate(fresh)
    tables = set(schema_of(fresh)["tables"])
    if fresh.dialect.transactional_ddl:
        assert tables == set()  # migration 1 and 2 ran in one transaction: all undone
    else:
        # MariaDB commits each DDL statement; the version row is written last, so
        # the next run completes the migration instead of trusting it.
        assert [row[0] for row in version_rows(fresh)] == ALL
        assert "outbox_extra" in tables

    def fixed(_: object) -> list[str]:
        return ["CREATE TABLE IF NOT EXISTS outbox_extra (id INTEGER)"]

    monkeypatch.setattr(
        migrations, "MIGRATIONS", (*MIGRATIONS, migrations.Migration(NEXT, "fixed", fixed))
    )
    assert migrate(fresh) == ([NEXT] if backend == "mysql" else [*ALL, NEXT])
    assert [row[0] for row in version_rows(fresh)] == [*ALL, NEXT]


def apply_by_hand(url: str, script: str) -> None:
    """Run the script as a DBA would, through the plain driver, outside outbox."""
    conn = backends.raw_connect(url)
    try:
        if isinstance(conn, sqlite3.Connection):
            conn.executescript(script)
        elif backends.backend_of(url) == "postgresql":
            conn.autocommit = True
            conn.execute(script)  # the script holds its own BEGIN/COMMIT
        else:  # the MariaDB client, which reads the script's DELIMITER lines
            u = make_url(url)
            subprocess.run(
                [
                    "mariadb",
                    "-h",
                    u.host or "127.0.0.1",
                    "-P",
                    str(u.port or 3306),
                    "-u",
                    u.username or "root",
                    f"--password={u.password or ''}",
                    u.database or "",
                ],
                input=script,
                text=True,
                check=True,
                capture_output=True,
            )
    finally:
        conn.close()


SCHEMA_SQL = {
    "sqlite": {
        "tables": "SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name",
        "indexes": "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index'"
        " ORDER BY name",
        "triggers": "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name",
    },
    "postgresql": {
        "tables": "SELECT table_name, column_name, ordinal_position, data_type,"
        " character_maximum_length, is_nullable, column_default, is_identity,"
        " identity_generation FROM information_schema.columns"
        " WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position",
        "indexes": "SELECT tablename, indexname,"
        " replace(indexdef, current_schema() || '.', '') FROM pg_indexes"
        " WHERE schemaname = current_schema() ORDER BY indexname",
        "triggers": "SELECT trigger_name, event_manipulation, action_timing, action_condition,"
        " action_statement FROM information_schema.triggers"
        " WHERE trigger_schema = current_schema() ORDER BY trigger_name",
    },
    "mysql": {
        "tables": "SELECT c.table_name, c.column_name, c.ordinal_position, c.column_type,"
        " c.is_nullable, c.column_default, c.extra, c.collation_name, t.engine,"
        " t.table_collation FROM information_schema.columns c JOIN information_schema.tables t"
        " ON t.table_schema = c.table_schema AND t.table_name = c.table_name"
        " WHERE c.table_schema = DATABASE() ORDER BY c.table_name, c.ordinal_position",
        "indexes": "SELECT table_name, index_name, seq_in_index, column_name, non_unique"
        " FROM information_schema.statistics WHERE table_schema = DATABASE()"
        " ORDER BY table_name, index_name, seq_in_index",
        "triggers": "SELECT trigger_name, event_manipulation, action_timing, action_statement"
        " FROM information_schema.triggers WHERE trigger_schema = DATABASE()"
        " ORDER BY trigger_name",
    },
}


def schema_of(conn: Connection) -> dict[str, Any]:
    """Tables (with their columns) and indexes, as the database describes them."""
    queries = SCHEMA_SQL[conn.dialect.name]
    tables: dict[str, list[tuple[Any, ...]]] = {}
    for row in conn.execute_sql(queries["tables"]):
        tables.setdefault(str(row[0]), []).append(tuple(row[1:]))
    return {
        "tables": tables,
        "indexes": conn.execute_sql(queries["indexes"]),
        "triggers": conn.execute_sql(queries["triggers"]),
    }
