"""Where each measured system keeps its data: one database per system on one server.

PostgreSQL and MariaDB databases are created fresh for a run and dropped after it;
SQLite files live under ``bench/.work/``. Server addresses come from
``BENCH_PG_URL`` / ``BENCH_MYSQL_URL`` (defaults: the local servers).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

PG_URL = os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432")
MYSQL_URL = os.environ.get("BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306")
WORK = Path(__file__).resolve().parent / ".work"
_NAME = re.compile(r"^[a-z0-9_]{1,60}$")

BACKENDS = ("postgresql", "sqlite", "mariadb")
_created: list[tuple[str, str]] = []


def _check(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(f"bad benchmark database name {name!r}")
    return name


def _pg_admin() -> Any:
    import psycopg

    return psycopg.connect(f"{PG_URL}/postgres", autocommit=True)


def _mysql_admin() -> Any:
    import pymysql
    from sqlalchemy.engine import make_url

    u = make_url(MYSQL_URL)
    return pymysql.connect(
        host=u.host or "127.0.0.1",
        port=u.port or 3306,
        user=u.username or "root",
        password=u.password or "",
        autocommit=True,
    )


def fresh(backend: str, name: str) -> str:
    """An empty database called ``name`` on ``backend``; returns its URL."""
    name = _check(name)
    if backend == "postgresql":
        with _pg_admin() as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            admin.execute(f"CREATE DATABASE {name}")
        _created.append((backend, name))
        return f"{PG_URL}/{name}"
    if backend == "mariadb":
        admin = _mysql_admin()
        try:
            with admin.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS {name}")
                cur.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
        finally:
            admin.close()
        _created.append((backend, name))
        return f"{MYSQL_URL}/{name}"
    if backend == "sqlite":
        WORK.mkdir(exist_ok=True)
        for suffix in ("", "-wal", "-shm"):
            (WORK / f"{name}.db{suffix}").unlink(missing_ok=True)
        _created.append((backend, name))
        return f"sqlite:///{WORK / name}.db"
    raise ValueError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")


def drop_all() -> None:
    """Drop every database this run created."""
    while _created:
        backend, name = _created.pop()
        try:
            _drop(backend, name)
        except Exception as exc:  # a leftover database is not worth failing the report
            print(f"note: could not drop {backend} database {name}: {type(exc).__name__}")


def _drop(backend: str, name: str) -> None:
    if backend == "postgresql":
        with _pg_admin() as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    elif backend == "mariadb":
        admin = _mysql_admin()
        try:
            with admin.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS {name}")
        finally:
            admin.close()
    else:
        for suffix in ("", "-wal", "-shm"):
            (WORK / f"{name}.db{suffix}").unlink(missing_ok=True)


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    import platform

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    try:
        import psutil

        info["memory_gib"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    try:
        with _pg_admin() as admin:
            info["postgresql"] = admin.execute("SHOW server_version").fetchone()[0]
    except Exception:
        info["postgresql"] = None
    try:
        cpu = Path("/proc/cpuinfo").read_text().split("model name")[1].split("\n")[0]
        info["cpu"] = cpu.strip(" :\t")
    except (OSError, IndexError):
        pass
    return info
