"""The shop's own tests, with outbox.testing: real rows, no mock queue."""

import os

import pytest
from sqlalchemy import func, select

from shop import jobs
from shop.models import Email
from shop.service import register_user, send_receipt


def emails(session):
    return session.scalar(select(func.count()).select_from(Email))


def test_registering_records_one_job_per_listener(session, outbox):
    user = register_user(session, "ada@example.com")
    outbox.assert_recorded(session, "shop.welcome_email", {"user_id": user.id})
    outbox.assert_recorded(session, "shop.crm_sync", {"user_id": user.id}, queue="crm")


def test_the_welcome_email_is_written_when_the_jobs_run(session, outbox):
    register_user(session, "ada@example.com")  # records with emit(), in the session
    outbox.assert_recorded(session, "shop.welcome_email")
    report = outbox.run_pending(session)  # relay + run, in this transaction
    assert report.done == 2
    assert emails(session) == 1


def test_each_test_starts_from_an_empty_database(session, outbox):
    assert emails(session) == 0
    assert outbox.recorded(session) == []


def test_a_crm_outage_retries_and_never_blocks_the_email(session, outbox, monkeypatch):
    monkeypatch.setitem(jobs.outage, "crm", True)
    register_user(session, "ada@example.com")
    report = outbox.run_pending(session)
    assert [r.job_name for r in report.of("retry")] == ["shop.crm_sync"]
    assert emails(session) == 1
    monkeypatch.setitem(jobs.outage, "crm", False)
    outbox.clock.advance(5)  # the default backoff's first retry bound
    assert outbox.run_pending(session).done == 1


def test_a_receipt_is_a_typed_job_checked_when_recorded(session, outbox):
    user = register_user(session, "ada@example.com")
    send_receipt(session, user, 7, [("tea", 2, 450)])
    outbox.assert_recorded(session, "shop.receipt", {
        "order_id": 7, "user_id": user.id, "lines": [{"sku": "tea", "quantity": 2,
        "unit_cents": 450}], "total_cents": 900, "currency": "EUR", "note": None,
        "_version": 2}, queue="mail")
    with pytest.raises(ValueError, match="'lines\\[0\\].sku'"):
        send_receipt(session, user, 8, [(None, 2, 450)])
    assert outbox.run_pending(session).done == 3
    assert emails(session) == 2


def test_the_nightly_job_runs_once_a_night(session, outbox):
    outbox.clock.advance(2 * 86400)  # a frozen clock you move
    report = outbox.run_pending(session)
    assert report.ticks == 2
    assert [r.job_name for r in report.ran] == ["shop.nightly", "shop.nightly"]


def test_eager_mode_runs_jobs_at_commit(session, outbox_eager):
    register_user(session, "ada@example.com")
    session.commit()  # releases the test's savepoint: the jobs run just before
    assert emails(session) == 1


@pytest.mark.skipif(os.environ.get("OUTBOX_EAGER") != "1", reason="only with OUTBOX_EAGER=1")
def test_with_outbox_eager_every_commit_runs_the_jobs(session):
    register_user(session, "ada@example.com")
    session.commit()
    assert emails(session) == 1
