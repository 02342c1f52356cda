"""``outbox.contrib.django.TaskBackend`` through Django itself, on every backend: the
enqueue joins the caller's ``atomic()``, real ``manage.py outbox worker`` processes run
the tasks, and ``get_result`` reads what they left."""

from __future__ import annotations

import asyncio
import itertools
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connections, transaction
from django.utils import timezone

from outbox.contrib.django import idempotent
from outbox.contrib.django.backend import outbox_priority
from outbox.contrib.django.compat import TaskResultDoesNotExist, TaskResultStatus
from outbox.db.connection import Connection
from tests.django.conftest import failure_trace, manage
from tests.django.testapp import tasks
from tests.fixtures.factories import Rows, count_rows

pytestmark = pytest.mark.usefixtures("outbox_on")


def _work(db_url: str, runlog: Path, *args: str) -> None:
    done = manage(
        db_url, "outbox", "worker", "default", "mail", "--stop-when-empty", "--sleep", "0.05",
        *args, env={"OUTBOX_TEST_RUNLOG": str(runlog), "OUTBOX_LOG_LEVEL": "warning"},
    )
    assert done.returncode == 0, done.stderr[-2000:]


def _runs(runlog: Path) -> list[str]:
    return [ln for f in sorted(runlog.glob("*.log")) for ln in f.read_text().splitlines()]


def test_a_rollback_leaves_nothing(outbox_on: str, conn: Connection) -> None:
    with pytest.raises(ZeroDivisionError), transaction.atomic(using=outbox_on):
        tasks.add.enqueue(1, 2)
        1 / 0  # noqa: B018
    assert count_rows(conn, "outbox_jobs") == 0


def test_a_worker_process_runs_what_committed(
    outbox_on: str, db_url: str, conn: Connection, tmp_path: Path
) -> None:
    """One real ``manage.py outbox worker`` run: each committed task exactly once, with
    its result; a failing task FAILED with its class; the context's attempt; an async
    task; ``run_after`` respected; priorities honoured under a backlog."""
    with transaction.atomic(using=outbox_on):
        result = tasks.add.enqueue(2, 3)
        mail = tasks.send.enqueue("a@example.com", subject="hi")
        failing = tasks.fails.enqueue("no such thing")
        ctx = tasks.which_attempt.enqueue()
        coro = tasks.add_async.enqueue(4, 5)
        later = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(7, 7)
        for p in (-100, -20, 0, 30, 100, -50):
            tasks.ordered.using(priority=p).enqueue(str(p))
    assert result.status == TaskResultStatus.READY and result.args == [2, 3]
    assert tasks.add.get_result(result.id).status == TaskResultStatus.READY
    _work(db_url, tmp_path, "--prefetch", "1")
    runs = _runs(tmp_path)
    assert sorted(r for r in runs if not r.startswith("ordered")) == [
        "add 2 3", "send a@example.com"]  # once each; "add 7 7" is not due yet
    assert [r for r in runs if r.startswith("ordered")] == [
        f"ordered {p}" for p in ("100", "30", "0", "-20", "-50", "-100")]

    done = tasks.add.get_result(result.id)
    assert (done.status, done.return_value, done.attempts) == (TaskResultStatus.SUCCESSFUL, 5, 1)
    assert done.enqueued_at is not None and done.finished_at is not None
    assert done.started_at is not None and done.started_at <= done.finished_at
    assert len(done.worker_ids) == 1 and done.args == [2, 3]
    assert tasks.send.get_result(mail.id).return_value == {"to": "a@example.com", "subject": "hi"}
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL

    failed = tasks.fails.get_result(failing.id)
    assert failed.status == TaskResultStatus.FAILED
    assert [e.exception_class for e in failed.errors] == [LookupError]
    assert "no such thing" not in failed.errors[0].traceback  # the message stays out
    with pytest.raises(ValueError, match="failed"):
        failed.return_value  # noqa: B018

    assert tasks.which_attempt.get_result(ctx.id).return_value == 1
    assert tasks.add_async.get_result(coro.id).return_value == 9
    assert tasks.add.get_result(later.id).status == TaskResultStatus.READY
    assert count_rows(conn, "outbox_jobs") == 1  # the delayed one


