"""The dashboard over real HTTP, on every backend: pages, the security model, bad input.

Two ``outbox dashboard`` processes per backend (see conftest): ``write`` has a token and
``--show-payloads``, ``readonly`` has no token. Every refused action is checked to answer
401/403 without a redirect and to leave the database as it was.
"""

from __future__ import annotations

import re

import orjson
import pytest

from outbox.dashboard.store import Cursor
from outbox.queue import control
from tests.dashboard import seed
from tests.dashboard.client import HTML, Answer, bearer, get, post
from tests.dashboard.conftest import TOKEN, Site
from tests.fixtures.processes import wait_until

ACTIONS = ["/dead-letters/retry", "/dead-letters/forget", "/quarantined/retry"]


def _pages(site: Site) -> list[str]:
    dead = site.seeded["dead"][0]
    quarantined = next(iter(site.seeded["quarantined"]))
    return [
        "/",
        "/dead-letters",
        "/quarantined",
        "/queues/billing",
        "/queues/billing?state=delayed",
        "/queues/billing?state=reserved",
        "/queues/mail?state=ready&job=mail.send",
        f"/jobs/{dead}",
        f"/jobs/{quarantined}",
        "/schedules",
    ]


def _csrf(answer: Answer) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', answer.body)
    assert found, answer.body[:500]
    return found.group(1)


def _cookie(answer: Answer) -> str:
    return answer.header("set-cookie").split(";", 1)[0]


def _sign_in(site: Site) -> tuple[str, str]:
    """A session cookie and its CSRF token, through the login form."""
    form = get(site.write.url + "/login", headers=HTML)
    cookie = _cookie(form)
    signed = post(site.write.url + "/login", headers={**HTML, "Cookie": cookie},
                  form={"token": TOKEN, "csrf": _csrf(form)})
    assert signed.status == 303, signed.body
    assert signed.header("location") == "/"
    cookie = _cookie(signed)
    page = get(site.write.url + "/dead-letters", headers={**HTML, "Cookie": cookie})
    assert "actions enabled" in page.body
    return cookie, _csrf(page)


def _state(site: Site, dead: list[str], quarantined: list[str]) -> tuple[object, ...]:
    url = site.db_url
    return (
        tuple(seed.is_dead(url, i) for i in dead),
        tuple(seed.is_queued(url, i) for i in dead),
        tuple(seed.intent_state(url, i) for i in quarantined),
    )


def test_every_page_answers_and_says_read_only_without_a_token(site: Site) -> None:
    for path in _pages(site):
        for server in (site.readonly, site.write):
            answer = get(server.url + path, headers=HTML)
            assert answer.status == 200, (path, answer.body[:300])
            assert "read-only" in answer.body, path
    overview = get(site.readonly.url + "/", headers=HTML).body
    assert 'data-queue="billing"' in overview and 'data-queue="mail"' in overview
    assert "Sign in" not in overview  # nothing to sign in to without a token


def test_read_only_dashboard_refuses_every_action_with_403_and_changes_nothing(
    site: Site,
) -> None:
    dead = seed.dead_letters(site.db_url, 1)
    good = seed.quarantined(site.db_url, 1)
    for message_id, fingerprint in good.items():
        seed.repair(site.db_url, message_id, fingerprint)  # would retry, if it were allowed
    before = _state(site, dead, list(good))
    for path in [*ACTIONS, "/login"]:
        for headers in ({}, HTML, bearer(TOKEN), bearer("x" * 20)):
            form = {"id": [*dead, *good], "all": "1", "token": TOKEN, "csrf": "x"}
            answer = post(site.readonly.url + path, form=form, headers=headers)
            assert answer.status == 403, (path, headers, answer.status)
            assert not answer.header("location")
            assert "read-only" in answer.body
    assert _state(site, dead, list(good)) == before == ((True,), (False,), ("failed",))


def test_a_missing_or_wrong_token_is_refused_with_401_and_changes_nothing(site: Site) -> None:
    dead = seed.dead_letters(site.db_url, 1)
    quarantined = list(seed.quarantined(site.db_url, 1))
    before = _state(site, dead, quarantined)
    wrong = [{}, HTML, bearer("not-the-token-at-all"), bearer(""),
             {"Authorization": f"Basic {TOKEN}"}, {"Authorization": TOKEN}]
    for path in ACTIONS:
        for headers in wrong:
            answer = post(site.write.url + path, form={"id": dead + quarantined, "all": "1"},
                          headers=headers)
            assert answer.status == 401, (path, headers)
            assert answer.header("www-authenticate").startswith("Bearer")
            assert not answer.header("location")
    # A wrong bearer is refused on pages too, rather than quietly treated as anonymous.
    assert get(site.write.url + "/", headers=bearer("not-the-token-at-all")).status == 401
    form = get(site.write.url + "/login", headers=HTML)
    refused = post(site.write.url + "/login", form={"token": "nope" * 5, "csrf": _csrf(form)},
                   headers={**HTML, "Cookie": _cookie(form)})
    assert refused.status == 401 and "not the dashboard" in refused.body
    assert not refused.header("location")
    assert _state(site, dead, quarantined) == before


