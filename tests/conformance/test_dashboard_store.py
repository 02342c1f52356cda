"""The dashboard's own reads on every backend: job pages, lookups, payloads, counts (the
chart's read is in test_throughput.py)."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from outbox.dashboard import store
from outbox.db.connection import Connection, Database
from outbox.errors import InvalidJob, InvalidMessageId
from outbox.ids import new_message_id
from outbox.status import status
from tests.dashboard import seed


def _all_pages(
    conn: Connection, queue: str, state: store.JobState, job_name: str | None = None
) -> list[list[str]]:
    pages, cursor = [], None
    while True:
        page = store.job_page(conn, queue, state, job_name=job_name, cursor=cursor, limit=3)
        pages.append([j.message_id for j in page.jobs])
        if page.next is None:
            return pages
        cursor = page.next


def _walk(conn: Connection, queue: str, state: store.JobState, job_name: str | None = None
          ) -> list[str]:
    return [i for page in _all_pages(conn, queue, state, job_name) for i in page]


def test_job_pages_walk_each_state_in_worker_order_without_gaps_or_repeats(
    database: Database, db_url: str, conn: Connection
) -> None:
    ready = seed.push_jobs(db_url, "q", ["a", "b", "a", "a", "b", "a", "a"])
    delayed = seed.push_jobs(db_url, "q", ["a", "b"], delay=3600)
    seed.push_jobs(db_url, "other", ["a"])
    pages = _all_pages(conn, "q", "ready")
    assert [len(p) for p in pages] == [3, 3, 1]
    # Pushed in one transaction: one due time, so id order.
    assert [i for p in pages for i in p] == ready
    assert _walk(conn, "q", "delayed") == delayed
    assert _all_pages(conn, "q", "reserved") == [[]]
    named_b = _walk(conn, "q", "ready", job_name="b")
    assert named_b == [ready[1], ready[4]]
    assert _all_pages(conn, "nope", "ready") == [[]]


def test_reserved_jobs_page_by_lease(database: Database, db_url: str, conn: Connection) -> None:
    ids = seed.push_jobs(db_url, "q", ["a"] * 4)
    for i, message_id in enumerate(ids):
        seed.scalar(db_url, "UPDATE outbox_jobs SET reserved_by = 'w1', lease_expires_at = ? "
                    "WHERE message_id = ?", 5_000 - i, message_id)
    assert _walk(conn, "q", "reserved") == list(reversed(ids))
    held = store.job(conn, ids[0])
    assert held is not None and held.reserved_by == "w1" and held.lease_expires_at == 5_000


def test_lookups_find_jobs_dead_letters_and_intents_and_payloads_only_when_asked(
    database: Database, db_url: str, conn: Connection
) -> None:
    [queued] = seed.push_jobs(db_url, "q", ["a"])
    [dead] = seed.dead_letters(db_url, 1)
    [pending] = seed.intents(db_url, 1)
    job = store.job(conn, queued)
    assert job is not None and (job.queue, job.job_name, job.attempts) == ("q", "a", 0)
    intent = store.intent(conn, pending)
    assert intent is not None and intent.state == "pending" and intent.failure_reason is None
    assert store.job(conn, dead) is None and store.intent(conn, queued) is None
    assert store.job(conn, new_message_id()) is None
    for of, message_id in (("job", queued), ("dead", dead), ("intent", pending)):
        text = store.payload(conn, of, message_id)  # type: ignore[arg-type]
        assert text is not None and seed.PAYLOAD_MARKER in text
    assert store.payload(conn, "job", dead) is None
    with pytest.raises(InvalidMessageId):
        store.job(conn, "x' OR '1'='1")


def test_bad_names_are_refused_before_any_query(conn: Connection) -> None:
    with pytest.raises(InvalidJob, match="job name 'a b' must be"):
        store.job_page(conn, "q", "ready", job_name="a b")
    with pytest.raises(InvalidJob, match="queue name"):
        store.job_page(conn, "q q", "ready")
    with pytest.raises(ValueError, match="state must be one of"):
        store.job_page(conn, "q", "done")  # type: ignore[arg-type]


def test_counts_agree_with_status_below_the_cap_and_stop_at_it(
    database: Database, db_url: str, conn: Connection
) -> None:
    seed.intents(db_url, 4, queue="mail")
    seed.relay(db_url)
    seed.intents(db_url, 3, queue="mail")
    seed.quarantined(db_url, 2)  # (its relay run hands the 3 off too)
    seed.intents(db_url, 2, queue="mail")
    seed.push_jobs(db_url, "billing", ["b"] * 5)
    seed.push_jobs(db_url, "billing", ["b"] * 2, delay=3600)
    held = seed.push_jobs(db_url, "held-only", ["h"] * 2)
    for message_id in held:
        seed.scalar(db_url, "UPDATE outbox_jobs SET reserved_by = 'w', lease_expires_at = ? "
                    "WHERE message_id = ?", 10**13, message_id)
    seed.dead_letters(db_url, 2, queue="dead-only")
    exact = status(conn)
    counts = store.counts(conn)
    assert (counts.pending, counts.failed) == (exact.outbox.pending, exact.outbox.failed) == (2, 2)
    assert counts.oldest_pending_age_s is not None and counts.oldest_pending_age_s >= 0
    assert {n: asdict(q) for n, q in counts.queues.items()} == {
        n: {k: getattr(q, k) for k in ("ready", "delayed", "reserved", "dead")}
        for n, q in exact.queues.items()
    }
    assert set(counts.queues) == {"mail", "billing", "held-only", "dead-only"}
    capped = store.counts(conn, cap=3)
    assert capped.queues["mail"].ready == 3 and capped.queues["billing"].ready == 3
    assert capped.queues["billing"].delayed == 2 and capped.pending == 2


def test_an_intent_is_found_while_in_the_outbox_and_a_v1_tombstone_reads_as_handed_off(
    database: Database, db_url: str, conn: Connection
) -> None:
    [handed] = seed.intents(db_url, 1)
    seed.relay(db_url)
    [pending, tombstone] = seed.intents(db_url, 2)
    # A version-1 relay, during a rolling upgrade, leaves its row behind as 'published'.
    seed.scalar(db_url, "UPDATE outbox_messages SET state = 'published', payload = NULL "
                "WHERE message_id = ?", tombstone)
    found = store.intent(conn, pending)
    assert found is not None and found.state == "pending" and found.failed_at is None
    assert store.intent(conn, handed) is None
    assert store.intent(conn, tombstone) is None
    assert store.payload(conn, "intent", tombstone) is None
    assert store.payload(conn, "intent", pending) is not None
