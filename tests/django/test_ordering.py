"""``outbox.contrib.django.ordered(key)``: tasks enqueued in the block carry the
ordering key, so they wait their turn in the queue; a bad key writes nothing."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import pytest

from outbox.contrib.django import ordered
from outbox.db.connection import Connection
from outbox.errors import InvalidJob
from tests.django.testapp import tasks
from tests.docs.pages import blocks_of
from tests.fixtures.factories import count_rows

pytestmark = pytest.mark.usefixtures("outbox_on")


def test_tasks_enqueued_in_an_ordered_block_wait_their_turn(conn: Connection) -> None:
    with ordered("account:7"):
        tasks.add.enqueue(1, 1)
        tasks.add.enqueue(2, 2)
    tasks.add.enqueue(3, 3)
    rows = conn.execute_sql("SELECT ordering_key, available_at FROM outbox_jobs ORDER BY id")
    digest = hashlib.sha256(b"account:7").hexdigest()
    assert [r[0] for r in rows] == [digest, digest, None]
    assert rows[0][1] < rows[1][1] and rows[1][1] > rows[2][1]  # the second one waits


def test_a_bad_ordering_key_raises_and_writes_nothing(conn: Connection) -> None:
    with ordered("x" * 201), pytest.raises(InvalidJob, match="ordering_key is 201 bytes"):
        tasks.add.enqueue(1, 1)
    assert count_rows(conn, "outbox_jobs") == 0


def test_the_pages_ordered_block_gives_its_enqueues_the_key(conn: Connection) -> None:
    """``docs/how-to/ordering.md``'s Django block, run as written twice for one order:
    both tasks carry the key's digest and the second waits for the first."""
    from django.db import transaction

    (block,) = [b.body for b in blocks_of("how-to/ordering.md") if b.first.startswith(
        "from outbox.contrib.django import ordered")]
    for _ in range(2):
        exec(block, {"transaction": transaction, "order": SimpleNamespace(pk=42),
                     "sync_order": tasks.sync_order})
    rows = conn.execute_sql("SELECT ordering_key, available_at FROM outbox_jobs ORDER BY id")
    digest = hashlib.sha256(b"order:42").hexdigest()
    assert [r[0] for r in rows] == [digest, digest]
    assert rows[0][1] < rows[1][1]  # the second one waits its turn