def test_a_session_acts_only_with_its_csrf_token(site: Site) -> None:
    cookie, csrf = _sign_in(site)
    dead = seed.dead_letters(site.db_url, 1)
    for token in (None, "", "forged-token-value"):
        form: dict[str, str | list[str]] = {"one": dead[0]}
        if token is not None:
            form["csrf"] = token
        answer = post(site.write.url + "/dead-letters/retry", form=form,
                      headers={**HTML, "Cookie": cookie})
        assert answer.status == 403 and "CSRF" in answer.body
        assert not answer.header("location")
    assert seed.is_dead(site.db_url, dead[0])
    done = post(site.write.url + "/dead-letters/retry",
                form={"one": dead[0], "csrf": csrf, "next": "/dead-letters"},
                headers={**HTML, "Cookie": cookie})
    assert done.status == 303 and done.header("location") == "/dead-letters"
    assert not seed.is_dead(site.db_url, dead[0]) and seed.is_queued(site.db_url, dead[0])
    # The login form itself carries a CSRF token: a forged sign-in is refused.
    forged = post(site.write.url + "/login", form={"token": TOKEN}, headers=HTML)
    assert forged.status == 403
    after = get(site.write.url + "/", headers={**HTML, "Cookie": _cookie(forged)})
    assert "read-only" in after.body and "actions enabled" not in after.body


def test_an_action_goes_back_only_to_a_page_of_the_dashboard(site: Site) -> None:
    cookie, csrf = _sign_in(site)
    for wanted in ("https://evil.example/", "//evil.example/x", "/\\evil.example"):
        dead = seed.dead_letters(site.db_url, 1)
        done = post(site.write.url + "/dead-letters/forget",
                    form={"one": dead[0], "csrf": csrf, "next": wanted},
                    headers={**HTML, "Cookie": cookie})
        assert done.status == 303 and done.header("location") == "/"


def test_bearer_scripts_retry_and_forget_single_bulk_and_all(site: Site) -> None:
    url = site.write.url
    one, two, three = seed.dead_letters(site.db_url, 3)
    answer = post(url + "/dead-letters/retry", form={"id": one}, headers=bearer(TOKEN))
    assert answer.status == 200, answer.body
    assert orjson.loads(answer.body) == {"action": "retry_dead", "requeued": 1, "asked": 1}
    assert seed.is_queued(site.db_url, one) and not seed.is_dead(site.db_url, one)
    answer = post(url + "/dead-letters/forget", form={"id": [two, three]}, headers=bearer(TOKEN))
    assert orjson.loads(answer.body)["forgotten"] == 2
    assert not any(seed.is_dead(site.db_url, i) or seed.is_queued(site.db_url, i)
                   for i in (two, three))
    more = seed.dead_letters(site.db_url, 2)
    answer = post(url + "/dead-letters/retry", form={"all": "1"}, headers=bearer(TOKEN))
    assert orjson.loads(answer.body)["requeued"] >= 2
    assert seed.scalar(site.db_url, "SELECT count(*) FROM outbox_failed_jobs") == 0
    assert all(seed.is_queued(site.db_url, i) for i in more)


def test_bearer_scripts_retry_quarantined_intents_that_verify_again(site: Site) -> None:
    good = seed.quarantined(site.db_url, 2)
    repaired, broken = list(good)
    seed.repair(site.db_url, repaired, good[repaired])
    answer = post(site.write.url + "/quarantined/retry", form={"id": [repaired, broken]},
                  headers=bearer(TOKEN))
    assert answer.status == 200
    assert orjson.loads(answer.body) == {
        "action": "retry_quarantined", "requeued": 1, "refused": 1
    }
    assert seed.intent_state(site.db_url, repaired) == "pending"
    assert seed.intent_state(site.db_url, broken) == "failed"


