"""The dashboard in a real headless browser (Debian's Chromium via Playwright): every page
loads without a script or policy error, the buttons change the database and the page
shows it, read-only mode offers nothing, stored HTML stays text, and the overview updates
itself. Screenshots are saved for a person to look at.

On SQLite only: what a browser adds is the pages' scripts, forms and policies, the same
on every backend. What each button does to a database is tested on every backend below
it: the same actions over HTTP in ``tests/dashboard/test_http.py`` (retry, forget, bulk,
all, quarantined, pause/resume, paging) and the store's reads and writes in
``tests/conformance/test_dashboard_store.py``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.dashboard import seed
from tests.dashboard.conftest import TOKEN, Site

pytestmark = pytest.mark.parametrize("site", ["sqlite"], indirect=True)

XSS = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
WAIT_MS = 20_000  # an upper bound for a page to show a change, not a speed claim


def _watch_errors(page: Any) -> list[str]:
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return errors


def _sign_in(page: Any, site: Site, token: str = TOKEN) -> None:
    page.goto(site.write.url + "/login")
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")


@pytest.mark.slow
def test_every_page_loads_cleanly_and_is_saved(page: Any, site: Site, screenshots: Path) -> None:
    errors = _watch_errors(page)
    dead = seed.dead_letters(site.db_url, 2, message="card declined", queue="reports")
    quarantined = next(iter(site.seeded["quarantined"]))
    _sign_in(page, site)
    for name, path in [
        ("overview", "/"),
        ("queue", "/queues/billing"),
        ("queue-delayed", "/queues/billing?state=delayed"),
        ("job-dead", f"/jobs/{dead[0]}"),
        ("job-quarantined", f"/jobs/{quarantined}"),
        ("dead-letters", "/dead-letters"),
        ("quarantined", "/quarantined"),
        ("schedules", "/schedules"),
    ]:
        answer = page.goto(site.write.url + path)
        assert answer.status == 200, path
        expect(page.locator("h1")).to_be_visible()
        page.screenshot(path=str(screenshots / f"{site.backend}-{name}.png"), full_page=True)
    assert errors == []


def test_overview_shows_counts_chart_and_queues(page: Any, site: Site, screenshots: Path) -> None:
    page.goto(site.readonly.url + "/")
    expect(page.locator("#mode")).to_have_text("read-only")
    expect(page.locator("tr[data-queue=billing] [data-count=delayed]")).to_have_text("5")
    expect(page.locator("tr[data-queue=mail]")).to_be_visible()
    # The seed's workers ran 25 jobs of "search", retried 2 and dead-lettered 3 of "reports".
    for kind in ("succeeded", "retried", "dead"):
        assert page.locator(f"svg.chart rect.bar.{kind}").count() >= 1, kind
    titles = " ".join(page.locator("svg.chart title").all_text_contents())
    assert " succeeded, " in titles
    expect(page.locator("tr[data-queue=search] [data-count=done-hour]")).to_have_text("25")
    note = page.locator(".note", has_text="What this counts: jobs the workers settled")
    expect(note).to_be_visible()
    page.screenshot(path=str(screenshots / f"{site.backend}-overview-read-only.png"))


@pytest.mark.slow
def test_schedules_show_next_ticks_and_what_became_of_the_last_tick(
    page: Any, site: Site, screenshots: Path
) -> None:
    errors = _watch_errors(page)
    seed.schedule(site.db_url)  # a scheduler's look: each schedule's latest tick recorded
    page.goto(site.write.url + "/schedules")
    row = page.locator("tr[data-schedule='dash.every_minute']")
    expect(row.locator("[data-state]")).to_have_attribute("data-state", re.compile(
        "pending|queued"))  # queued once another test's relay run handed it off
    nexts = row.locator("[data-next-ticks]").inner_text().splitlines()
    assert len(nexts) == 3 and all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:00", t) for t in nexts)
    berlin = page.locator("tr[data-schedule='dash.nightly_berlin']")
    expect(berlin).to_contain_text("Europe/Berlin")
    expect(berlin.locator("[data-next-ticks]")).to_contain_text(re.compile(r" 0[12]:00:00"))
    seed.relay(site.db_url)
    seed.run_queue(site.db_url, "periodic")  # the every-minute job runs and succeeds
    page.reload()
    expect(row.locator("[data-state]")).to_have_text("left the queue")
    page.screenshot(path=str(screenshots / f"{site.backend}-schedules.png"), full_page=True)
    page.goto(site.readonly.url + "/schedules")  # started without --app: it says how
    expect(page.locator("#no-registry")).to_contain_text("--app MODULE:ATTR")
    assert errors == []


def test_the_overview_updates_itself(page: Any, site: Site) -> None:
    page.goto(site.readonly.url + "/")
    cell = page.locator("[data-metric=quarantined]")
    before = int(cell.inner_text().replace(",", ""))
    seed.quarantined(site.db_url, 2)
    expect(cell).to_have_text(f"{before + 2:,}", timeout=WAIT_MS)  # no reload in between
    expect(page.locator("#live-state")).to_contain_text("updated")


def test_retry_one_dead_letter_from_its_row(page: Any, site: Site) -> None:
    dead = seed.dead_letters(site.db_url, 1)[0]
    _sign_in(page, site)
    page.goto(site.write.url + "/dead-letters")
    page.locator(f"tr[data-id='{dead}'] button", has_text="Retry").click()
    expect(page.locator(".flash")).to_contain_text("requeued 1 of 1")
    expect(page.locator(f"tr[data-id='{dead}']")).to_have_count(0)
    assert seed.is_queued(site.db_url, dead) and not seed.is_dead(site.db_url, dead)


def test_forget_selected_dead_letters_in_bulk(page: Any, site: Site) -> None:
    kept, *gone = seed.dead_letters(site.db_url, 3)
    _sign_in(page, site)
    page.goto(site.write.url + "/dead-letters")
    for message_id in gone:
        page.check(f"tr[data-id='{message_id}'] input[name=id]")
    page.click("#forget-selected")  # its confirmation is accepted by the fixture
    expect(page.locator(".flash")).to_contain_text("forgot 2 of 2")
    for message_id in gone:
        expect(page.locator(f"tr[data-id='{message_id}']")).to_have_count(0)
        assert not seed.is_dead(site.db_url, message_id)
    expect(page.locator(f"tr[data-id='{kept}']")).to_have_count(1)
    assert seed.is_dead(site.db_url, kept)


def test_retry_all_dead_letters(page: Any, site: Site) -> None:
    dead = seed.dead_letters(site.db_url, 2)
    _sign_in(page, site)
    page.goto(site.write.url + "/dead-letters")
    page.click("#retry-all")
    expect(page.locator(".flash")).to_contain_text("requeued")
    expect(page.locator("p.empty")).to_have_text("No dead letters.")
    assert all(seed.is_queued(site.db_url, i) for i in dead)


def test_retry_quarantined_intents(page: Any, site: Site) -> None:
    good = seed.quarantined(site.db_url, 2)
    repaired, broken = list(good)
    seed.repair(site.db_url, repaired, good[repaired])
    _sign_in(page, site)
    page.goto(site.write.url + "/quarantined")
    page.check(f"tr[data-id='{repaired}'] input[name=id]")
    page.check(f"tr[data-id='{broken}'] input[name=id]")
    page.click("#retry-selected")
    flash = page.locator(".flash")
    expect(flash).to_contain_text("returned 1 of 2")
    expect(flash).to_contain_text("still does not verify")
    expect(page.locator(f"tr[data-id='{repaired}']")).to_have_count(0)
    expect(page.locator(f"tr[data-id='{broken}']")).to_have_count(1)
    assert seed.intent_state(site.db_url, repaired) == "pending"
    assert seed.intent_state(site.db_url, broken) == "failed"


def test_read_only_offers_no_action_and_refuses_a_forged_one(page: Any, site: Site) -> None:
    dead = seed.dead_letters(site.db_url, 1)[0]
    page.goto(site.readonly.url + "/dead-letters")
    expect(page.locator("#mode")).to_have_text("read-only")
    expect(page.locator("footer")).to_contain_text("read-only")
    expect(page.locator("button")).to_have_count(0)
    status = page.evaluate(
        """async (id) => (await fetch('/dead-letters/forget', {method: 'POST',
            headers: {'Content-Type': 'application/x-www-form-urlencoded'},
            body: 'one=' + id, redirect: 'manual'})).status""",
        dead,
    )
    assert status == 403
    assert seed.is_dead(site.db_url, dead)


def test_a_wrong_token_in_the_login_form_is_refused(page: Any, site: Site) -> None:
    _sign_in(page, site, token="definitely-not-the-token")
    expect(page.locator("p.error")).to_contain_text("not the dashboard's token")
    expect(page.locator("#mode")).to_have_text("read-only")
    page.goto(site.write.url + "/dead-letters")
    expect(page.locator("#retry-selected")).to_have_count(0)


def test_stored_html_in_an_exception_message_renders_as_text(
    page: Any, site: Site, screenshots: Path
) -> None:
    dead = seed.dead_letters(site.db_url, 1, message=XSS)[0]
    errors = _watch_errors(page)
    _sign_in(page, site)
    page.goto(site.write.url + f"/jobs/{dead}")
    expect(page.locator("#exception-message")).to_have_text(XSS)
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#exception-message img, #exception-message script").count() == 0
    page.screenshot(path=str(screenshots / f"{site.backend}-xss-as-text.png"), full_page=True)
    assert errors == []


def test_retry_a_quarantined_intent_from_its_job_page(page: Any, site: Site) -> None:
    good = seed.quarantined(site.db_url, 1)
    [(message_id, fingerprint)] = good.items()
    seed.repair(site.db_url, message_id, fingerprint)
    _sign_in(page, site)
    page.goto(site.write.url + f"/jobs/{message_id}")
    expect(page.locator("h2", has_text="Intent")).to_have_text("Intent · quarantined")
    page.click("#retry-intent")
    expect(page.locator(".flash")).to_contain_text("returned 1 of 1")
    expect(page.locator("h2", has_text="Intent")).to_have_text("Intent · pending")
    assert seed.intent_state(site.db_url, message_id) == "pending"


def test_pause_a_queue_from_the_overview_and_resume_it_from_its_page(
    page: Any, site: Site, screenshots: Path
) -> None:
    queue = seed.unique("pausable")
    seed.push_jobs(site.db_url, queue, ["p.a", "p.b"], priorities=[0, 3])
    errors = _watch_errors(page)
    _sign_in(page, site)
    row = page.locator(f"tr[data-queue='{queue}']")
    expect(row.locator("[data-state]")).to_have_text("running")
    row.locator("button[data-action=pause]").click()  # its confirmation is accepted
    expect(page.locator(".flash")).to_contain_text(f"paused queue {queue}")
    expect(row).to_have_attribute("data-paused", "yes")
    expect(row.locator(".badge.paused")).to_have_text("paused")
    assert seed.is_paused(site.db_url, queue)
    page.screenshot(path=str(screenshots / f"{site.backend}-overview-paused.png"), full_page=True)
    row.locator("a", has_text=queue).click()
    expect(page.locator("#queue-state .badge.paused")).to_be_visible()
    expect(page.locator("td[data-priority]")).to_have_text(["0", "3"])
    page.screenshot(path=str(screenshots / f"{site.backend}-queue-paused.png"), full_page=True)
    page.locator("button[data-action=resume]").click()
    expect(page.locator(".flash")).to_contain_text(f"resumed queue {queue}")
    expect(page.locator("#queue-state")).to_have_text("running")
    expect(page.locator("button[data-action=pause]")).to_be_visible()
    assert not seed.is_paused(site.db_url, queue)
    page.goto(site.readonly.url + f"/queues/{queue}")  # read-only: nothing to press
    expect(page.locator("button[data-action]")).to_have_count(0)
    assert errors == []
