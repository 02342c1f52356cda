"""The workflows page (``docs/how-to/workflows.md``) and the README's Workflows section,
run as shipped: each block's text on a migrated SQLite database, handed off by a real
``Relay`` and run by a real ``Worker``, and the outcome checked. ``outbox workflow show``
is compared with the page's output, ids and times aside."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from outbox import (
    Backoff,
    Database,
    Job,
    Registry,
    Relay,
    Worker,
    WorkerConfig,
    Workflow,
    record,
    workflows,
)
from outbox.cli import main
from outbox.db.migrate import migrate
from outbox.errors import PermanentFailure
from outbox.results import get as get_result
from tests.docs.pages import DOCS, blocks_of, code

PAGE = "how-to/workflows.md"


def _database(tmp_path: Path) -> tuple[str, Database]:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    database = Database(url)
    with database.connect() as conn:
        migrate(conn)
    return url, database


def _run(database: Database, registry: Registry, workflow_id: str) -> workflows.WorkflowState:
    """Relay and drain until the workflow has no node waiting, due or running."""
    for _ in range(50):
        with Relay(database) as relay:
            relay.run_once()
        config = WorkerConfig(stop_when_empty=True, sleep=0.01, concurrency=4)
        with Worker(database, registry, config) as worker:
            worker.run()
        state = workflows.get(database, workflow_id)
        assert state is not None
        if state.state != "running":
            return state
    raise AssertionError("the workflow did not finish")


def _record_the_order(url: str, ns: dict[str, Any]) -> str:
    """The page's first block, on a SQLAlchemy engine with an ``orders`` table."""
    engine = sa.create_engine(url)
    orders = sa.Table("orders", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True),
                      sa.Column("state", sa.String(20)))
    orders.create(engine)
    with engine.begin() as conn:
        conn.execute(orders.insert().values(id=42, state="new"))
    ns.update(engine=engine, orders=orders, update=sa.update)
    try:
        exec(code(PAGE, heading="Record a workflow")[0], ns)
        with engine.connect() as conn:
            assert conn.execute(sa.select(orders.c.state)).scalar_one() == "paid"
    finally:
        engine.dispose()
    return str(ns["workflow_id"])


def test_the_order_workflow_records_and_ship_reads_its_dependencies_results(
    tmp_path: Path,
) -> None:
    url, database = _database(tmp_path)
    handlers: dict[str, Any] = {}
    exec(code(PAGE, heading="Read the dependencies' results")[0], handlers)
    registry: Registry = handlers["registry"]
    assert sorted(registry) == ["orders.charge", "orders.ship", "stock.reserve"]

    workflow_id = _record_the_order(url, {})
    state = workflows.get(database, workflow_id)
    assert state is not None
    assert {n.name: n.state for n in state.nodes} == {
        "orders.charge": "due", "stock.reserve": "due", "orders.ship": "waiting"}

    done = _run(database, registry, workflow_id)
    assert done.state == "succeeded"
    shipped = get_result(database, done.node("orders.ship").node_id)
    assert shipped is not None and shipped.return_value == {"label": "R-42 from A7"}

    # The same graph under the same key: the same workflow, nothing written.
    with sqlite3.connect(tmp_path / "app.db") as conn:
        again = record(conn, "order:42:fulfil", _order_graph())
    assert again == workflow_id


def _order_graph() -> Workflow:
    ns: dict[str, Any] = {}
    source = code(PAGE, heading="Record a workflow")[0]
    exec(source.split("\nwith ")[0], ns)  # the graph, without the transaction
    return ns["wf"]  # type: ignore[no-any-return]


def _fan_registry(seen: dict[str, Any]) -> Registry:
    registry = Registry()

    @registry.job("report.split")
    def split(payload: Any, ctx: Any) -> Any:
        return {"month": payload["month"]}

    @registry.job("report.part")
    def part(payload: Any, ctx: Any) -> Any:
        assert ctx.results["split"] == {"month": "2026-12"}
        return {"shard": payload["shard"]}

    @registry.job("report.merge")
    def merge(payload: Any, ctx: Any) -> Any:
        seen["merges"] = seen.get("merges", 0) + 1
        seen["parts"] = sorted(ctx.results[f"part-{i}"]["shard"] for i in range(100))
        return None

    return registry


def _fan_out_and_in(tmp_path: Path, block: str) -> None:
    _url, database = _database(tmp_path)
    seen: dict[str, Any] = {}
    conn = sqlite3.connect(tmp_path / "app.db")
    ns: dict[str, Any] = {"conn": conn, "Job": Job, "Workflow": Workflow, "record": record}
    try:
        exec(block, ns)
        conn.commit()
        (workflow_id,) = conn.execute("SELECT workflow_id FROM outbox_workflows").fetchone()
    finally:
        conn.close()
    done = _run(database, _fan_registry(seen), workflow_id)
    assert done.state == "succeeded" and len(done.nodes) == 102
    assert seen == {"merges": 1, "parts": list(range(100))}


