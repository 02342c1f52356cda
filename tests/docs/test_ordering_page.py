"""The ordering page (``docs/how-to/ordering.md``) run as shipped: its blocks' text on a
migrated SQLite database, handed off by a real ``Relay`` and run by a real ``Worker``
with four threads, and the outcome checked: the order of the handler's starts and ends,
the ``outbox status`` lines the page prints (the dead letter's id aside), the unblocking
with ``outbox queue retry`` and ``forget``, a broker worker's one-line refusal of a key
held by a dead letter and a workflow's refusal of a keyed node. The Django block runs in
``tests/django/test_ordering.py``."""

from __future__ import annotations

import hashlib
import re
import sqlite3
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from outbox import Database, Job, Registry, Relay, Worker, WorkerConfig, Workflow, record
from outbox.cli import main
from outbox.db.migrate import migrate
from outbox.errors import PermanentFailure
from outbox.status import status
from outbox.workflows import InvalidWorkflow
from tests.docs.pages import blocks_of, code, text

PAGE = "how-to/ordering.md"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class _Crm:
    """The page's ``crm``: logs each call's start and end; fails ``paid`` for good while
    ``refuse_paid`` is set. Each call lasts a little, so two calls of a key running at
    once would interleave in the log."""

    def __init__(self, refuse_paid: bool = False) -> None:
        self.refuse_paid = refuse_paid
        self.log: list[str] = []
        self._lock = threading.Lock()

    def put_order(self, order_id: int, state: str) -> None:
        with self._lock:
            self.log.append(f"start {order_id} {state}")
        if state == "paid":
            time.sleep(0.1)  # the shipped job, were it claimable, would start meanwhile
            if self.refuse_paid:
                raise PermanentFailure("the CRM refused it")
        with self._lock:
            self.log.append(f"end {order_id} {state}")


def _database(tmp_path: Path) -> tuple[str, Database]:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    database = Database(url)
    with database.connect() as conn:
        migrate(conn)
    return url, database


def _record(url: str) -> None:
    """The page's first block, on a SQLAlchemy engine with an ``orders`` table."""
    engine = sa.create_engine(url)
    orders = sa.Table("orders", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True),
                      sa.Column("state", sa.String(20)))
    orders.create(engine)
    with engine.begin() as conn:
        conn.execute(orders.insert().values(id=42, state="new"))
    try:
        exec(code(PAGE, heading="Record jobs with a key")[0],
             {"engine": engine, "orders": orders, "update": sa.update})
        with engine.connect() as conn:
            assert conn.execute(sa.select(orders.c.state)).scalar_one() == "shipped"
    finally:
        engine.dispose()


def _registry(crm: _Crm) -> Registry:
    """The page's handler, registered as written."""
    ns: dict[str, Any] = {"registry": Registry(), "crm": crm}
    exec(code(PAGE, heading="Keep a key blocked after a dead letter")[0], ns)
    registry: Registry = ns["registry"]
    handler = registry.get("orders.sync")
    assert handler is not None and handler.dead_letter_holds_key
    return registry


def _relay_and_run(database: Database, registry: Registry) -> None:
    with Relay(database) as relay:
        relay.run_once()
    for _ in range(3):  # a turn given by an ack is claimed by the next round at the latest
        config = WorkerConfig(stop_when_empty=True, sleep=0.01, concurrency=4)
        with Worker(database, registry, config) as worker:
            worker.run()


def _text_block(heading: str) -> str:
    source = text(PAGE).split(f"## {heading}\n", 1)[1]
    return next(b.body for b in blocks_of(PAGE, source) if b.lang == "text")


def test_one_keys_jobs_run_one_at_a_time_in_commit_order(tmp_path: Path) -> None:
    url, database = _database(tmp_path)
    crm = _Crm()
    registry = _registry(crm)
    _record(url)
    with Relay(database) as relay:
        relay.run_once()
    with database.connect() as conn:
        ordering = status(conn).ordering
    assert (ordering.waiting, ordering.waiting_keys) == (1, 1)  # shipped waits for paid
    _relay_and_run(database, registry)
    assert crm.log == ["start 42 paid", "end 42 paid", "start 42 shipped", "end 42 shipped"]


