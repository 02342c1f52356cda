"""``outbox keys status`` / ``rotate`` (``outbox.db.keys``) on every backend: rows counted
per key id, plaintext included; rotation re-seals every table under the newest key in
batches, keeps every row verifiable and runnable, is resumable, and leaves what it cannot
open; and a worker and producers keep going while it runs (real processes race it in
``test_rotation_races_producers_and_a_worker``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from outbox import Job, Registry, record, sealing
from outbox.db import keys
from outbox.db.connection import Connection, Database
from outbox.errors import ConfigurationError, IdempotencyConflict
from outbox.queue import JobContext, push
from tests.fixtures.factories import count_rows
from tests.fixtures.runs import drain, in_tx

K1 = bytes(range(32))
K2 = bytes(range(100, 132))
ran: list[Any] = []
registry = Registry()


@registry.job("rot.job", keep_result=True)
def job(payload: Any, ctx: JobContext) -> Any:
    ran.append(payload)
    return payload


@registry.job("rot.fails", max_attempts=1)
def fails(payload: Any, ctx: JobContext) -> None:
    raise LookupError("no such thing")


@pytest.fixture(autouse=True)
def keyring() -> Iterator[None]:
    ran.clear()
    sealing.configure({"k1": K1})
    yield
    sealing.reset()






def _fill(database: Database) -> None:
    """Rows in every table a rotation touches: plaintext ones, then k1 ones."""
    sealing.configure(None)
    in_tx(database, lambda c: record(c, "plain", Job("rot.job", {"n": 0})))
    sealing.configure({"k1": K1})
    for n in range(1, 6):
        in_tx(database, lambda c, n=n: record(c, f"r{n}", Job("rot.job", {"n": n})))
    in_tx(database, lambda c: push(c, Job("rot.job", {"n": 10})))
    in_tx(database, lambda c: push(c, Job("rot.fails", {"n": 11})))
    drain(database, registry)  # a result and a dead letter
    for n in range(20, 23):
        in_tx(database, lambda c, n=n: push(c, Job("rot.job", {"n": n})))  # queued jobs
    for n in range(30, 33):
        in_tx(database, lambda c, n=n: record(c, f"p{n}", Job("rot.job", {"n": n})))  # pending
    ran.clear()


def test_status_counts_rows_per_key_id_and_plaintext(database: Database, conn: Connection) -> None:
    sealing.configure(None)
    in_tx(database, lambda c: record(c, "a", Job("rot.job", {"n": 1})))
    sealing.configure({"k1": K1})
    in_tx(database, lambda c: record(c, "b", Job("rot.job", {"n": 2})))
    in_tx(database, lambda c: push(c, Job("rot.job", {"n": 3})))
    found = keys.status(conn)
    assert found["outbox_messages"] == {None: 1, "k1": 1}
    assert found["outbox_jobs"] == {"k1": 1}
    assert found["outbox_failed_jobs"] == {}


def test_rotation_reseals_every_table_under_the_newest_key_in_batches(
    database: Database, conn: Connection
) -> None:
    _fill(database)
    sealing.configure({"k2": K2, "k1": K1})
    batches: list[tuple[str, int]] = []
    done = keys.rotate(conn, batch=2, on_batch=lambda t, n: batches.append((t, n)))
    assert done.key_id == "k2" and (done.missing_key, done.tampered, done.unverified) == (0, 0, 0)
    assert done.resealed["outbox_messages"] == 3 and done.resealed["outbox_jobs"] == 3
    assert done.resealed["outbox_failed_jobs"] == 1
    assert done.resealed["outbox_job_results"] >= 1
    assert all(n <= 2 for _, n in batches)  # one short transaction per batch
    found = keys.status(conn)
    assert all(set(counts) <= {"k2"} for counts in found.values()), found
    assert keys.rotate(conn).total == 0  # resumable: nothing left to do
    # k1 leaves the ring: every stored row still verifies and runs, and a pending
    # intent's replay (its key row re-sealed too) or a plaintext one still matches.
    sealing.configure({"k2": K2})
    pending = count_rows(conn, "outbox_messages")
    for n in range(30, 33):
        in_tx(database, lambda c, n=n: record(c, f"p{n}", Job("rot.job", {"n": n})))
    in_tx(database, lambda c: record(c, "plain", Job("rot.job", {"n": 0})))
    assert count_rows(conn, "outbox_messages") == pending
    # A key handed off under k1 keeps k1's fingerprint until pruned: its replay is a
    # conflict (never a second job) once k1 is gone; the docs say to prune first.
    with pytest.raises(IdempotencyConflict):
        in_tx(database, lambda c: record(c, "r1", Job("rot.job", {"n": 1})))
    drain(database, registry)
    assert sorted(p["n"] for p in ran) == [20, 21, 22, 30, 31, 32]
    assert count_rows(conn, "outbox_messages", "state <> 'pending'") == 0  # none quarantined


def test_rotation_leaves_what_it_cannot_open_and_reports_it(
    database: Database, conn: Connection
) -> None:
    in_tx(database, lambda c: push(c, Job("rot.job", {"n": 1})))
    sealing.configure({"k2": K2})  # k1 is not in the ring
    done = keys.rotate(conn)
    assert done.total == 0 and done.missing_key == 1
    assert keys.status(conn)["outbox_jobs"] == {"k1": 1}  # left whole


def test_rotation_needs_a_keyring_and_a_sane_batch(conn: Connection) -> None:
    with pytest.raises(ConfigurationError, match="batch must be an int from 1 to 10000"):
        keys.rotate(conn, batch=0)
    sealing.configure(None)
    with pytest.raises(ConfigurationError, match="encryption is off"):
        keys.rotate(conn)