def test_a_dead_letter_s_result_shows_no_exception_message(
    rows: Rows, tmp_path: Path
) -> None:
    """A task whose result was not kept (``RESULT_TTL: None``) is read from its dead
    letter: the traceback without the messages, as a kept result's."""
    mid = rows.dead_letter(job_name="tests.django.testapp.tasks.fails",
                           exception_class="ValueError", exception_message="SECRET 42",
                           exception_trace=failure_trace("SECRET 42"))
    found = tasks.fails.get_result(mid)
    assert found.status == TaskResultStatus.FAILED
    assert [e.exception_class for e in found.errors] == [ValueError]
    assert "SECRET" not in found.errors[0].traceback
    assert "failure_trace" in found.errors[0].traceback


def test_priority_map_keeps_the_order_at_every_step() -> None:
    mapped = [outbox_priority(p) for p in range(-100, 101)]
    assert mapped[0] == 9 and mapped[-1] == 0 and mapped[100] == 4
    assert all(a >= b for a, b in itertools.pairwise(mapped))


def test_arguments_that_are_not_json_raise_and_write_nothing(
    outbox_on: str, conn: Connection
) -> None:
    with transaction.atomic(using=outbox_on), pytest.raises(TypeError, match="not JSON"):
        tasks.add.enqueue(object(), 1)
    assert count_rows(conn, "outbox_jobs") == 0


def test_outside_atomic_an_enqueue_commits_on_its_own(outbox_on: str, conn: Connection) -> None:
    assert connections[outbox_on].get_autocommit()
    tasks.add.enqueue(1, 1)
    assert count_rows(conn, "outbox_jobs") == 1


def test_an_idempotency_key_records_one_intent_per_key(outbox_on: str, conn: Connection) -> None:
    ids = []
    for _ in range(2):
        with idempotent("receipt:42"), transaction.atomic(using=outbox_on):
            ids.append(tasks.send.enqueue("b@example.com").id)
    assert ids[0] == ids[1]
    assert count_rows(conn, "outbox_messages") == 1 and count_rows(conn, "outbox_jobs") == 0
    assert tasks.send.get_result(ids[0]).status == TaskResultStatus.READY  # not yet relayed
    with idempotent("receipt:43"), pytest.raises(ValueError, match="names one job"):
        tasks.send.enqueue("c@example.com")
        tasks.send.enqueue("d@example.com")
    assert count_rows(conn, "outbox_messages") == 2


def test_async_enqueue_and_get_result(outbox_on: str, conn: Connection) -> None:
    async def both() -> Any:
        result = await tasks.add.aenqueue(1, 2)
        return await tasks.add.aget_result(result.id)

    found = asyncio.run(both())
    assert found.status == TaskResultStatus.READY and found.args == [1, 2]


def test_an_unknown_id_is_django_s_does_not_exist(outbox_on: str) -> None:
    for unknown in ("00000000-0000-4000-8000-000000000000", "not-an-id"):
        with pytest.raises(TaskResultDoesNotExist):
            tasks.add.get_result(unknown)


def test_tasks_and_plain_handlers_share_one_worker_registry(outbox_on: str) -> None:
    from django.test import override_settings

    from outbox.contrib.django.worker import build
    from tests.fixtures.workers import registry as plain

    before = set(plain)
    with override_settings(OUTBOX={"DATABASE": outbox_on,
                                   "REGISTRY": "tests.fixtures.workers:registry"}):
        both = build()
    assert "t.noop" in both and "tests.django.testapp.tasks.add" in both
    assert both.get("tests.django.testapp.tasks.add").keep_result_ms is not None  # type: ignore[union-attr]
    assert set(plain) == before  # the application's registry is left as it is
