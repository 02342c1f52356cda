"""``outbox.testing.run_pending`` runs a workflow in dependency order on the test's own
connection, with the worker's policy and steps: results passed along, DependencyFailed
dead letters, on_failure="run"."""

from __future__ import annotations

from typing import Any

from outbox import Job, Registry, Workflow, record
from outbox.db.connection import Connection
from outbox.queue import JobContext
from outbox.testing import run_pending
from outbox.workflows import get
from tests.fixtures.factories import count_rows

registry = Registry()
ORDER: list[str] = []


@registry.job("tm.step")
def step(payload: Any, ctx: JobContext) -> Any:
    ORDER.append(payload["n"])
    return {"n": payload["n"], "deps": sorted(k for k in ctx.results if len(k) < 10)}


@registry.job("tm.fails", max_attempts=1)
def fails(payload: Any, ctx: JobContext) -> None:
    ORDER.append(payload["n"])
    raise RuntimeError("no")


def test_run_pending_runs_a_workflow_in_dependency_order(conn: Connection) -> None:
    ORDER.clear()
    wf = Workflow("tm")
    a = wf.add(Job("tm.step", {"n": "a"}), name="a")
    b = wf.add(Job("tm.step", {"n": "b"}), name="b", after=[a])
    bad = wf.add(Job("tm.fails", {"n": "bad"}), name="bad", after=[a])
    wf.add(Job("tm.step", {"n": "d"}), name="d", after=[b, bad])
    wf.add(Job("tm.step", {"n": "clean"}), name="clean", after=[b, bad], on_failure="run")

    def body(c: Connection) -> tuple[str, Any]:
        wf_id = record(c.raw, "tm:1", wf)
        return wf_id, run_pending(c.raw, registry)

    wf_id, report = conn.transact(body, operation="test")
    assert ORDER[0] == "a" and ORDER[-1] == "clean" and sorted(ORDER) == ["a", "b", "bad", "clean"]
    assert report.done == 3
    shown = get(conn, wf_id)
    assert shown is not None
    assert {n.name: n.state for n in shown.nodes} == {
        "a": "succeeded", "b": "succeeded", "bad": "dead", "d": "skipped", "clean": "succeeded"}
    assert count_rows(conn, "outbox_failed_jobs", "exception_class = 'DependencyFailed'") == 1
