"""The admin, through Django's test client: dead letters, quarantined intents and results
listed read-only, payloads hidden unless the setting shows them, and the retry and
forget actions behind Django's permissions, done through outbox's own admin API."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client, override_settings

from outbox.db.connection import Connection
from outbox.ids import new_message_id
from tests.django.conftest import failure_trace
from tests.fixtures.factories import Rows, count_rows, insert

SECRET = "payload-secret-4711"


@pytest.fixture
def client(staff: Any) -> Client:
    c = Client()
    c.force_login(staff)
    return c


def _grant(user: Any, *codenames: str) -> None:
    """Each request loads the user afresh, with the permissions granted here."""
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))


def test_dead_letters_are_listed_read_only_without_payloads(
    outbox_on: str, rows: Rows, client: Client
) -> None:
    mid = rows.dead_letter(payload=f'{{"card": "{SECRET}"}}', exception_class="LookupError")
    listing = client.get("/admin/outbox/failedjob/")
    assert listing.status_code == 200
    body = listing.content.decode()
    assert mid in body and "LookupError" in body and SECRET not in body
    assert "/admin/outbox/failedjob/add/" not in body
    pk = listing.context["cl"].result_list[0].pk
    detail = client.get(f"/admin/outbox/failedjob/{pk}/change/").content.decode()
    assert mid in detail and SECRET not in detail and 'name="_save"' not in detail
    with override_settings(OUTBOX={"DATABASE": outbox_on, "ADMIN_SHOW_PAYLOADS": True}):
        shown = client.get(f"/admin/outbox/failedjob/{pk}/change/").content.decode()
    assert SECRET in shown


def test_a_dead_letter_s_traceback_hides_exception_messages_unless_payloads_are_shown(
    outbox_on: str, rows: Rows, client: Client
) -> None:
    message = "SECRET failing message"
    trace = failure_trace(message)
    rows.dead_letter(exception_class="ValueError", exception_message=message,
                     exception_trace=trace)
    pk = client.get("/admin/outbox/failedjob/").context["cl"].result_list[0].pk
    detail = client.get(f"/admin/outbox/failedjob/{pk}/change/").content.decode()
    assert "SECRET" not in detail
    assert "failure_trace" in detail and "ValueError" in detail  # frames and class kept
    with override_settings(OUTBOX={"DATABASE": outbox_on, "ADMIN_SHOW_PAYLOADS": True}):
        shown = client.get(f"/admin/outbox/failedjob/{pk}/change/").content.decode()
    assert f"ValueError: {message}" in shown


def test_actions_need_their_permission_and_use_outbox_s_admin(
    outbox_on: str, rows: Rows, client: Client, staff: Any, conn: Connection
) -> None:
    first, second = rows.dead_letter(), rows.dead_letter()
    ids = [r.pk for r in client.get("/admin/outbox/failedjob/").context["cl"].result_list]
    post = {"action": "retry", "_selected_action": ids}
    refused = client.post("/admin/outbox/failedjob/", post, follow=True)
    assert refused.status_code == 200
    assert count_rows(conn, "outbox_failed_jobs") == 2 and count_rows(conn, "outbox_jobs") == 0
    _grant(staff, "retry_failedjob")
    done = client.post("/admin/outbox/failedjob/", {**post, "_selected_action": ids[:1]},
                       follow=True)
    msgs = [str(m) for m in done.context["messages"]]
    assert msgs == ["requeued 1 of 1"], (msgs, done.context["action_form"].errors)
    assert count_rows(conn, "outbox_failed_jobs") == 1 and count_rows(conn, "outbox_jobs") == 1
    _grant(staff, "forget_failedjob")
    client.post("/admin/outbox/failedjob/", {"action": "forget", "_selected_action": ids[1:]},
                follow=True)
    assert count_rows(conn, "outbox_failed_jobs") == 0
    assert conn.driver.dead_show(first) is None and conn.driver.dead_show(second) is None


def test_quarantined_intents_and_results_are_listed(
    outbox_on: str, rows: Rows, client: Client
) -> None:
    mid = rows.intent(state="failed", failure_reason="fingerprint", failed_at=1)
    pending = rows.intent()
    body = client.get("/admin/outbox/quarantinedintent/").content.decode()
    assert mid in body and "fingerprint" in body and pending not in body
    assert client.get("/admin/outbox/jobresult/").status_code == 200


# 2026-12-04 21:00:00.123 UTC and the next few seconds, in database milliseconds.
AT_MS = 1796418000123
AT = "2026-12-04 21:00:00+00:00"


@pytest.mark.parametrize("page", ["failedjob", "quarantinedintent", "jobresult"])
def test_change_pages_show_times_as_the_list_pages_do(
    outbox_on: str, rows: Rows, conn: Connection, client: Client, page: str
) -> None:
    rows.dead_letter(failed_at=AT_MS)
    rows.intent(state="failed", failure_reason="fingerprint", created_at=AT_MS,
                failed_at=AT_MS + 1000)
    with conn.transaction():
        insert(conn, "outbox_job_results", message_id=new_message_id(), queue="default",
               job_name="t.noop", status="SUCCESSFUL", payload="{}", attempts=1,
               enqueued_at=AT_MS, started_at=AT_MS + 1000, finished_at=AT_MS + 2000,
               expires_at=AT_MS + 3000)
    listing = client.get(f"/admin/outbox/{page}/")
    assert AT[:-7] in listing.content.decode()  # the list page's format
    pk = listing.context["cl"].result_list[0].pk
    detail = client.get(f"/admin/outbox/{page}/{pk}/change/").content.decode()
    assert str(AT_MS)[:9] not in detail  # no raw milliseconds, of any of the times
    assert AT in detail
