"""One PgBouncer in transaction pooling mode, in front of the test PostgreSQL server.

As production runs it: ``pool_mode = transaction`` (a server connection belongs to a
client only for the length of one transaction), here with ``auth_type = trust`` on a free
loopback port. It runs as the ``postgres`` user when the tests run as root (PgBouncer
refuses root). Two pools lead to the same database:

- ``DB`` (``default_pool_size = 2``): what the product is run through;
- ``DB_single`` (``pool_size = 1``): one server connection shared by every client, so
  whatever one client leaves on it, the next one sees.

The database is created, migrated and dropped here; PgBouncer cannot pass the test
suite's per-test ``search_path`` (it refuses the ``options`` startup parameter).
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from outbox.db.connection import Database
from outbox.db.migrate import migrate
from tests.fixtures import databases as backends
from tests.fixtures.ports import free_port


class PgBouncer:
    """A running PgBouncer and the database behind it; ``close`` stops and drops both."""

    def __init__(self) -> None:
        self._admin = make_url(backends.PG_ADMIN_URL)
        self.db = f"outbox_bouncer_{backends.RUN_ID}_{secrets.token_hex(3)}"
        with self._direct("postgres") as c:
            c.execute(f'CREATE DATABASE "{self.db}"')
        with Database(self.direct_url).connect() as conn:
            migrate(conn)
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="outbox-pgbouncer-"))
        self._write_config()
        self._start()

    @property
    def direct_url(self) -> str:
        """The database, straight to PostgreSQL."""
        return self._admin.set(database=self.db).render_as_string(hide_password=False)

    def url(self, *, single: bool = False, driver: str = "postgresql") -> str:
        """The database through PgBouncer (``single``: the one-connection pool)."""
        name = f"{self.db}_single" if single else self.db
        u = self._admin.set(
            drivername=driver, host="127.0.0.1", port=self.port, database=name, password=None
        )
        return u.render_as_string(hide_password=False)

    def _write_config(self) -> None:
        user = self._admin.username or "postgres"
        server = f"host={self._admin.host or '127.0.0.1'} port={self._admin.port or 5432}"
        (self.dir / "users.txt").write_text(f'"{user}" ""\n')
        (self.dir / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"{self.db}_single = {server} dbname={self.db} pool_size=1\n"
            f"{self.db} = {server} dbname={self.db}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {self.dir / 'users.txt'}\n"
            "pool_mode = transaction\n"
            "default_pool_size = 2\n"
            "max_client_conn = 200\n"
            f"logfile = {self.dir / 'pgbouncer.log'}\n"
            f"pidfile = {self.dir / 'pgbouncer.pid'}\n"
        )

    def _start(self) -> None:
        exe = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not os.path.exists(exe):
            raise RuntimeError("pgbouncer is not installed: run ./scripts/services.sh")
        cmd = [exe, "-d", str(self.dir / "pgbouncer.ini")]
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            for f in self.dir.iterdir():
                os.chown(f, pw.pw_uid, pw.pw_gid)
            cmd = ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(cmd)]
        subprocess.run(cmd, check=True, capture_output=True)
        for _ in range(100):
            try:
                with psycopg.connect(self.url(), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                time.sleep(0.05)
        raise RuntimeError(f"pgbouncer did not start: {self.log()}")

    def log(self) -> str:
        path = self.dir / "pgbouncer.log"
        return path.read_text() if path.exists() else ""

    def connect(self, *, single: bool = False, **kwargs: Any) -> psycopg.Connection[Any]:
        """A plain psycopg connection through PgBouncer."""
        return psycopg.connect(self.url(single=single), **kwargs)

    def _direct(self, dbname: str) -> psycopg.Connection[Any]:
        u = self._admin
        return psycopg.connect(
            host=u.host, port=u.port, user=u.username, dbname=dbname, autocommit=True
        )

    def close(self) -> None:
        pidfile = self.dir / "pgbouncer.pid"
        if pidfile.exists():
            pid = int(pidfile.read_text().strip())
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)
        shutil.rmtree(self.dir, ignore_errors=True)
        with self._direct("postgres") as c:
            c.execute(f'DROP DATABASE IF EXISTS "{self.db}" WITH (FORCE)')
