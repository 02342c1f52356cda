"""Workflows (``outbox.workflows``) on every backend, through the real relay and worker:
recorded in one transaction, nodes due only when their dependencies succeeded (made due
in the acknowledgement's transaction), DependencyFailed dead letters, on_failure="run",
a retry of the failed node, replays and conflicts, validation that writes nothing,
cancel, show and prune. The racing processes are in tests/reliability."""

from __future__ import annotations

import threading
from typing import Any

import orjson
import pytest

from outbox import Job, Registry, Relay, Workflow, record
from outbox.db.connection import Connection, Database
from outbox.errors import IdempotencyConflict, InvalidKey
from outbox.queue import JobContext, Worker, WorkerConfig, push
from outbox.queue import admin as queue_admin
from outbox.queue.admin import retry, retry_all
from outbox.status import status
from outbox.workflows import MAX_NODES, InvalidWorkflow, cancel, get, prune
from tests.fixtures.factories import count_rows
from tests.fixtures.statements import Counting

registry = Registry()
_lock = threading.Lock()
LEDGER: list[tuple[str, str, dict[str, Any]]] = []  # (event, node, results seen)
FLAKY = {"fail": True}


def _seen(ctx: JobContext, payload: Any) -> dict[str, Any]:
    with _lock:
        LEDGER.append(("start", payload["n"], dict(ctx.results)))
    return {"n": payload["n"], "got": sorted(ctx.results)}


@registry.job("wf.step")
def step(payload: Any, ctx: JobContext) -> Any:
    return _seen(ctx, payload)


@registry.job("wf.fails", max_attempts=1)
def fails(payload: Any, ctx: JobContext) -> None:
    _seen(ctx, payload)
    raise LookupError(f"secret {payload['n']} not found")


@registry.job("wf.flaky", max_attempts=1)
def flaky(payload: Any, ctx: JobContext) -> Any:
    out = _seen(ctx, payload)
    if FLAKY["fail"]:
        raise RuntimeError("not yet")
    return out


@registry.job("wf.cleanup")
def cleanup(payload: Any, ctx: JobContext) -> Any:
    _seen(ctx, payload)
    return {"failed": ctx.results.failed}  # type: ignore[attr-defined]


@registry.job("wf.tx", transactional=True)
def in_tx(payload: Any, ctx: JobContext) -> Any:
    return _seen(ctx, payload)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    LEDGER.clear()
    FLAKY["fail"] = True


def _record(database: Database, key: str, wf: Workflow) -> str:
    with database.connect() as c:
        return c.transact(lambda t: record(t.raw, key, wf), operation="test")


def _run(database: Database) -> None:
    """Relay, then drain with a real worker until nothing is due."""
    with Relay(database) as relay:
        relay.run_once()
    with Worker(database, registry, WorkerConfig(stop_when_empty=True, sleep=0.02,
                                                  concurrency=4)) as w:
        w.run()


def _j(name: str, n: str) -> Job:
    return Job(name, {"n": n})


def _starts() -> list[str]:
    return [n for event, n, _ in LEDGER if event == "start"]


def _diamond() -> Workflow:
    wf = Workflow("order:42:fulfil")
    a = wf.add(_j("wf.step", "a"), name="a")
    b = wf.add(_j("wf.step", "b"), name="b", after=[a])
    c = wf.add(_j("wf.tx", "c"), name="c", after=[a])
    wf.add(_j("wf.step", "d"), name="d", after=[b, c])
    return wf


