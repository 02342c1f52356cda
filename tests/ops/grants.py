"""A database with ``ops/sql/<dialect>-grants.sql`` applied as shipped, and a login per role.

``GrantedDatabase(backend)`` creates a database of its own on the test server, runs
``outbox migrate`` as the server's admin, applies the grants file with the real client
(``psql -f`` / ``mariadb <``), then creates one LOGIN user per role the way the file's
header tells an operator to. ``url(role)`` connects as that user.

The file's NOLOGIN group roles (PostgreSQL) and roles (MariaDB) are server-wide and are
left in place: another run may be using them at the same moment. Everything else this
run made (the database, its users, the privileges on its tables) is removed by ``close``.

Role changes run under one server-wide lock (``server_lock``): the file creates its roles
check-then-create, and two processes applying it at once (pytest-xdist workers, or two
test runs) would both see a role missing and one would fail; concurrent GRANTs on the
same role can also fail with "tuple concurrently updated" on PostgreSQL.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pymysql
from sqlalchemy.engine import make_url

from outbox.db.connection import Database
from outbox.db.migrate import migrate
from tests.fixtures import databases as backends

ROOT = Path(__file__).resolve().parents[2]
GRANTS = {
    "postgresql": ROOT / "ops" / "sql" / "postgresql-grants.sql",
    "mysql": ROOT / "ops" / "sql" / "mariadb-grants.sql",
}
ROLES = ("app", "relay", "worker", "operator", "migrator")
SERVER_BACKENDS = [b for b in ("postgresql", "mysql") if b in backends.BACKENDS]

# "permission denied": PostgreSQL's SQLSTATE; MariaDB's table, column and database errors.
PG_DENIED = "42501"
MYSQL_DENIED = frozenset({1142, 1143, 1044})


class GrantedDatabase:
    """One fresh database, migrated, the grants file applied, a login user per role."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        tag = f"{backends.RUN_ID}_{secrets.token_hex(3)}"
        self.name = f"outbox_grants_{tag}"
        self.users = {role: f"ob{tag}_{role}" for role in ROLES}
        self._password = secrets.token_hex(8)
        if backend == "postgresql":
            self._admin = make_url(backends.PG_ADMIN_URL)
            with _pg(self._admin) as c:
                c.execute(f'CREATE DATABASE "{self.name}"')
        else:
            self._admin = make_url(backends.MYSQL_ADMIN_URL)
            self.admin_sql(f"CREATE DATABASE `{self.name}` CHARACTER SET utf8mb4", db=None)
        with Database(self.admin_url).connect() as conn:
            migrate(conn)
        with self.server_lock():
            self.apply_grants()
            self._create_users()

    @property
    def admin_url(self) -> str:
        return self._admin.set(database=self.name).render_as_string(hide_password=False)

    def url(self, role: str) -> str:
        """The database as the LOGIN user of ``role``."""
        password = None if self.backend == "postgresql" else self._password
        return self._admin.set(
            database=self.name, username=self.users[role], password=password
        ).render_as_string(hide_password=False)

    def apply_grants(self) -> subprocess.CompletedProcess[str]:
        """Run the shipped file through the database's own command-line client."""
        u = self._admin
        if self.backend == "postgresql":
            cmd = ["psql", "-X", "-q", "-h", u.host or "127.0.0.1", "-p", str(u.port or 5432)]
            cmd += [
                "-U",
                u.username or "postgres",
                "-d",
                self.name,
                "-f",
                str(GRANTS["postgresql"]),
            ]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        else:
            cmd = ["mariadb", "-h", u.host or "127.0.0.1", "-P", str(u.port or 3306)]
            cmd += ["-u", u.username or "root", *([f"-p{u.password}"] if u.password else [])]
            with open(GRANTS["mysql"], encoding="utf-8") as f:
                done = subprocess.run(
                    [*cmd, self.name], stdin=f, capture_output=True, text=True, check=False
                )
        assert done.returncode == 0, f"{cmd[0]} failed applying the grants:\n{done.stderr}"
        assert "ERROR" not in done.stderr, done.stderr
        return done

    @contextmanager
    def server_lock(self) -> Iterator[None]:
        """Hold the server-wide lock on role changes (an advisory lock taken in the admin
        database, so that every process contends in the same one; MariaDB's GET_LOCK is
        server-wide by itself)."""
        if self.backend == "postgresql":
            with _pg(self._admin) as c:
                c.execute("SELECT pg_advisory_lock(hashtext('outbox-test-roles'))")
                try:
                    yield
                finally:
                    c.execute("SELECT pg_advisory_unlock(hashtext('outbox-test-roles'))")
            return
        with _mysql(self._admin) as c, c.cursor() as cur:
            cur.execute("SELECT GET_LOCK('outbox-test-roles', 120)")
            try:
                yield
            finally:
                cur.execute("SELECT RELEASE_LOCK('outbox-test-roles')")

    def _create_users(self) -> None:
        for role, user in self.users.items():
            if self.backend == "postgresql":
                self.admin_sql(f'CREATE ROLE "{user}" LOGIN INHERIT IN ROLE outbox_{role}')
            else:
                self.admin_sql(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{self._password}'")
                self.admin_sql(f"GRANT outbox_{role} TO '{user}'@'%'")
                self.admin_sql(f"SET DEFAULT ROLE outbox_{role} FOR '{user}'@'%'")

    def admin_sql(self, sql: str, params: Any = None, *, db: str | bool | None = True) -> list[Any]:
        """Run one statement as the server's admin, in this database unless ``db`` says."""
        name = self.name if db is True else db
        if self.backend == "postgresql":
            with _pg(self._admin, name or None) as c:
                cur = c.execute(sql, params)
                return list(cur.fetchall()) if cur.description else []
        with _mysql(self._admin, name or None) as c, c.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall())

    def grant_table(self, role: str, privileges: str, table: str) -> None:
        """What an operator grants a worker user on the application's own tables."""
        user = self.users[role]
        who = f'"{user}"' if self.backend == "postgresql" else f"'{user}'@'%'"
        self.admin_sql(f"GRANT {privileges} ON {table} TO {who}")

    def denied(self, role: str, sql: str) -> str | None:
        """Run ``sql`` as ``role``'s user and roll back; the permission error, or None.

        Any other error fails the caller: a statement refused for a typo proves nothing.
        """
        u = make_url(self.url(role))
        if self.backend == "postgresql":
            with _pg(u, self.name, autocommit=False) as c:
                try:
                    c.execute(sql)
                except psycopg.errors.InsufficientPrivilege as exc:
                    return f"{exc.sqlstate}"
                finally:
                    c.rollback()
            return None
        with _mysql(u, self.name, autocommit=False) as c, c.cursor() as cur:
            try:
                cur.execute(sql)
            except pymysql.err.MySQLError as exc:
                if exc.args and exc.args[0] in MYSQL_DENIED:
                    return str(exc.args[0])
                raise
            finally:
                c.rollback()
        return None

    def close(self) -> None:
        with self.server_lock():
            self._drop()

    def _drop(self) -> None:
        if self.backend == "postgresql":
            with _pg(self._admin) as c:
                c.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
                for user in self.users.values():
                    c.execute(f'DROP ROLE IF EXISTS "{user}"')
            return
        for user in self.users.values():
            self.admin_sql(f"DROP USER IF EXISTS '{user}'@'%'", db=None)
        self.admin_sql(f"DROP DATABASE IF EXISTS `{self.name}`", db=None)
        # A dropped database keeps the roles' grants on it: remove them too.
        for table in ("tables_priv", "columns_priv", "db"):
            self.admin_sql(f"DELETE FROM mysql.{table} WHERE Db = %s", (self.name,), db=None)
        self.admin_sql("FLUSH PRIVILEGES", db=None)

    def __enter__(self) -> GrantedDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _pg(u: Any, dbname: str | None = None, *, autocommit: bool = True) -> psycopg.Connection[Any]:
    return psycopg.connect(
        host=u.host,
        port=u.port,
        user=u.username,
        password=u.password,
        dbname=dbname or u.database,
        autocommit=autocommit,
    )


def _mysql(u: Any, dbname: str | None = None, *, autocommit: bool = True) -> Any:
    return pymysql.connect(
        host=u.host or "127.0.0.1",
        port=u.port or 3306,
        user=u.username or "root",
        password=u.password or "",
        database=dbname,
        autocommit=autocommit,
    )
