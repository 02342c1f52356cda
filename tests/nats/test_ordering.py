"""Ordering keys on the broker path: not kept in order there yet, so refused, loudly,
never reordered. ``outbox relay --target nats://`` will not start while a pending
intent has an ordering key (one line, exit 1); an intent recorded with one while the
relay runs is never published: it stays pending and the batch ends in
``TargetRefused`` (limit ``ordering_key``), its keyless peers published."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from outbox import Job, record
from outbox.cli import main
from outbox.db.connection import Database
from outbox.db.migrate import migrate
from outbox.errors import TargetRefused
from outbox.jetstream import names
from outbox.relay.jetstream import ORDERING
from tests.fixtures.databases import raw_connect, sqlite_url
from tests.nats import support


@pytest.fixture
def sqlite_db(tmp_path: Path) -> tuple[Database, str]:
    url = sqlite_url(tmp_path)
    db = Database(url)
    with db.connect() as c:
        migrate(c)
    return db, url


def _record_ordered(url: str, queue: str, n: int) -> None:
    conn = raw_connect(url)
    try:
        for i in range(n):
            job = Job("t.ok", {"i": i}, queue=queue, ordering_key="order:1")
            record(conn, f"ordered{queue}{i}", job)
        conn.commit()
    finally:
        conn.close()


def test_relay_to_nats_refuses_to_start_while_intents_have_an_ordering_key(
    sqlite_db: tuple[Database, str], nats_url: str
) -> None:
    _, url = sqlite_db
    queue = support.queue_name()
    _record_ordered(url, queue, 2)
    result = CliRunner().invoke(main, ["--database-url", url, "relay", "--target", nats_url])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "2 pending intents have an ordering_key" in lines[0]
    assert "--target sql" in lines[0]
    assert support.outbox_rows(url) == (2, 2)  # nothing handed off
    assert support.stream_count(nats_url, names.stream(queue)) in (-1, 0)


def test_an_ordered_intent_met_while_running_stays_pending_its_peers_are_published(
    sqlite_db: tuple[Database, str], nats_url: str
) -> None:
    db, url = sqlite_db
    queue = support.queue_name()
    support.record_jobs(url, queue, 3)
    _record_ordered(url, queue, 2)
    with support.relay(db, nats_url) as relay, pytest.raises(TargetRefused) as err:
        relay.run()
    assert (err.value.limit, err.value.handed_off) == (ORDERING, 3)
    assert "ordering_key" in str(err.value) and "--target sql" in str(err.value)
    assert support.outbox_rows(url) == (2, 5)
    assert len(support.msg_ids(nats_url, queue)) == 3
