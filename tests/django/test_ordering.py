"""``outbox.contrib.django.ordered(key)``: tasks enqueued in the block carry the
ordering key, so they wait their turn in the queue; a bad key writes nothing."""

from __future__ import annotations

import hashlib

import pytest

from outbox.contrib.django import ordered
from outbox.db.connection import Connection
from outbox.errors import InvalidJob
from tests.django.testapp import tasks
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
