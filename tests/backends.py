"""Throwaway databases for tests, on each backend, and connections to them.

Every test that asks for ``db_url`` gets an empty database of its own: a new SQLite
file, a new PostgreSQL schema (reached through ``search_path``) inside one database
per test run, or a new MariaDB database. Subprocesses get the same URL, so real
processes race on the same rows.

Servers: ``OUTBOX_TEST_PG_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``)
and ``OUTBOX_TEST_MYSQL_URL`` (default ``mysql://root@127.0.0.1:3306``).
``OUTBOX_TEST_BACKENDS`` (default ``sqlite,postgresql,mysql``) picks backends.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pymysql
from sqlalchemy.engine import make_url

PG_ADMIN_URL = os.environ.get("OUTBOX_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
MYSQL_ADMIN_URL = os.environ.get("OUTBOX_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306")
BACKENDS = [
    b.strip()
    for b in os.environ.get("OUTBOX_TEST_BACKENDS", "sqlite,postgresql,mysql").split(",")
    if b.strip()
]
RUN_ID = secrets.token_hex(4)


def _pg_admin() -> psycopg.Connection[Any]:
    u = make_url(PG_ADMIN_URL)
    return psycopg.connect(
        host=u.host,
        port=u.port,
        user=u.username,
        password=u.password,
        dbname=u.database,
        autocommit=True,
    )


def _mysql_admin() -> Any:
    u = make_url(MYSQL_ADMIN_URL)
    return pymysql.connect(
        host=u.host or "127.0.0.1",
        port=u.port or 3306,
        user=u.username or "root",
        password=u.password or "",
        autocommit=True,
    )


class PgRun:
    """One PostgreSQL database for the whole test run; a schema per test inside it."""

    def __init__(self) -> None:
        self.dbname = f"outbox_test_{RUN_ID}"
        with _pg_admin() as c:
            c.execute(f'CREATE DATABASE "{self.dbname}"')
        self._n = 0

    def _base(self) -> Any:
        return make_url(PG_ADMIN_URL).set(database=self.dbname)

    def new_url(self) -> str:
        self._n += 1
        schema = f"t{self._n}_{secrets.token_hex(3)}"
        with psycopg.connect(self._conninfo(), autocommit=True) as c:
            c.execute(f'CREATE SCHEMA "{schema}"')
        base = self._base().render_as_string(hide_password=False)
        return f"{base}?options={quote(f'-csearch_path={schema}')}"

    def _conninfo(self) -> str:
        u = self._base()
        parts = [f"host={u.host}", f"port={u.port or 5432}", f"dbname={u.database}"]
        if u.username:
            parts.append(f"user={u.username}")
        if u.password:
            parts.append(f"password={u.password}")
        return " ".join(parts)

    def drop_url(self, url: str) -> None:
        schema = make_url(url).query["options"].split("=", 1)[1]  # type: ignore[union-attr]
        with psycopg.connect(self._conninfo(), autocommit=True) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    def close(self) -> None:
        with _pg_admin() as c:
            c.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')


class MysqlRun:
    """A MariaDB database per test, named after the run."""

    def __init__(self) -> None:
        self._n = 0
        self._made: list[str] = []

    def new_url(self) -> str:
        self._n += 1
        name = f"outbox_test_{RUN_ID}_{self._n}"
        with _mysql_admin() as c, c.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        self._made.append(name)
        return make_url(MYSQL_ADMIN_URL).set(database=name).render_as_string(hide_password=False)

    def drop_url(self, url: str) -> None:
        name = make_url(url).database
        with _mysql_admin() as c, c.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")

    def close(self) -> None:
        pass


def sqlite_url(tmp: Path) -> str:
    return f"sqlite:///{tmp / 'outbox.db'}"


def backend_of(url: str) -> str:
    scheme = url.split(":", 1)[0].split("+", 1)[0]
    return {"postgres": "postgresql", "mariadb": "mysql"}.get(scheme, scheme)


def raw_connect(url: str) -> Any:
    """A plain DB-API connection as an application would open it (transactions implicit)."""
    u = make_url(url)
    kind = backend_of(url)
    if kind == "sqlite":
        return sqlite3.connect(u.database or ":memory:", timeout=30)
    if kind == "postgresql":
        extra: dict[str, Any] = {k: str(v) for k, v in u.query.items()}
        return psycopg.connect(
            host=u.host,
            port=u.port,
            user=u.username,
            password=u.password,
            dbname=u.database,
            **extra,
        )
    return pymysql.connect(
        host=u.host or "127.0.0.1",
        port=u.port or 3306,
        user=u.username or "root",
        password=u.password or "",
        database=u.database,
        charset="utf8mb4",
    )


def sqlalchemy_url(url: str, *, is_async: bool = False) -> str:
    """The same database as a SQLAlchemy URL with an explicit driver."""
    kind = backend_of(url)
    driver = {
        ("sqlite", False): "sqlite",
        ("sqlite", True): "sqlite+aiosqlite",
        ("postgresql", False): "postgresql+psycopg",
        ("postgresql", True): "postgresql+psycopg_async",
        ("mysql", False): "mysql+pymysql",
    }[(kind, is_async)]
    return make_url(url).set(drivername=driver).render_as_string(hide_password=False)
