"""``alembic upgrade head`` with the shipped example (ops/alembic/) makes the schema that
``outbox migrate`` makes, on every backend, and the two paths take turns."""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import pytest
from alembic.config import CommandLine, Config
from click.testing import CliRunner
from sqlalchemy import create_engine, inspect

from outbox.alembic import include_object, metadata
from outbox.cli import main
from outbox.config import settings
from outbox.db import ring
from outbox.errors import ConfigurationError
from tests.fixtures import databases as backends
from tests.fixtures.workers import ROOT


def _alembic(tmp_path: Path, db_url: str, *args: str) -> str:
    """Run the real ``alembic`` command line on a copy of ops/alembic/; its output.

    In this process: the arguments go through Alembic's own parser and ``run_cmd``, as
    its ``alembic`` script does, and ``env.py`` and the revisions are loaded from the
    copy each time; a new interpreter per command (three per test) only added its
    imports, about a second of CPU each."""
    scripts = tmp_path / "alembic"
    ini = tmp_path / "alembic.ini"
    if not scripts.exists():
        shutil.copytree(ROOT / "ops" / "alembic", scripts)
        sa_url = backends.sqlalchemy_url(db_url).replace("%", "%%")  # configparser escapes
        ini.write_text(f"[alembic]\nscript_location = {scripts}\nsqlalchemy.url = {sa_url}\n")
    cli = CommandLine(prog="alembic")
    options = cli.parser.parse_args(["-c", str(ini), *args])
    out = io.StringIO()
    config = Config(
        file_=str(ini), ini_section=options.name, cmd_opts=options, stdout=out,
        output_buffer=out,
    )
    cli.run_cmd(config, options)  # an Alembic error exits (SystemExit): the test fails
    return out.getvalue()


def _options(index: Any) -> str:
    """An index's dialect options (a partial index's WHERE) as comparable text."""
    return repr(sorted((k, str(v)) for k, v in (index.get("dialect_options") or {}).items()))


def _schema(db_url: str) -> dict[str, Any]:
    """Every outbox table as the database describes it: columns, keys, indexes."""
    engine = create_engine(backends.sqlalchemy_url(db_url))
    try:
        insp = inspect(engine)
        out: dict[str, Any] = {}
        for table in sorted(set(insp.get_table_names()) - {"alembic_version"}):
            out[table] = {
                "columns": [
                    (c["name"], str(c["type"]), c["nullable"], str(c.get("default")))
                    for c in insp.get_columns(table)
                ],
                "pk": insp.get_pk_constraint(table)["constrained_columns"],
                "unique": sorted(
                    (u["name"] or "", tuple(u["column_names"]))
                    for u in insp.get_unique_constraints(table)
                ),
                "indexes": sorted(
                    (i["name"], tuple(i["column_names"]), bool(i["unique"]), _options(i))
                    for i in insp.get_indexes(table)
                ),
            }
        return out
    finally:
        engine.dispose()


def test_alembic_upgrade_head_makes_the_schema_outbox_migrate_makes(
    db_url: str, tmp_path: Path
) -> None:
    _alembic(tmp_path, db_url, "upgrade", "head")
    by_alembic = _schema(db_url)
    on_ring = settings.queue_storage == "ring" and backends.backend_of(db_url) == "postgresql"
    assert set(by_alembic) == set(metadata.tables) | (set(ring.TABLES) if on_ring else set())
    migrated = CliRunner().invoke(main, ["--database-url", db_url, "migrate"])
    assert "up to date" in migrated.output  # the versions Alembic applied are recorded

    _alembic(tmp_path, db_url, "downgrade", "base")
    assert _schema(db_url) == {}
    assert CliRunner().invoke(main, ["--database-url", db_url, "migrate"]).exit_code == 0
    assert _schema(db_url) == by_alembic

    # A team that adopts Alembic later: the revision finds its tables already there.
    _alembic(tmp_path, db_url, "upgrade", "head")
    assert _schema(db_url) == by_alembic


def test_alembic_offline_prints_the_ddl_and_the_version_row(db_url: str, tmp_path: Path) -> None:
    out = _alembic(tmp_path, db_url, "upgrade", "head", "--sql")
    for table in metadata.tables:
        assert f"CREATE TABLE IF NOT EXISTS {table}" in out
    assert "INSERT INTO outbox_schema_version" in out and "'initial tables'" in out
    assert _schema(db_url) == {}  # offline touches nothing


def test_autogenerate_filter_leaves_our_tables_alone() -> None:
    jobs = metadata.tables["outbox_jobs"]
    assert not include_object(jobs, "outbox_jobs", "table", True, None)
    assert not include_object(next(iter(jobs.indexes)), "outbox_jobs_claim", "index", True, None)
    assert include_object(None, "notes", "table", True, None)


def test_upgrade_refuses_an_unknown_version() -> None:
    from outbox.alembic import upgrade

    for bad in (0, 99, True, "1"):
        with pytest.raises(ConfigurationError, match="schema version from 1 to"):
            upgrade(object(), to=bad)  # type: ignore[arg-type]
