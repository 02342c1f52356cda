"""Django's PostgreSQL backend on psycopg 2 (what it uses when psycopg 3 is not
installed): a Django process with psycopg 3 hidden writes through ``record()`` and
``push()`` inside ``atomic()``, savepoints included."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from outbox.db.connection import Connection
from tests.fixtures.databases import BACKENDS
from tests.fixtures.records import counts
from tests.fixtures.workers import ROOT

SCRIPT = r"""
import sys
sys.modules["psycopg"] = None  # Django then picks psycopg2, as without psycopg 3
import django
django.setup()
from django.db import connection, transaction
from outbox import Job, record
from outbox.errors import NoActiveTransaction
from outbox.queue import push
connection.ensure_connection()
assert type(connection.connection).__module__.startswith("psycopg2"), "not psycopg2"
job = Job("notes.index", {"n": 1})
with transaction.atomic():
    record(connection, "kept", job)
    try:
        with transaction.atomic():
            push(connection, job)
            raise KeyError
    except KeyError:
        pass
    push(connection, job)
try:
    push(connection, job)
except NoActiveTransaction:
    print("refused in autocommit")
"""


@pytest.mark.parametrize(
    "backend", [b for b in BACKENDS if b == "postgresql"], indirect=True
)
def test_django_on_psycopg2_writes_in_its_atomic_block(
    backend: str, db_url: str, conn: Connection
) -> None:
    env = {**os.environ, "OUTBOX_DJANGO_DB_URL": db_url,
           "DJANGO_SETTINGS_MODULE": "tests.django.settings"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "refused in autocommit"
    assert counts(conn, ("outbox_messages", "outbox_jobs")) == {
        "outbox_messages": 1, "outbox_jobs": 1}