def test_bad_input_is_named_and_changes_nothing(site: Site) -> None:
    url = site.write.url
    dead = seed.dead_letters(site.db_url, 1)
    answer = post(url + "/dead-letters/forget", form={"id": [dead[0], "not-an-id"]},
                  headers=bearer(TOKEN))
    assert answer.status == 400 and "'not-an-id' is not a message id" in answer.body
    assert seed.is_dead(site.db_url, dead[0])
    answer = post(url + "/dead-letters/forget", form={}, headers=bearer(TOKEN))
    assert answer.status == 400 and "no message id given" in answer.body
    answer = post(url + "/dead-letters/forget", headers={**bearer(TOKEN),
                  "Content-Type": "application/json"})
    assert answer.status == 415
    for path, status, words in [
        ("/jobs/nope", 400, "'nope' is not a message id"),
        ("/jobs/01890a5d-ac96-774b-bcce-b302099a8057", 404, "no job, dead letter or intent"),
        ("/queues/billing?state=bogus", 400, "state must be one of ready, delayed, reserved"),
        ("/queues/billing?after=zz", 400, "'zz' is not a page cursor"),
        ("/queues/billing?job=bad%20name", 400, "job name 'bad name' must be"),
        ("/queues/bad%20queue", 400, "queue name 'bad queue' must be"),
    ]:
        answer = get(url + path, headers=HTML)
        assert answer.status == status, (path, answer.status)
        assert words in answer.body.replace("&#39;", "'"), (path, answer.body[:400])
    assert seed.is_dead(site.db_url, dead[0])


def test_the_job_page_says_where_the_message_is_now(site: Site) -> None:
    """Schema 2 keeps only pending and quarantined intents: one in the queue or the dead
    letters but not in the outbox reads "handed off"."""
    url = site.readonly.url
    handed = get(url + f"/jobs/{site.seeded['handed_off'][0]}", headers=HTML)
    assert handed.status == 200
    assert "In the queue" in handed.body and "Intent · handed off" in handed.body
    quarantined = get(url + f"/jobs/{next(iter(site.seeded['quarantined']))}", headers=HTML)
    assert quarantined.status == 200
    assert "Intent · quarantined" in quarantined.body and "handed off" not in quarantined.body
    assert "In the queue" not in quarantined.body
    dead = get(url + f"/jobs/{site.seeded['dead'][0]}", headers=HTML)
    assert "Dead letter" in dead.body and "Intent · handed off" in dead.body


def test_no_answer_contains_the_database_url_its_password_or_a_read_only_payload(
    site: Site,
) -> None:
    answers: list[Answer] = []
    for server in (site.readonly, site.write):
        for path in [*_pages(site), "/live", "/api/status", "/login", "/jobs/x", "/nope"]:
            answers.append(get(server.url + path, headers=HTML))
            answers.append(get(server.url + path))
        for path in ACTIONS:
            answers.append(post(server.url + path, form={"id": "x"}))
    for answer in answers:
        text = answer.body + repr(answer.headers)
        for secret in site.secrets:
            assert secret not in text
        assert seed.PAYLOAD_MARKER not in text
        assert "card declined" not in text  # an exception message


def test_payloads_and_messages_show_only_to_signed_in_viewers_of_a_show_payloads_dashboard(
    site: Site,
) -> None:
    dead = seed.dead_letters(site.db_url, 1, message="card declined")[0]
    anonymous = get(site.write.url + f"/jobs/{dead}", headers=HTML).body
    assert seed.PAYLOAD_MARKER not in anonymous and "card declined" not in anonymous
    assert "hidden from read-only viewers" in anonymous
    cookie, _ = _sign_in(site)
    shown = get(site.write.url + f"/jobs/{dead}", headers={**HTML, "Cookie": cookie}).body
    assert seed.PAYLOAD_MARKER in shown and "card declined" in shown
    assert "PermanentFailure" in shown


def test_every_answer_carries_the_security_headers_and_a_strict_cookie(site: Site) -> None:
    for answer in (get(site.write.url + "/", headers=HTML),
                   post(site.write.url + "/dead-letters/retry", form={}),
                   get(site.write.url + "/static/dashboard.js")):
        csp = answer.header("content-security-policy")
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert answer.header("x-content-type-options") == "nosniff"
        assert answer.header("cache-control") == "no-store"
    cookie = get(site.write.url + "/login", headers=HTML).header("set-cookie").lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert not get(site.readonly.url + "/", headers=HTML).header("set-cookie")


