"""``manage.py outbox``: the plain CLI's commands on Django's database, told by Django's
settings what the plain CLI is told on its command line: global options before or after
the command, no ``--database-url``, no ``demo``/``init``/``migrate``, ``OUTBOX['REGISTRY']``
named (by ``manage.py check`` too) where the plain CLI would name ``--app``, and
``manage.py migrate`` named wherever the tables are missing.

Most run ``manage.py outbox`` in this process, through the entry ``manage.py`` calls
(``run_from_argv``); the settings' own errors run real ``manage.py`` processes."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from django.test import override_settings

from outbox.contrib.django.management.commands.outbox import Command
from outbox.db.connection import Connection, Database
from outbox.db.migrate import applied_versions
from outbox.errors import OutboxError
from outbox.ids import new_message_id
from tests.django.conftest import manage
from tests.django.testapp import tasks
from tests.fixtures.factories import Rows
from tests.fixtures.records import counts

TABLES = ("outbox_messages", "outbox_jobs", "outbox_failed_jobs")
MIGRATE = "run `manage.py migrate`"


def _manage_py(*args: str) -> int:
    """``python manage.py outbox ARGS...`` in this process: its exit code."""
    with pytest.raises(SystemExit) as done:
        Command().run_from_argv(["manage.py", "outbox", *args])
    code = done.value.code
    return code if isinstance(code, int) else 1


@pytest.mark.usefixtures("outbox_on")
@pytest.mark.parametrize(
    "args",
    [
        ("--log-level", "debug", "worker", "--stop-when-empty"),
        ("--log-level=warning", "--log-format", "json", "worker", "--stop-when-empty"),
        ("worker", "--stop-when-empty", "--log-level", "debug"),
    ],
)
def test_global_options_go_before_or_after_the_command(
    args: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _manage_py(*args) == 0, capsys.readouterr().err
    assert "--app" not in capsys.readouterr().err


def test_the_database_is_django_s_and_no_other(
    outbox_on: str, rows: Rows, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    other = tmp_path / "other.db"
    for args in (
        ("--database-url", f"sqlite:///{other}", "status"),
        ("status", f"--database-url=sqlite:///{other}"),
    ):
        assert _manage_py(*args) == 2
        err = capsys.readouterr().err
        assert "takes no --database-url" in err and f"{outbox_on!r} in DATABASES" in err
    rows.job(queue="mail")
    monkeypatch.setenv("OUTBOX_DATABASE_URL", f"sqlite:///{other}")  # not read here
    assert _manage_py("status", "--json") == 0
    assert orjson.loads(capsys.readouterr().out)["queues"]["mail"]["ready"] == 1
    assert not other.exists()


@pytest.mark.parametrize("command", ["demo", "init", "migrate"])
def test_commands_that_make_no_sense_under_django_are_not_offered(
    outbox_on: str, conn: Connection, tmp_path: Path, command: str,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # (where a SQLite test database lives too)
    before = sorted(tmp_path.iterdir())
    assert _manage_py(command) == 2
    err = capsys.readouterr().err
    assert f"`manage.py outbox {command}` is not offered" in err, err
    assert counts(conn, TABLES) == dict.fromkeys(TABLES, 0)  # the demo wrote nothing
    assert sorted(tmp_path.iterdir()) == before  # nor did init
    assert _manage_py("--help") == 0
    shown = capsys.readouterr().out
    assert f"  {command} " not in shown and "--database-url" not in shown
    assert "  worker " in shown


def test_without_the_tables_each_surface_names_manage_py_migrate(
    db_url: str, empty_alias: str, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = rf"database '{empty_alias}'.*; {MIGRATE.replace('`', '.')}"
    with override_settings(OUTBOX={"DATABASE": empty_alias}):
        with pytest.raises(OutboxError, match=missing):
            tasks.add.enqueue(1, 2)
        with pytest.raises(OutboxError, match=missing):
            tasks.add.get_result(new_message_id())
        assert _manage_py("worker", "--stop-when-empty") == 1
    err = capsys.readouterr().err
    assert MIGRATE in err and "outbox migrate" not in err, err
    with Database(db_url).connect() as conn:
        assert applied_versions(conn) == []  # nothing was created on the way


@pytest.mark.parametrize(
    ("registry", "said"),
    [
        (None, "settings.OUTBOX['REGISTRY'] is not set"),
        ("tests.fixtures.apps.scheduler:empty",
         "settings.OUTBOX['REGISTRY'] ('tests.fixtures.apps.scheduler:empty') declares none"),
    ],
)
def test_a_scheduler_with_no_periodic_jobs_says_so_in_one_line(
    outbox_on: str, registry: str | None, said: str, capsys: pytest.CaptureFixture[str],
) -> None:
    with override_settings(OUTBOX={"DATABASE": outbox_on, "REGISTRY": registry}):
        assert _manage_py("scheduler", "--once") == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: no periodic jobs to record: {said} (Django tasks are never periodic)"
    ]


WRONG = "shop.nope:registry"
SAID = (f"settings.OUTBOX['REGISTRY'] is {WRONG!r}: no module named 'shop.nope' "
        "(looked in the current folder and sys.path)")


def test_a_wrong_registry_setting_fails_check_and_is_named_by_the_worker(
    outbox_on: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    with override_settings(OUTBOX={"DATABASE": outbox_on, "REGISTRY": WRONG}):
        with pytest.raises(SystemCheckError, match=r"outbox\.E004"):
            call_command("check")
        assert _manage_py("worker", "--stop-when-empty") == 2
    assert capsys.readouterr().err.splitlines() == [f"error: {SAID}"]


def test_a_manage_py_worker_names_the_wrong_registry_setting(tmp_path: Path) -> None:
    """In a process of its own, which imports the project's registry afresh."""
    url = f"sqlite:///{tmp_path / 'app.db'}"  # never reached: the setting is wrong first
    worker = manage(url, "outbox", "worker", env={"OUTBOX_DJANGO_REGISTRY": WRONG})
    assert (worker.returncode, worker.stderr.splitlines()) == (2, [f"error: {SAID}"])
    assert not (tmp_path / "app.db").exists()