def _blocked(tmp_path: Path) -> tuple[str, Database, _Crm, Registry, str]:
    """paid dead-lettered for good, holding its key; shipped waiting behind it."""
    url, database = _database(tmp_path)
    crm = _Crm(refuse_paid=True)
    registry = _registry(crm)
    _record(url)
    _relay_and_run(database, registry)
    assert crm.log == ["start 42 paid"]  # shipped did not run on top of the failure
    result = CliRunner().invoke(main, ["--database-url", url, "status"])
    assert result.exit_code == 0, result.output
    (dead,) = set(UUID.findall(result.output))
    page = _text_block("Keep a key blocked after a dead letter")
    assert UUID.sub("ID", result.output).endswith(UUID.sub("ID", page)), result.output
    assert hashlib.sha256(b"order:42").hexdigest()[:12] in page
    return url, database, crm, registry, dead


def test_a_held_key_shows_in_status_and_queue_retry_runs_the_dead_letter_first(
    tmp_path: Path,
) -> None:
    url, database, crm, registry, dead = _blocked(tmp_path)
    crm.refuse_paid = False
    result = CliRunner().invoke(main, ["--database-url", url, "queue", "retry", dead])
    assert result.exit_code == 0, result.output
    _relay_and_run(database, registry)
    assert crm.log[1:] == ["start 42 paid", "end 42 paid", "start 42 shipped", "end 42 shipped"]


def test_queue_forget_drops_the_dead_letter_and_the_next_job_runs(tmp_path: Path) -> None:
    url, database, crm, registry, dead = _blocked(tmp_path)
    result = CliRunner().invoke(main, ["--database-url", url, "queue", "forget", dead, "--yes"])
    assert result.exit_code == 0, result.output
    _relay_and_run(database, registry)
    assert crm.log[1:] == ["start 42 shipped", "end 42 shipped"]
    out = CliRunner().invoke(main, ["--database-url", url, "status"]).output
    assert "ordering keys" not in out  # nothing waits, nothing is blocked


def test_the_pages_digest_expression_gives_the_digest_it_says() -> None:
    found = re.search(r"`(hashlib\.sha256\([^`]+\)\.hexdigest\(\))` starts with `(\w+)`",
                      text(PAGE))
    assert found is not None
    digest = eval(found[1], {"hashlib": hashlib})  # the page's expression, as written
    assert digest == hashlib.sha256(b"order:42").hexdigest()
    assert digest.startswith(found[2]) and len(found[2]) == 12


def test_a_broker_worker_refuses_a_held_key_with_the_pages_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The page's handler (``dead_letter_holds_key=True``) under ``outbox worker
    --broker``: refused at start with the page's line and exit 1, before any connection
    (the address below has no server)."""
    app = types.ModuleType("ordering_page_app")
    app.registry = _registry(_Crm())  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ordering_page_app", app)
    args = ["worker", "orders", "--app", "ordering_page_app:registry",
            "--broker", "nats://127.0.0.1:9"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    source = text(PAGE).split("### Settings the broker path refuses\n", 1)[1]
    page = next(b.body for b in blocks_of(PAGE, source) if b.lang == "text")
    assert result.output == page, result.output


def test_a_workflows_node_cannot_have_an_ordering_key(tmp_path: Path) -> None:
    _database(tmp_path)
    wf = Workflow("order:42:fulfil")
    wf.add(Job("orders.sync", {"id": 42}, ordering_key="order:42"), name="sync")
    conn = sqlite3.connect(tmp_path / "app.db")
    try:
        with pytest.raises(InvalidWorkflow, match="cannot have an ordering_key"):
            record(conn, "order:42:fulfil", wf)
        conn.rollback()
        assert conn.execute("SELECT count(*) FROM outbox_messages").fetchone() == (0,)
    finally:
        conn.close()
