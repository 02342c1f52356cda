"""``run_tasks`` inside a Django ``TestCase``-style transaction: what the code enqueued
runs there, without a worker process, and the rollback at the end undoes it all."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import transaction

from outbox.contrib.django import run_tasks
from outbox.db.connection import Connection
from tests.django.testapp import tasks
from tests.fixtures.factories import count_rows


class _Rollback(Exception):
    pass


def test_run_tasks_runs_what_the_test_enqueued_in_its_own_transaction(
    outbox_on: str, conn: Connection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OUTBOX_TEST_RUNLOG", str(tmp_path))
    with pytest.raises(_Rollback), transaction.atomic(using=outbox_on):  # as TestCase does
        tasks.add.enqueue(1, 2)
        tasks.fails.enqueue("boom")
        report = run_tasks()
        assert sorted((r.job_name, r.outcome) for r in report.ran) == [
            ("tests.django.testapp.tasks.add", "done"),
            ("tests.django.testapp.tasks.fails", "dead"),
        ]
        assert [r.error for r in report.of("dead")] == ["LookupError"]
        raise _Rollback
    assert (tmp_path / next(iter(p.name for p in tmp_path.glob("*.log")))).read_text() == (
        "add 1 2\n"
    )
    assert count_rows(conn, "outbox_jobs") == 0 and count_rows(conn, "outbox_failed_jobs") == 0