def test_a_diamond_runs_in_dependency_order_with_results_passed_along(
    database: Database, conn: Connection
) -> None:
    wf_id = _record(database, "order:42", _diamond())
    assert count_rows(conn, "outbox_messages") == 1  # only the root is an intent
    counted = status(conn)
    assert (counted.workflows.running, counted.workflows.waiting_nodes) == (1, 3)
    assert counted.as_dict()["workflows"] == {"running": 1, "waiting_nodes": 3}
    assert count_rows(conn, "outbox_jobs") == 0
    shown = get(conn, wf_id)
    assert shown is not None
    assert [(n.name, n.state) for n in shown.nodes] == [
        ("a", "due"), ("b", "waiting"), ("c", "waiting"), ("d", "waiting")]
    _run(database)
    starts = _starts()
    assert starts[0] == "a" and starts[-1] == "d" and sorted(starts) == ["a", "b", "c", "d"]
    by_node = {n: seen for _, n, seen in LEDGER}
    assert by_node["a"] == {}
    assert by_node["b"]["a"] == {"n": "a", "got": []}
    assert by_node["d"]["b"] == {"n": "b", "got": ["a"]}  # names only: ids look up
    assert by_node["d"]["c"]["n"] == "c" and list(by_node["d"]) == ["b", "c"]
    done = get(database, wf_id)
    assert done is not None and done.state == "succeeded"
    assert all(n.state == "succeeded" and n.attempts == 1 for n in done.nodes)
    assert all(n.started_at is not None and n.finished_at is not None for n in done.nodes)
    assert done.node("d").after == ["b", "c"]
    assert status(conn).workflows.running == 0 and "workflows" not in status(conn).as_dict()


def test_fan_out_and_fan_in_of_a_hundred(database: Database, conn: Connection) -> None:
    wf = Workflow("fan")
    root = wf.add(_j("wf.step", "root"), name="root")
    middle = [wf.add(_j("wf.step", f"m{i}"), name=f"m{i}", after=[root]) for i in range(100)]
    wf.add(_j("wf.step", "join"), name="join", after=middle)
    wf_id = _record(database, "fan:1", wf)
    _run(database)
    starts = _starts()
    assert len(starts) == 102 and len(set(starts)) == 102
    assert starts[0] == "root" and starts[-1] == "join"
    joined = next(seen for _, n, seen in LEDGER if n == "join")
    assert {joined[f"m{i}"]["n"] for i in range(100)} == {f"m{i}" for i in range(100)}
    shown = get(conn, wf_id)
    assert shown is not None and shown.state == "succeeded"
    assert count_rows(conn, "outbox_jobs") == 0


MERGED: list[tuple[dict[str, Any], Any]] = []  # (what the merge saw, its ctx.results)


@registry.job("wf.count")
def count(payload: Any, ctx: JobContext) -> Any:
    return {"count": payload["count"]}


@registry.job("wf.merge")
def merge(payload: Any, ctx: JobContext) -> Any:
    """A merge step written the obvious way: each dependency's count, summed once."""
    seen = {
        "sum": sum(r["count"] for r in ctx.results.values()),
        "len": len(ctx.results), "keys": list(ctx.results.keys()), "iter": list(ctx.results),
        "items": [k for k, _ in ctx.results.items()], "dict": len(dict(ctx.results)),
    }
    with _lock:
        MERGED.append((seen, ctx.results))
    return seen["sum"]


def test_a_forty_wide_fan_in_sees_each_dependency_once_by_name(
    database: Database, conn: Connection
) -> None:
    """Forty unnamed nodes of one job name (named wf.count, wf.count:2 … wf.count:40)
    into one merge: iteration, len, keys, values and items see each dependency once, by
    its name; a lookup by node id still finds it. (They listed names and ids: 80 values,
    so the obvious sum doubled.)"""
    MERGED.clear()
    wf = Workflow("fan-in")
    parts = [wf.add(Job("wf.count", {"count": i + 1})) for i in range(40)]
    names = ["wf.count"] + [f"wf.count:{i}" for i in range(2, 41)]
    assert [p.name for p in parts] == names
    wf.add(Job("wf.merge", {}), name="merge", after=parts)
    wf_id = _record(database, "fan-in:1", wf)
    _run(database)
    ((seen, results),) = MERGED
    assert seen == {"sum": 820, "len": 40, "keys": sorted(names), "iter": sorted(names),
                    "items": sorted(names), "dict": 40}
    shown = get(conn, wf_id)
    assert shown is not None and shown.state == "succeeded"
    for node in (n for n in shown.nodes if n.name != "merge"):
        n = node.name.partition(":")[2] or "1"
        assert results[node.node_id] == results[node.name] == {"count": int(n)}
        assert node.node_id in results and results.get(node.node_id) is not None
    with pytest.raises(KeyError, match="not a succeeded dependency"):
        results[shown.node("merge").node_id]


