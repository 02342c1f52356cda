"""The site's examples of periodic jobs, events and testing, run as shipped."""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine

from outbox import Registry
from outbox.db.connection import Connection
from outbox.testing import Clock, run_pending
from tests.docs.pages import ROOT, code
from tests.fixtures.databases import sqlalchemy_url

PERIODIC = "how-to/periodic-jobs.md"
TESTING = "how-to/testing.md"


def test_the_periodic_jobs_example_declares_and_runs(app_conn: Any) -> None:
    (example,) = code(PERIODIC, heading="Periodic jobs")
    ns: dict[str, Any] = {}
    exec(example, ns)
    registry: Registry = ns["registry"]
    assert [e.name for e in registry.schedules] == ["reports.refresh", "billing.nightly"]
    clock = Clock()
    clock.advance(3600)
    report = run_pending(app_conn, registry, clock=clock)
    assert [r.job_name for r in report.ran] == ["reports.refresh"] * 12


def test_the_events_example_records_one_intent_per_listener(db_url: str, conn: Connection) -> None:
    (example,) = code(PERIODIC, heading="Events")
    engine = create_engine(sqlalchemy_url(db_url))

    def send_welcome(payload: Any, ctx: Any) -> None: ...

    def sync_crm(payload: Any, ctx: Any) -> None: ...

    ns: dict[str, Any] = {
        "registry": Registry(),
        "send_welcome": send_welcome,
        "sync_crm": sync_crm,
        "engine": engine,
        "create_user": lambda conn, email: 7,
        "email": "ada@example.com",
    }
    try:
        exec(example, ns)
    finally:
        engine.dispose()
    rows = conn.execute_sql("SELECT job_name, queue FROM outbox_messages")
    # emit() without registry= uses every listener this process declared: other tests'
    # too; the example's two are there once each.
    for expected in (("user.registered.send_welcome", "mail"), ("crm.sync", "default")):
        assert [tuple(r) for r in rows].count(expected) == 1


def test_the_testing_example_is_the_sample_apps_suite() -> None:
    sample = ROOT / "examples" / "sample_app"
    ini, example = (
        code(TESTING, "ini")[0],
        code(TESTING)[0],
    )
    assert ini.splitlines()[-1] in (sample / "pytest.ini").read_text()
    tests = (sample / "test_shop.py").read_text()
    for function in example.strip().split("\n\n\n"):
        assert function in tests  # verbatim: CI runs what the page shows
