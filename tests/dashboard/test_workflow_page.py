"""The dashboard's workflow pages, on a real ``outbox dashboard`` process per backend (a
database of their own, not the shared seeded site): the list, one workflow's nodes and
their states, a clear 404 and 400, and never a payload or an exception message."""

from __future__ import annotations

from pathlib import Path

from outbox import Job, Relay, Workflow, record
from outbox.db.connection import Database
from outbox.queue import Worker, WorkerConfig
from tests.conformance.test_workflows import registry
from tests.dashboard.client import HTML, get
from tests.dashboard.conftest import start_server

SECRET = "payload-secret-7f3a"


def test_the_workflow_pages_list_the_nodes_and_their_states(
    database: Database, db_url: str, tmp_path: Path
) -> None:
    wf = Workflow("order:42:fulfil")
    a = wf.add(Job("wf.step", {"n": "a", "s": SECRET}), name="charge")
    bad = wf.add(Job("wf.fails", {"n": SECRET}), name="reserve", after=[a])
    wf.add(Job("wf.step", {"n": "c"}), name="ship", after=[bad])
    wf.add(Job("wf.step", {"n": "d"}), name="notify", after=[a])
    with database.connect() as c:
        wf_id = c.transact(lambda t: record(t.raw, "dash:1", wf), operation="test")
    with Relay(database) as relay:
        relay.run_once()
    with Worker(database, registry, WorkerConfig(stop_when_empty=True, sleep=0.02)) as w:
        w.run()
    server = start_server(db_url, tmp_path / "dash.log")
    try:
        listing = get(server.url + "/workflows", headers=HTML)
        assert listing.status == 200
        assert wf_id in listing.body and "order:42:fulfil" in listing.body
        assert "4 / 4" in listing.body
        page = get(server.url + f"/workflows/{wf_id}", headers=HTML)
        assert page.status == 200
        for name, state in (("charge", "succeeded"), ("reserve", "dead"), ("ship", "skipped"),
                            ("notify", "succeeded")):
            assert f">{name}</a>" in page.body and f'data-state="{state}"' in page.body
        assert "DependencyFailed" in page.body and "LookupError" in page.body
        assert SECRET not in page.body and SECRET not in listing.body
        overview = get(server.url + "/", headers=HTML)
        assert 'href="/workflows"' in overview.body or "/workflows" in overview.body
        missing = get(server.url + "/workflows/01890000-0000-8000-8000-000000000000",
                      headers=HTML)
        assert missing.status == 404 and "no workflow" in missing.body
        bad_id = get(server.url + "/workflows/nope", headers=HTML)
        assert bad_id.status == 400
    finally:
        server.stop()