def test_a_failing_middle_node_dead_letters_its_dependents_without_running_them(
    database: Database, conn: Connection
) -> None:
    wf = Workflow("fails")
    a = wf.add(_j("wf.step", "a"), name="a")
    b = wf.add(_j("wf.fails", "b"), name="b", after=[a])
    c = wf.add(_j("wf.step", "c"), name="c", after=[b])
    wf.add(_j("wf.step", "e"), name="e", after=[c])
    wf.add(_j("wf.step", "side"), name="side", after=[a])
    wf_id = _record(database, "fails:1", wf)
    _run(database)
    assert sorted(_starts()) == ["a", "b", "side"]
    shown = get(conn, wf_id)
    assert shown is not None and shown.state == "failed"
    states = {n.name: (n.state, n.error) for n in shown.nodes}
    assert states == {
        "a": ("succeeded", None), "b": ("dead", "LookupError"),
        "c": ("skipped", "DependencyFailed"), "e": ("skipped", "DependencyFailed"),
        "side": ("succeeded", None),
    }
    assert count_rows(conn, "outbox_failed_jobs", "exception_class = 'DependencyFailed'") == 2
    assert count_rows(conn, "outbox_failed_jobs", "attempts = 0") == 2


def test_on_failure_run_lets_a_clean_up_node_run_anyway(
    database: Database, conn: Connection
) -> None:
    wf = Workflow("cleanup")
    a = wf.add(_j("wf.step", "a"), name="a")
    b = wf.add(_j("wf.fails", "b"), name="b", after=[a])
    wf.add(_j("wf.cleanup", "clean"), name="clean", after=[a, b], on_failure="run")
    wf.add(_j("wf.step", "next"), name="next", after=[b])
    wf_id = _record(database, "cleanup:1", wf)
    _run(database)
    assert _starts() == ["a", "b", "clean"]
    seen = next(s for _, n, s in LEDGER if n == "clean")
    assert list(seen) != [] and "b" not in seen and seen["a"]["n"] == "a"
    shown = get(conn, wf_id)
    assert shown is not None
    assert {n.name: n.state for n in shown.nodes} == {
        "a": "succeeded", "b": "dead", "clean": "succeeded", "next": "skipped"}


def test_queue_retry_of_the_failed_node_puts_the_failed_branch_back_in_play(
    database: Database, conn: Connection
) -> None:
    wf = Workflow("retry")
    a = wf.add(_j("wf.flaky", "a"), name="a")
    b = wf.add(_j("wf.step", "b"), name="b", after=[a])
    wf.add(_j("wf.step", "c"), name="c", after=[b])
    wf.add(_j("wf.cleanup", "clean"), name="clean", after=[a], on_failure="run")
    wf_id = _record(database, "retry:1", wf)
    _run(database)
    assert sorted(_starts()) == ["a", "clean"]
    assert retry(conn, _node(conn, wf_id, "b")) == 0  # a skipped node waits for its cause
    LEDGER.clear()
    FLAKY["fail"] = False
    assert retry(conn, _node(conn, wf_id, "a")) == 1
    shown = get(conn, wf_id)
    assert shown is not None
    assert {n.name: n.state for n in shown.nodes} == {
        "a": "due", "b": "waiting", "c": "waiting", "clean": "succeeded"}
    assert count_rows(conn, "outbox_failed_jobs") == 0
    _run(database)
    assert _starts() == ["a", "b", "c"]
    done = get(conn, wf_id)
    assert done is not None and done.state == "succeeded"
    assert done.node("a").attempts == 1