def test_the_fan_out_and_fan_in_example_runs_merge_once_after_every_part(
    tmp_path: Path,
) -> None:
    _fan_out_and_in(tmp_path, code(PAGE, heading="Fan-out and fan-in")[0])


def test_the_readmes_workflow_fans_out_and_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's block as printed, in a folder whose ``shop.db`` the README's
    ``outbox migrate`` made: it records and commits the graph itself."""
    block = code("README.md", heading="Workflows")[0]
    assert "after=[split]" in block and "after=parts" in block  # one → N, then N → one
    database = Database(f"sqlite:///{tmp_path / 'shop.db'}")
    with database.connect() as conn:
        migrate(conn)
    monkeypatch.chdir(tmp_path)
    exec(block, {"__name__": "__main__"})
    with sqlite3.connect(tmp_path / "shop.db") as conn:
        (workflow_id,) = conn.execute("SELECT workflow_id FROM outbox_workflows").fetchone()
    conn.close()
    seen: dict[str, Any] = {}
    done = _run(database, _fan_registry(seen), workflow_id)
    assert done.state == "succeeded" and len(done.nodes) == 102
    assert seen == {"merges": 1, "parts": list(range(100))}


def test_the_clean_up_node_runs_after_a_failure_and_sees_what_failed(tmp_path: Path) -> None:
    _url, database = _database(tmp_path)
    seen: dict[str, Any] = {}
    registry = Registry()

    @registry.job("files.upload")
    def upload(payload: Any, ctx: Any) -> Any:
        return {"file": payload["file"]}

    @registry.job("files.publish")
    def publish(payload: Any, ctx: Any) -> Any:
        raise PermanentFailure("the CDN said no")

    @registry.job("files.cleanup")
    def cleanup(payload: Any, ctx: Any) -> Any:
        seen.update(results=sorted(ctx.results), failed=ctx.results.failed)

    ns: dict[str, Any] = {"Job": Job, "Workflow": Workflow}
    exec(code(PAGE, heading="When a node fails")[0], ns)
    with sqlite3.connect(tmp_path / "app.db") as conn:
        workflow_id = record(conn, "file:7:publish", ns["wf"])
    done = _run(database, registry, workflow_id)
    assert {n.name: n.state for n in done.nodes} == {
        "upload": "succeeded", "publish": "dead", "cleanup": "succeeded"}
    assert "upload" in seen["results"] and "publish" not in seen["results"]
    assert seen["failed"] == ["publish"]


_TIME = re.compile(r"\d\d:\d\d:\d\d\.\d\d\d")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def test_workflow_show_prints_what_the_page_shows(tmp_path: Path) -> None:
    """The order workflow with ``stock.reserve`` failing three times: the page's output,
    line for line, but for the workflow id and the times."""
    url, database = _database(tmp_path)
    registry = Registry()

    @registry.job("orders.charge")
    def charge(payload: Any, ctx: Any) -> Any:
        return {"receipt": "R-42"}

    @registry.job("stock.reserve", max_attempts=3, backoff=Backoff(base=0.01, cap=0.01))
    def reserve(payload: Any, ctx: Any) -> Any:
        raise RuntimeError("no stock for a secret order")

    @registry.job("orders.ship")
    def ship(payload: Any, ctx: Any) -> Any:
        raise AssertionError("ship must not run")

    workflow_id = _record_the_order(url, {})
    status = CliRunner().invoke(main, ["--database-url", url, "status"], prog_name="outbox")
    assert status.exit_code == 0, status.output
    line = "workflows: 1 running, 1 node waits for a dependency (in no queue until due)"
    assert line in status.output.splitlines() and f"`{line}`" in " ".join(
        (DOCS / PAGE).read_text().split()
    )  # the line as the page quotes it
    assert _run(database, registry, workflow_id).state == "failed"

    (block,) = [b for b in blocks_of(PAGE) if b.lang == "console"]
    command, *expected = block.body.rstrip("\n").splitlines()
    shown_id = _UUID.search(command)
    assert command.startswith("$ outbox workflow show ") and shown_id is not None
    result = CliRunner().invoke(
        main, ["--database-url", url, "workflow", "show", workflow_id], prog_name="outbox"
    )
    assert result.exit_code == 0, result.output
    assert "secret" not in result.output

    def same(text: str) -> str:
        # (the CLI pads its last column with spaces)
        return _TIME.sub("HH:MM:SS.mmm", _UUID.sub("ID", text)).rstrip()

    assert [same(line) for line in result.output.rstrip("\n").splitlines()] == [
        same(line) for line in expected
    ]
    missing = CliRunner().invoke(
        main, ["--database-url", url, "workflow", "show", shown_id[0]], prog_name="outbox"
    )
    assert missing.exit_code == 1  # the page's id names no workflow here
    for command in ("show", "cancel"):
        malformed = CliRunner().invoke(
            main, ["--database-url", url, "workflow", command, "order:42"], prog_name="outbox"
        )
        assert malformed.exit_code == 2, malformed.output
    cancelled = CliRunner().invoke(
        main, ["--database-url", url, "workflow", "cancel", shown_id[0]], prog_name="outbox"
    )
    assert cancelled.exit_code == 1
