"""Workflows under the least-privilege roles of ``ops/sql/*-grants.sql``, on PostgreSQL
and MariaDB: the app records one, the relay hands its root off, the worker runs it (its
acknowledgements make dependents due, a dead node skips its dependents, a clean-up node
runs, ctx.results reads the results), and the operator shows, retries, cancels and
prunes. No role needs more than the grants files give it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from structlog.testing import capture_logs

from outbox import Job, Registry, Relay, Workflow, record
from outbox.cli import main
from outbox.db.connection import Database
from outbox.queue import JobContext, Worker, WorkerConfig
from outbox.workflows import get
from tests.fixtures import databases as backends
from tests.ops.grants import SERVER_BACKENDS, GrantedDatabase

registry = Registry()
FAIL = {"on": True}
Q = "grants_wf"


@registry.job("gwf.step")
def step(payload: Any, ctx: JobContext) -> Any:
    return {"n": payload["n"], "deps": sorted(k for k in ctx.results if len(k) < 10)}


@registry.job("gwf.flaky", max_attempts=1)
def flaky(payload: Any, ctx: JobContext) -> Any:
    if FAIL["on"]:
        raise RuntimeError("not yet")
    return 1


@pytest.fixture(params=SERVER_BACKENDS)
def granted(request: pytest.FixtureRequest) -> Iterator[GrantedDatabase]:
    g = GrantedDatabase(str(request.param))
    yield g
    g.close()


def _cli(g: GrantedDatabase, *args: str) -> str:
    result = CliRunner().invoke(main, ["--database-url", g.url("operator"), *args])
    assert result.exit_code == 0, result.output
    return result.output


def _work(g: GrantedDatabase) -> None:
    with Relay(Database(g.url("relay"))) as relay:
        relay.run_once()
    config = WorkerConfig(queues={Q: 4}, stop_when_empty=True, sleep=0.05, listen=False)
    with capture_logs() as logs:
        Worker(Database(g.url("worker")), registry, config).run()
    assert not [e for e in logs if e["event"] == "worker.database_error"], logs


def test_every_role_runs_its_part_of_a_workflow(granted: GrantedDatabase) -> None:
    g = granted
    FAIL["on"] = True
    wf = Workflow("grants")
    a = wf.add(Job("gwf.step", {"n": "a"}, queue=Q), name="a")
    bad = wf.add(Job("gwf.flaky", queue=Q), name="bad", after=[a])
    wf.add(Job("gwf.step", {"n": "c"}, queue=Q), name="c", after=[bad])
    wf.add(Job("gwf.step", {"n": "d"}, queue=Q), name="d", after=[a])
    wf.add(Job("gwf.step", {"n": "e"}, queue=Q), name="e", after=[bad], on_failure="run")
    conn = backends.raw_connect(g.url("app"))
    try:
        wf_id = record(conn, "grants:wf:1", wf)
        assert record(conn, "grants:wf:1", wf) == wf_id  # the replay, as the app
        conn.commit()
    finally:
        conn.close()
    _work(g)
    shown = get(Database(g.url("operator")), wf_id)
    assert shown is not None
    assert {n.name: n.state for n in shown.nodes} == {
        "a": "succeeded", "bad": "dead", "c": "skipped", "d": "succeeded", "e": "succeeded"}
    assert "DependencyFailed" in _cli(g, "workflow", "show", wf_id)
    FAIL["on"] = False
    _cli(g, "queue", "retry", shown.node("bad").node_id)
    _work(g)
    done = get(Database(g.url("operator")), wf_id)
    assert done is not None and done.state == "succeeded"
    other = Workflow("grants-cancel")
    other.add(Job("gwf.step", {"n": "x"}, queue=Q), name="x")
    conn = backends.raw_connect(g.url("app"))
    try:
        other_id = record(conn, "grants:wf:2", other)
        conn.commit()
    finally:
        conn.close()
    assert "cancelled workflow" in _cli(g, "workflow", "cancel", other_id)
    assert "finished workflows" in _cli(g, "prune", "0")
    assert get(Database(g.url("operator")), wf_id) is None