def test_a_nodes_result_outlives_its_retention_while_its_workflow_is_stored(
    database: Database, conn: Connection
) -> None:
    """d waits for a (done) and f (dead, retried later): a's result is past its retention
    when prune runs, and stays, because d has not read it yet."""
    from outbox.results import prune as prune_results

    wf = Workflow("keep")
    a = wf.add(_j("wf.step", "a"), name="a")
    f = wf.add(_j("wf.flaky", "f"), name="f")
    wf.add(_j("wf.step", "d"), name="d", after=[a, f])
    wf_id = _record(database, "keep:1", wf)
    _run(database)
    kept = count_rows(conn, "outbox_job_results")
    assert kept >= 1
    with conn.transaction():
        conn.execute_sql("UPDATE outbox_job_results SET expires_at = 0")
    assert prune_results(conn) == 0
    assert count_rows(conn, "outbox_job_results") == kept
    FLAKY["fail"] = False
    LEDGER.clear()
    assert retry(conn, _node(conn, wf_id, "f")) == 1
    _run(database)
    (seen,) = [seen for _, n, seen in LEDGER if n == "d"]
    assert seen["a"] == {"n": "a", "got": []} and seen["f"] == {"n": "f", "got": []}
    assert prune(conn, 0) == 1  # the finished workflow, then its nodes' results
    assert prune_results(conn) >= 1  # a's, expired, goes with its workflow


def test_retry_all_requeues_the_failed_node_and_not_its_skipped_dependents(
    database: Database, conn: Connection
) -> None:
    wf = Workflow("retry-all")
    a = wf.add(_j("wf.flaky", "a"), name="a")
    wf.add(_j("wf.step", "b"), name="b", after=[a])
    wf_id = _record(database, "retry:2", wf)
    _run(database)
    FLAKY["fail"] = False
    assert retry_all(conn) == 1
    _run(database)
    shown = get(conn, wf_id)
    assert shown is not None and shown.state == "succeeded"