def test_a_host_header_other_than_loopback_is_refused(site: Site) -> None:
    for host in ("evil.example", "evil.example:8642", "127.0.0.1.evil.example"):
        answer = get(site.write.url + "/", headers={**HTML, "Host": host})
        assert answer.status == 400
    assert get(site.write.url + "/", headers={"Host": "localhost"}).status == 200


def test_the_queue_page_pages_through_every_job_once(site: Site) -> None:
    queue = seed.unique("paged")
    ids = seed.push_jobs(site.db_url, queue, ["p.a", "p.b"] * 30)
    seen: list[str] = []
    path: str | None = f"/queues/{queue}?state=ready"
    while path is not None:
        body = get(site.readonly.url + path, headers=HTML).body
        seen += re.findall(r'<td class="mono"><a href="/jobs/([0-9a-f-]{36})">', body)
        found = re.search(r'<a rel="next" href="([^"]+)">', body)
        path = found.group(1).replace("&amp;", "&") if found else None
    assert seen == ids
    only_b = get(site.readonly.url + f"/queues/{queue}?state=ready&job=p.b", headers=HTML).body
    assert re.findall(r'<a href="/jobs/([0-9a-f-]{36})">', only_b) == ids[1::2]


def _pause_paths(queue: str) -> list[str]:
    return [f"/queues/{queue}/pause", f"/queues/{queue}/resume"]


def test_bearer_scripts_pause_and_resume_a_queue_and_the_pages_show_it(site: Site) -> None:
    url, queue, empty = site.write.url, seed.unique("pausable"), seed.unique("quiet")
    seed.push_jobs(site.db_url, queue, ["p.a"])
    answer = post(url + f"/queues/{queue}/pause", form={}, headers=bearer(TOKEN))
    assert answer.status == 200, answer.body
    assert orjson.loads(answer.body) == {"action": "pause_queue", "queue": queue}
    assert post(url + f"/queues/{empty}/pause", form={}, headers=bearer(TOKEN)).status == 200
    assert seed.is_paused(site.db_url, queue) and seed.is_paused(site.db_url, empty)
    overview = get(url + "/", headers=HTML).body
    for name in (queue, empty):  # a paused queue without a job still has its row
        assert f'data-queue="{name}" data-paused="yes"' in overview, name
    assert orjson.loads(get(url + "/api/status").body)["paused"] >= sorted([queue, empty])
    page = get(url + f"/queues/{queue}", headers=HTML).body
    assert re.search(r'id="queue-state"><span class="badge paused"', page)
    answer = post(url + f"/queues/{queue}/resume", form={}, headers=bearer(TOKEN))
    assert orjson.loads(answer.body) == {"action": "resume_queue", "queue": queue,
                                         "resumed": True}
    assert not seed.is_paused(site.db_url, queue)
    answer = post(url + f"/queues/{queue}/resume", form={}, headers=bearer(TOKEN))
    assert orjson.loads(answer.body)["resumed"] is False  # it was not paused
    assert f'data-queue="{queue}" data-paused="no"' in get(url + "/", headers=HTML).body
    post(url + f"/queues/{empty}/resume", form={}, headers=bearer(TOKEN))
    assert empty not in seed.paused_queues(site.db_url)


def test_a_session_pauses_a_queue_only_with_its_csrf_token(site: Site) -> None:
    cookie, csrf = _sign_in(site)
    queue = seed.unique("pausable")
    seed.push_jobs(site.db_url, queue, ["p.a"])
    headers = {**HTML, "Cookie": cookie}
    page = get(site.write.url + f"/queues/{queue}", headers=headers).body
    assert f'action="/queues/{queue}/pause"' in page and 'data-action="pause"' in page
    for forged in ({}, {"csrf": "forged-token-value"}):
        answer = post(site.write.url + f"/queues/{queue}/pause", form=forged, headers=headers)
        assert answer.status == 403 and "CSRF" in answer.body
        assert not answer.header("location")
    assert not seed.is_paused(site.db_url, queue)
    done = post(site.write.url + f"/queues/{queue}/pause",
                form={"csrf": csrf, "next": f"/queues/{queue}"}, headers=headers)
    assert done.status == 303 and done.header("location") == f"/queues/{queue}"
    assert seed.is_paused(site.db_url, queue)
    headers = {**HTML, "Cookie": _cookie(done)}  # the session now carries the note
    page = get(site.write.url + f"/queues/{queue}", headers=headers).body
    assert f"paused queue {queue}" in page and 'data-action="resume"' in page
    done = post(site.write.url + f"/queues/{queue}/resume",
                form={"csrf": csrf, "next": "/"}, headers=headers)
    assert done.status == 303 and not seed.is_paused(site.db_url, queue)