def test_retry_all_reaches_every_dead_letter_past_skipped_nodes(
    database: Database, conn: Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A skipped node is left in the dead letters by every batch of `retry --all` (it
    comes back with its failed node): it must not take a place in the batch, or a batch
    short of it reads as the last one (here batches of 2, one of them the skipped node:
    the three plain dead letters after it were never retried)."""
    monkeypatch.setattr(queue_admin, "RETRY_BATCH", 2)
    wf = Workflow("retry-past")
    a = wf.add(_j("wf.flaky", "a"), name="a")
    wf.add(_j("wf.step", "b"), name="b", after=[a])
    wf_id = _record(database, "retry:past", wf)
    _run(database)
    with database.connect() as c, c.transaction():
        for n in ("o1", "o2", "o3"):
            push(c.raw, Job("wf.flaky", {"n": n}))
    _run(database)
    assert count_rows(conn, "outbox_failed_jobs") == 5
    FLAKY["fail"] = False
    assert retry_all(conn) == 4  # a and the three plain ones; b comes back with a
    _run(database)
    shown = get(conn, wf_id)
    assert shown is not None and shown.state == "succeeded"
    assert count_rows(conn, "outbox_failed_jobs") == 0


def _node(conn: Connection, wf_id: str, name: str) -> str:
    shown = get(conn, wf_id)
    assert shown is not None
    return shown.node(name).node_id


def _table_counts(conn: Connection) -> dict[str, int]:
    tables = ("outbox_keys", "outbox_messages", "outbox_jobs", "outbox_workflows",
              "outbox_workflow_nodes", "outbox_workflow_edges")
    return {t: count_rows(conn, t) for t in tables}


def test_a_replayed_key_returns_the_same_workflow_and_writes_nothing(
    database: Database, conn: Connection
) -> None:
    first = _record(database, "order:7", _diamond())
    before = _table_counts(conn)
    assert _record(database, "order:7", _diamond()) == first
    assert _table_counts(conn) == before
    _run(database)
    assert _record(database, "order:7", _diamond()) == first  # also once it ran
    assert len(_starts()) == 4


def test_another_graph_under_the_same_key_is_a_conflict_and_writes_nothing(
    database: Database, conn: Connection
) -> None:
    first = _record(database, "order:8", _diamond())
    before = _table_counts(conn)
    other = _diamond()
    other.add(_j("wf.step", "extra"), name="extra", after=["d"])
    with pytest.raises(IdempotencyConflict) as caught:
        _record(database, "order:8", other)
    assert caught.value.args[0] == first or first in str(caught.value)
    assert _table_counts(conn) == before
    changed = Workflow("order:42:fulfil")
    changed.add(_j("wf.step", "a"), name="a", on_failure="run")
    with pytest.raises(IdempotencyConflict):
        _record(database, "order:8", changed)
    with database.connect() as c:  # a job under a workflow's key, and the reverse
        with pytest.raises(IdempotencyConflict):
            c.transact(lambda t: record(t.raw, "order:8", Job("wf.step")), operation="t")
        c.transact(lambda t: record(t.raw, "job:1", Job("wf.step")), operation="t")
    with pytest.raises(IdempotencyConflict):
        _record(database, "job:1", _diamond())


def _cycle() -> Workflow:
    wf = Workflow("cycle")
    wf.add(_j("wf.step", "a"), name="a", after=["c"])
    wf.add(_j("wf.step", "b"), name="b", after=["a"])
    wf.add(_j("wf.step", "c"), name="c", after=["b"])
    return wf


def _unknown() -> Workflow:
    wf = Workflow("unknown")
    wf.add(_j("wf.step", "a"), name="a", after=["nope"])
    return wf


def _bad_job() -> Workflow:
    wf = Workflow("bad")
    a = wf.add(_j("wf.step", "a"), name="a")
    wf.add(Job("wf.step", {"x": float("nan")}), name="b", after=[a])
    return wf


def _foreign() -> Workflow:
    other = Workflow("other")
    x = other.add(_j("wf.step", "x"), name="x")
    wf = Workflow("foreign")
    wf.add(_j("wf.step", "a"), name="a", after=[x])
    return wf


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (_cycle, "workflow 'cycle' has a cycle through node 'a'"),
        (_unknown, "workflow 'unknown', node 'a': dependency 'nope' is not a node of this "
                   "workflow"),
        (_bad_job, "workflow 'bad', node 'b': payload contains NaN or Infinity"),
        (_foreign, "workflow 'foreign', node 'a': dependency 'x' belongs to another workflow"),
        (lambda: Workflow("empty"), "workflow 'empty' has no nodes"),
    ],
)
def test_a_bad_graph_is_refused_before_anything_is_written(
    database: Database, conn: Connection, build: Any, message: str
) -> None:
    before = _table_counts(conn)
    with pytest.raises(InvalidWorkflow) as caught:
        _record(database, "bad:1", build())
    assert message in str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert _table_counts(conn) == before


def test_limits_are_checked_where_the_graph_is_built(database: Database, conn: Connection) -> None:
    wf = Workflow("big")
    for i in range(MAX_NODES):
        wf.add(_j("wf.step", str(i)), name=f"n{i}")
    with pytest.raises(InvalidWorkflow, match="at most 1,000 nodes"):
        wf.add(_j("wf.step", "one-more"))
    with pytest.raises(InvalidWorkflow, match="on_failure must be 'stop' or 'run'"):
        Workflow("x").add(_j("wf.step", "a"), on_failure="maybe")
    with pytest.raises(InvalidWorkflow, match="two nodes are named 'a'"):
        two = Workflow("x")
        two.add(_j("wf.step", "a"), name="a")
        two.add(_j("wf.step", "b"), name="a")
    with pytest.raises(InvalidWorkflow, match=r"expected an outbox\.Job"):
        Workflow("x").add("wf.step")  # type: ignore[arg-type]
    before = _table_counts(conn)
    with pytest.raises(InvalidKey):
        _record(database, "schedule:x", _diamond())
    assert _table_counts(conn) == before
    assert len(wf) == MAX_NODES
    wf_id = _record(database, "big:1", wf)  # 1,000 roots in four statements
    assert count_rows(conn, "outbox_messages") == MAX_NODES
    assert get(conn, wf_id) is not None


def test_default_names_follow_the_job_name(database: Database) -> None:
    wf = Workflow("names")
    assert wf.add(_j("wf.step", "1")).name == "wf.step"
    assert wf.add(_j("wf.step", "2")).name == "wf.step:2"
    assert wf.nodes == ["wf.step", "wf.step:2"]


def test_cancelling_a_workflow_cancels_every_node_not_finished(
    database: Database, conn: Connection
) -> None:
    wf_id = _record(database, "cancel:1", _diamond())
    with Relay(database) as relay:
        relay.run_once()
    assert cancel(conn, wf_id) == 1  # the root was due (a queued job)
    shown = get(conn, wf_id)
    assert shown is not None and shown.state == "cancelled"
    assert {n.state for n in shown.nodes} == {"dead", "skipped"}
    assert count_rows(conn, "outbox_jobs") == 0
    assert count_rows(conn, "outbox_failed_jobs", "exception_class = 'cancelled'") == 4
    _run(database)
    assert _starts() == []
    # A root still an intent is taken out of the outbox.
    other = _record(database, "cancel:2", _diamond())
    assert cancel(conn, other) == 1
    assert count_rows(conn, "outbox_messages") == 0
    assert cancel(conn, "01890000-0000-8000-8000-000000000000") is None


@pytest.mark.parametrize("how", ["remove", "clear"])
def test_an_operator_removing_a_nodes_job_ends_the_node_as_failed(
    database: Database, conn: Connection, how: str
) -> None:
    """`outbox queue remove` / `clear` of a due node's job: the node fails, as a dead
    letter would make it, and its dependents are skipped; the workflow used to stay
    running for ever, its node due with no job."""
    wf_id = _record(database, f"{how}:1", _diamond())
    with Relay(database) as relay:
        relay.run_once()
    root = _node(conn, wf_id, "a")
    if how == "remove":
        assert queue_admin.remove(conn, root) == 1
    else:
        assert queue_admin.clear(conn) == 1
    shown = get(conn, wf_id)
    assert shown is not None and shown.state == "failed"
    assert {n.name: n.state for n in shown.nodes} == {
        "a": "dead", "b": "skipped", "c": "skipped", "d": "skipped"}
    assert count_rows(conn, "outbox_failed_jobs", "exception_class = 'DependencyFailed'") == 3
    assert status(conn).workflows.running == 0


def test_prune_drops_finished_workflows_only(database: Database, conn: Connection) -> None:
    done = _record(database, "prune:1", _diamond())
    _run(database)
    waiting = _record(database, "prune:2", _diamond())
    assert prune(conn, 0) == 1
    assert get(conn, done) is None and get(conn, waiting) is not None
    assert count_rows(conn, "outbox_workflow_nodes") == 4
    assert count_rows(conn, "outbox_workflow_edges") == 4


def test_one_outbox_prune_drops_a_finished_workflow_and_then_its_key(
    database: Database, conn: Connection
) -> None:
    from click.testing import CliRunner

    from outbox.cli import main

    _record(database, "pruned:1", _diamond())
    _run(database)
    done = CliRunner().invoke(main, ["--database-url", database.url, "prune", "0"])
    assert done.exit_code == 0, done.output
    assert "pruned 1 finished workflows" in done.output
    assert count_rows(conn, "outbox_workflows") == 0
    assert count_rows(conn, "outbox_keys") == 0


def test_a_node_with_an_ordering_key_is_refused_and_nothing_is_written(
    database: Database, conn: Connection
) -> None:
    wf = Workflow("keyed")
    wf.add(Job("wf.step", {"n": "a"}, ordering_key="order:1"))
    refused = "node 'wf.step': a workflow's node cannot have an ordering_key"
    with pytest.raises(InvalidWorkflow, match=refused):
        _record(database, "keyed:1", wf)
    for table in ("outbox_keys", "outbox_messages", "outbox_workflows", "outbox_workflow_nodes"):
        assert count_rows(conn, table) == 0


def test_a_workflow_keeps_its_key_until_the_workflow_is_pruned(
    database: Database, conn: Connection
) -> None:
    """The key row names the workflow, not an intent: pruning keys must not end a
    stored workflow's deduplication, or a replay would record a second workflow."""
    from outbox.relay.admin import prune as prune_keys

    wf_id = _record(database, "keep:1", _diamond())
    _run(database)
    prune_keys(conn, 0)
    assert count_rows(conn, "outbox_keys") == 1
    assert _record(database, "keep:1", _diamond()) == wf_id
    assert count_rows(conn, "outbox_workflows") == 1
    assert prune(conn, 0) == 1
    prune_keys(conn, 0)
    assert count_rows(conn, "outbox_keys") == 0


def test_available_at_delays_the_roots_and_is_part_of_the_fingerprint(
    database: Database, conn: Connection
) -> None:
    import time

    later = time.time() + 3600
    with database.connect() as c:
        wf_id = c.transact(lambda t: record(t.raw, "later:1", _diamond(), available_at=later),
                           operation="test")
        again = c.transact(lambda t: record(t.raw, "later:1", _diamond(), available_at=later),
                           operation="test")
        assert again == wf_id
        with pytest.raises(IdempotencyConflict):
            c.transact(lambda t: record(t.raw, "later:1", _diamond()), operation="test")
    _run(database)
    assert _starts() == []  # handed off, not due for an hour
    assert count_rows(conn, "outbox_jobs") == 1


def test_a_leaf_acknowledged_releases_no_children_and_a_parent_does(
    database: Database, conn: Connection
) -> None:
    """A leaf's acknowledgement runs no release statements (it has none to release); its
    parent's does, and makes the child due: the shortcut keys on the real edges."""
    from outbox.db import workflows as steps
    from outbox.db.caller import drive

    wf = Workflow("order:7:leaf")
    root = wf.add(_j("wf.step", "root"), name="root")
    wf.add(_j("wf.step", "leaf"), name="leaf", after=[root])
    wf_id = _record(database, "wf-leaf", wf)
    with Relay(database) as relay:
        relay.run_once()
    before = get(database, wf_id)
    assert before is not None and before.node("leaf").state == "waiting"
    seen: dict[str, list[str]] = {}

    def ack(name: str) -> None:
        node_id = before.node(name).node_id

        def settle(t: Any) -> None:
            counting = Counting(t)
            drive(steps.succeeded(node_id), counting)  # type: ignore[arg-type]
            seen[name] = counting.names

        conn.transact(settle, operation="test")

    ack("root")
    assert get(database, wf_id).node("leaf").state == "due"  # type: ignore[union-attr]
    assert "workflow_children_count_down" in seen["root"]
    ack("leaf")
    assert seen["leaf"] == ["workflow_node_get", "workflow_node_succeeded"]
    assert get(database, wf_id).node("leaf").state == "succeeded"  # type: ignore[union-attr]


def test_get_and_cancel_take_an_applications_connection_in_its_transaction(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    """On the application's connection, ``cancel`` is part of the caller's transaction:
    a rollback takes it back, a commit keeps it."""
    wf_id = _record(database, "app:1", _diamond())
    assert cancel(app_conn, wf_id) == 1  # the root, still an intent
    shown = get(app_conn, wf_id)
    assert shown is not None and shown.state == "cancelled"
    app_conn.rollback()
    assert get(conn, wf_id).state == "running"  # type: ignore[union-attr]
    assert count_rows(conn, "outbox_messages") == 1
    assert cancel(app_conn, wf_id) == 1
    app_conn.commit()
    assert get(conn, wf_id).state == "cancelled"  # type: ignore[union-attr]
    assert count_rows(conn, "outbox_messages") == 0


@registry.job("wf.again", max_attempts=3)
def again(payload: Any, ctx: JobContext) -> None:
    raise TimeoutError(f"secret {payload['n']} timed out")


def _cli(database: Database, *args: str) -> Any:
    from click.testing import CliRunner

    from outbox.cli import main

    return CliRunner().invoke(main, ["--database-url", database.url, *args])


def test_show_gives_a_node_waiting_to_retry_its_retrys_due_time_and_last_error(
    database: Database, conn: Connection
) -> None:
    """A node whose first attempt failed and waits for its backoff: show gives the
    retry's due time (the queue row's, as `queue jobs` does) and the last error's class,
    not the time it first became due (issue 38, item 21)."""
    wf = Workflow("again")
    wf.add(_j("wf.again", "a"), name="a")
    wf_id = _record(database, "again:1", wf)
    _run(database)
    shown = get(conn, wf_id)
    assert shown is not None
    a = shown.node("a")
    ((due_ms, error),) = conn.execute_sql("SELECT available_at, last_error FROM outbox_jobs")
    assert (a.state, a.attempts, a.error) == ("due", 1, "TimeoutError") and error == a.error
    assert a.due_at is not None and int(a.due_at.timestamp() * 1000) == int(due_ms)
    assert a.started_at is None or a.due_at > a.started_at
    out = _cli(database, "workflow", "show", wf_id)
    assert out.exit_code == 0, out.output
    assert a.due_at.strftime("%H:%M:%S.%f")[:-3] in out.output and "TimeoutError" in out.output
    assert "secret" not in out.output
    as_json = _cli(database, "workflow", "show", "--json", wf_id)
    (node,) = orjson.loads(as_json.output)["nodes"]
    assert (node["error"], node["due_at"]) == ("TimeoutError", a.due_at.isoformat(
        timespec="milliseconds"))


def test_queue_retry_of_a_skipped_node_says_it_was_skipped_and_which_node_to_retry(
    database: Database, conn: Connection
) -> None:
    """`queue failed` lists a skipped node's DependencyFailed dead letter; `queue retry`
    of it requeues nothing (it comes back with its cause) and says so, naming the failed
    node two levels up and its id, instead of "no dead letter" (issue 38, item 12)."""
    wf = Workflow("skip-why")
    a = wf.add(_j("wf.fails", "a"), name="a")
    b = wf.add(_j("wf.step", "b"), name="b", after=[a])
    wf.add(_j("wf.step", "c"), name="c", after=[b])
    wf_id = _record(database, "skip-why:1", wf)
    _run(database)
    a_id, c_id = _node(conn, wf_id, "a"), _node(conn, wf_id, "c")
    assert c_id in _cli(database, "queue", "failed").output
    before = count_rows(conn, "outbox_failed_jobs")
    out = _cli(database, "queue", "retry", c_id)
    assert out.exit_code == 1
    assert out.output.strip().endswith(
        f"{c_id} is workflow node 'c', skipped because a dependency failed; it runs again "
        f"when that node is retried: 'a' (outbox queue retry {a_id})")
    assert "no dead letter" not in out.output and "secret" not in out.output
    assert count_rows(conn, "outbox_failed_jobs") == before == 3  # nothing requeued
    plain = _cli(database, "queue", "retry", "01a242de-8755-4480-aded-796f44b9085a")
    assert plain.exit_code == 1 and "no dead letter with message id" in plain.output


def test_queue_retry_of_a_node_skipped_by_cancel_says_there_is_nothing_to_retry(
    database: Database, conn: Connection
) -> None:
    wf_id = _record(database, "skip-why:2", _diamond())
    assert cancel(conn, wf_id) == 1
    d_id = _node(conn, wf_id, "d")
    out = _cli(database, "queue", "retry", d_id)
    assert out.exit_code == 1
    assert f"{d_id} is workflow node 'd', skipped when its workflow was cancelled" in out.output