def test_pause_and_resume_are_refused_without_the_token_and_change_nothing(site: Site) -> None:
    running, held = seed.unique("running"), seed.unique("held")
    seed.push_jobs(site.db_url, running, ["p.a"])
    control.pause(site.db_url, held)  # resume must leave it paused
    before = seed.paused_queues(site.db_url)
    wrong = [{}, HTML, bearer("not-the-token-at-all"), {"Authorization": f"Basic {TOKEN}"}]
    for path in _pause_paths(running) + _pause_paths(held):
        for headers in wrong:
            answer = post(site.write.url + path, form={"csrf": "x"}, headers=headers)
            assert answer.status == 401, (path, headers, answer.status)
            assert not answer.header("location")
        for headers in ({}, HTML, bearer(TOKEN)):
            answer = post(site.readonly.url + path, form={}, headers=headers)
            assert answer.status == 403 and "read-only" in answer.body, (path, headers)
            assert not answer.header("location")
    assert seed.paused_queues(site.db_url) == before
    assert held in before and running not in before
    page = get(site.readonly.url + f"/queues/{held}", headers=HTML).body
    assert "badge paused" in page and "data-action=" not in page  # no button to press
    assert "data-action=" not in get(site.readonly.url + "/", headers=HTML).body
    control.resume(site.db_url, held)


def test_pausing_an_invalid_queue_name_is_named_and_changes_nothing(site: Site) -> None:
    before = seed.paused_queues(site.db_url)
    for name, got in [("bad%20queue", "'bad queue'"), ("q" * 201, "a 201-byte string"),
                      ("%C3%A9t%C3%A9", "'été'")]:
        for action in ("pause", "resume"):
            answer = post(site.write.url + f"/queues/{name}/{action}", form={},
                          headers=bearer(TOKEN))
            assert answer.status == 400, (name, action, answer.body)
            error = orjson.loads(answer.body)["error"]
            assert error.startswith("queue name must be 1-200 characters"), error
            assert f"(got {got})" in error, error
    assert seed.paused_queues(site.db_url) == before


def test_ready_and_delayed_jobs_page_by_priority_then_due_time(site: Site) -> None:
    """The order of the claim index, (priority, available_at, id), across page breaks."""
    queue = seed.unique("urgent")
    priorities = [(i * 7) % 10 for i in range(60)]
    for state, delay in (("ready", 0.0), ("delayed", 3600.0)):
        ids = seed.push_jobs(site.db_url, queue, ["p.a"] * 60, delay=delay,
                             priorities=priorities)
        expected = [i for _, _, i in sorted(zip(priorities, range(60), ids, strict=True))]
        seen: list[str] = []
        shown: list[int] = []
        path: str | None = f"/queues/{queue}?state={state}"
        while path is not None:
            body = get(site.readonly.url + path, headers=HTML).body
            seen += re.findall(r'<td class="mono"><a href="/jobs/([0-9a-f-]{36})">', body)
            shown += [int(p) for p in re.findall(r"<td class=\"num\" data-priority>(\d)<", body)]
            found = re.search(r'<a rel="next" href="([^"]+)">', body)
            path = found.group(1).replace("&amp;", "&") if found else None
        assert seen == expected, state
        assert shown == sorted(priorities), state

    def counted() -> object:
        return orjson.loads(get(site.readonly.url + "/api/status").body)["queues"].get(queue)

    # Counted one claim-index range per priority: every priority's jobs are in the count.
    # (The overview caches its counts for a second: a read made while the delayed jobs
    # were being pushed may still be served, so wait for a read made after them.)
    expected_counts = {"ready": 60, "delayed": 60, "reserved": 0, "dead": 0}
    wait_until(lambda: counted() == expected_counts, what="the overview's next read")
    assert counted() == expected_counts


def test_a_page_cursor_carries_the_priority_and_older_links_mean_priority_0() -> None:
    assert Cursor.decode(Cursor(1_796_000_000_000, 42, 7).encode()) == Cursor(
        1_796_000_000_000, 42, 7)
    assert Cursor(5, 1, 3).encode() == "3:5.1"
    assert Cursor.decode("5.1") == Cursor(5, 1, 0)  # a link made before priorities
    for bad in ("10:5.1", "-1:5.1", "a:5.1", ":5.1", "1:2:3.4", "3:5", "3:5.x"):
        with pytest.raises(ValueError, match="is not a page cursor"):
            Cursor.decode(bad)
