"""The rules every command follows (issue 17's consistency sweep), checked across the
whole command tree, so a command added later is held to them too."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import orjson
import pytest
from click.testing import CliRunner, Result

from outbox import Job
from outbox.cli import main
from outbox.cli.conventions import GLOBAL_NOTE, env_name, walk
from outbox.db.connection import Connection, Database
from outbox.queue import push
from tests.fixtures import databases as backends
from tests.fixtures.relays import record_many, set_column
from tests.fixtures.workers import ROOT

LEAVES = [(path, cmd) for path, cmd in walk(main) if path and not isinstance(cmd, click.Group)]
LEAF_IDS = [" ".join(path) for path, _ in LEAVES]
OPTIONS = [
    (path, opt) for path, cmd in LEAVES for opt in cmd.params if isinstance(opt, click.Option)
]
ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
# Commands that make or read nothing by default, with the arguments they need.
NEEDS = {
    "retry": ["00000000-0000-7000-8000-000000000000"],
    "result": ["00000000-0000-7000-8000-000000000000"],
    "workflow show": ["00000000-0000-7000-8000-000000000000"],
    "workflow cancel": ["00000000-0000-7000-8000-000000000000"],
    "prune": ["1"],
    "worker": ["--app", "tests.fixtures.workers:registry", "--once"],
    "queue retry": ["all"],
    "queue forget": ["00000000-0000-7000-8000-000000000000", "--yes"],
    "queue remove": ["00000000-0000-7000-8000-000000000000", "--yes"],
    "queue clear": ["--yes"],
    "queue pause": ["default"],
    "queue resume": ["default"],
    "queue cancel": ["00000000-0000-7000-8000-000000000000"],
    "scheduler": ["--app", "tests.fixtures.apps.scheduler:registry", "--once"],
    "schedule list": ["--app", "tests.fixtures.apps.scheduler:registry"],
}
CREATES = {"migrate", "demo"}
NO_DATABASE = {"init", "schema"}  # a starter jobs.py; a JSON Schema: never open the database


def cli(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env)


# -- environment names ------------------------------------------------------------------


@pytest.mark.parametrize(("path", "option"), OPTIONS, ids=lambda v: getattr(v, "name", None))
def test_every_option_reads_outbox_command_option_and_nothing_else(
    path: tuple[str, ...], option: click.Option, monkeypatch: pytest.MonkeyPatch
) -> None:
    longest = max((o for o in option.opts if o.startswith("--")), key=len)
    wanted = "_".join(["OUTBOX", *path, longest[2:]]).upper().replace("-", "_")
    assert env_name(path, option) == wanted
    assert isinstance(option.envvar, list) and option.envvar[0] == wanted
    assert not option.allow_from_autoenv and option.show_envvar
    command: click.Command = main
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    ctx = click.Context(command, info_name=path[-1])
    assert option.resolve_envvar_value(ctx) is None
    monkeypatch.setenv(wanted, "1")
    assert option.resolve_envvar_value(ctx) == "1"


def test_status_json_and_queue_name_work_from_the_environment(
    database: Database, db_url: str, app_conn: Any
) -> None:
    push(app_conn, Job("t.noop", 1, queue="mail"))
    push(app_conn, Job("t.noop", 2, queue="search"))
    app_conn.commit()
    env = {"OUTBOX_DATABASE_URL": db_url, "OUTBOX_STATUS_JSON": "1"}
    assert "queues" in orjson.loads(cli("status", env=env).stdout)
    jobs = cli(
        "queue", "jobs", env={"OUTBOX_DATABASE_URL": db_url, "OUTBOX_QUEUE_JOBS_QUEUE": "mail"}
    )
    assert "mail" in jobs.stdout and "search" not in jobs.stdout


def test_outbox_migrate_sql_in_the_environment_only_prints(tmp_path: Path) -> None:
    url = backends.sqlite_url(tmp_path)
    printed = cli("--database-url", url, "migrate", env={"OUTBOX_MIGRATE_SQL": "1"})
    assert printed.exit_code == 0, printed.output
    assert "CREATE TABLE" in printed.stdout
    assert not (tmp_path / "outbox.db").exists()
    bad = cli("--database-url", url, "migrate", env={"OUTBOX_MIGRATE_SQL": "maybe"})
    assert bad.exit_code == 2 and not (tmp_path / "outbox.db").exists()


# -- global options go before or after the command ---------------------------------------


def test_global_options_are_accepted_after_the_command(database: Database, db_url: str) -> None:
    record_many(db_url, ["g1"])
    after = cli("status", "--json", "--database-url", db_url, "--log-level", "warning")
    assert after.exit_code == 0, after.output
    assert orjson.loads(after.stdout)["outbox"]["pending"] == 1
    nested = cli("queue", "stats", f"--database-url={db_url}")
    assert nested.exit_code == 0, nested.output


@pytest.mark.parametrize(("path", "command"), list(walk(main))[1:], ids=lambda v: str(v))
def test_every_help_says_where_global_options_go(
    path: tuple[str, ...], command: click.Command
) -> None:
    text = CliRunner().invoke(main, [*path, "--help"]).output
    assert " ".join(GLOBAL_NOTE.split()) in " ".join(text.split())


# -- --help says what every option does and its default ---------------------------------


@pytest.mark.parametrize(("path", "option"), OPTIONS, ids=lambda v: getattr(v, "name", None))
def test_every_option_has_help_and_a_stated_default(
    path: tuple[str, ...], option: click.Option
) -> None:
    assert option.help, f"{' '.join(path)} {option.opts} has no help"
    if option.is_flag or option.required:
        return
    if option.default is None:
        assert "Default:" in option.help, f"{' '.join(path)} {option.opts}: say the default"
    else:
        assert option.show_default


def test_worker_and_queue_help_name_their_defaults() -> None:
    worker = " ".join(cli("worker", "--help").output.split())
    for text in ("Default: adaptive", "default: 30.0", "default: 1.0", "Default: no limit"):
        assert text in worker
    assert "LIMIT (default 50)" in cli("queue", "jobs", "--help").output
    assert "--json" in cli("queue", "stats", "--help").output


# -- a malformed argument is a usage error (2) everywhere ----------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["retry", "not-a-uuid"],
        ["queue", "retry", "not-a-uuid"],
        ["queue", "forget", "not-a-uuid", "--yes"],
        ["queue", "remove", "not-a-uuid", "--yes"],
        ["queue", "failed", "--show", "not-a-uuid"],
        ["queue", "jobs", "0"],
        ["queue", "clear", "--queue", "no spaces", "--yes"],
        ["failed", "0"],
        ["prune", "-1"],
        ["worker", "bad queue!", "--app", "tests.fixtures.workers:registry"],
    ],
    ids=lambda a: " ".join(a),
)
def test_malformed_arguments_exit_2_before_touching_the_database(
    tmp_path: Path, args: list[str]
) -> None:
    result = cli("--database-url", backends.sqlite_url(tmp_path), *args)
    assert result.exit_code == 2, result.output
    assert "Error: " in result.stderr
    assert not (tmp_path / "outbox.db").exists()


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("ftp://host/db", "unsupported database URL scheme 'ftp'"),
        ("postgresql://u@h/db?colour=blue", "colour"),
        ("mysql://u@h/db?bogus=1", "bogus"),
        ("mysql://u@h/db?connect_timeout=soon", "connect_timeout"),
    ],
)
def test_a_database_url_we_cannot_use_is_a_usage_error(url: str, named: str) -> None:
    result = cli("status", "--database-url", url)
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--database-url'" in result.stderr and named in result.stderr


@pytest.mark.parametrize(("path", "command"), LEAVES, ids=LEAF_IDS)
def test_every_command_exits_2_on_an_unknown_option(
    path: tuple[str, ...], command: click.Command, tmp_path: Path
) -> None:
    result = cli("--database-url", backends.sqlite_url(tmp_path), *path, "--no-such-option")
    assert result.exit_code == 2 and "No such option" in result.stderr


# -- read-only commands never create a SQLite file --------------------------------------


@pytest.mark.parametrize(
    ("path", "command"),
    [(p, c) for p, c in LEAVES if " ".join(p) not in CREATES | NO_DATABASE],
    ids=[i for i in LEAF_IDS if i not in CREATES | NO_DATABASE],
)
def test_commands_on_a_mistyped_sqlite_path_exit_1_naming_it_and_create_nothing(
    path: tuple[str, ...], command: click.Command, tmp_path: Path
) -> None:
    missing = tmp_path / "outbx.db"
    args = NEEDS.get(" ".join(path), [])
    result = cli("--database-url", f"sqlite:///{missing}", *path, *args)
    assert result.exit_code == 1, result.output
    [line] = result.stderr.strip().splitlines()
    assert f"no SQLite database at '{missing}'" in line and "outbox migrate" in line
    assert not missing.exists()


# -- one table style ---------------------------------------------------------------------


def _table(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("(")]


def test_listings_share_one_table_style(
    database: Database, db_url: str, app_conn: Any, conn: Connection
) -> None:
    for args, nothing in (
        (["failed"], "no quarantined intents"),
        (["queue", "jobs"], "no jobs in the queue"),
        (["queue", "failed"], "no dead letters"),
        (["queue", "stats"], "no queues"),
    ):
        empty = cli("--database-url", db_url, *args)
        assert empty.exit_code == 0 and empty.stdout == f"{nothing}\n", empty.output
    [mid] = record_many(db_url, ["t1"])
    set_column(conn, mid, "payload", "[")
    cli("--database-url", db_url, "relay")
    push(app_conn, Job("t.noop", {"n": 1}, queue="a-rather-long-queue-name"))
    app_conn.commit()
    for args in (["failed"], ["queue", "jobs"], ["queue", "stats"], ["status"]):
        out = cli("--database-url", db_url, *args)
        assert out.exit_code == 0, out.output
        header, *rows = _table(out.stdout)
        assert header == header.upper(), header
        for row in rows:
            assert row == row.rstrip()
        for stamp in re.findall(r"\S*\d{4}-\d\d-\d\d\S*", out.stdout):
            assert ISO_UTC.fullmatch(stamp), stamp
    jobs = cli("--database-url", db_url, "queue", "jobs").stdout
    header, row = _table(jobs)[:2]
    assert header.index("QUEUE") < header.index("JOB") and "a-rather-long-queue-name  " in row
    assert "0/-" in row and "'-' means the handler's max_attempts (default 3)" in jobs


def test_a_reserved_job_shows_when_its_lease_ends(
    database: Database, db_url: str, app_conn: Any, conn: Connection
) -> None:
    mid = push(app_conn, Job("t.noop", 1))
    app_conn.commit()
    conn.execute_sql(
        "UPDATE outbox_jobs SET reserved_by = 'w1', reserved_at = 0, lease_expires_at = "
        f"1893456000000 WHERE message_id = '{mid}'"
    )
    jobs = cli("--database-url", db_url, "queue", "jobs").stdout
    header, row = _table(jobs)[:2]
    assert "LEASE_ENDS" in header and "reserved" in row and "2030-01-01T00:00:00Z" in row


# -- words: quarantined intents, dead letters ---------------------------------------------


def test_status_uses_the_two_words_and_keeps_the_old_json_keys(
    database: Database, db_url: str, conn: Connection, app_conn: Any
) -> None:
    push(app_conn, Job("t.noop", 1))
    app_conn.commit()
    [mid] = record_many(db_url, ["w1"])
    set_column(conn, mid, "payload", "[")
    cli("--database-url", db_url, "relay")
    text = cli("--database-url", db_url, "status").stdout
    assert "QUARANTINED" in text and "DEAD_LETTERS" in text
    assert "FAILED" not in text and " dead " not in text
    doc = orjson.loads(cli("--database-url", db_url, "status", "--json").stdout)
    assert doc["outbox"]["quarantined"] == doc["outbox"]["failed"] == 1
    for counts in doc["queues"].values():
        assert counts["dead_letters"] == counts["dead"]
    stats = orjson.loads(cli("--database-url", db_url, "queue", "stats", "--json").stdout)
    for counts in stats["queues"].values():
        assert counts["dead_letters"] == counts["dead"]


def test_failed_before_migrate_names_the_fix_not_failed_failed(db_url: str) -> None:
    if backends.backend_of(db_url) == "sqlite":
        Path(db_url.removeprefix("sqlite:///")).touch()
    result = cli("--database-url", db_url, "failed")
    assert result.exit_code == 1
    assert "failed failed" not in result.stderr and "run `outbox migrate`" in result.stderr


# -- --app errors name the real cause --------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "spec", "expected"),
    [
        ("import not_installed_pkg_xyz\n", "app:registry", "it imports 'not_installed_pkg_xyz'"),
        ("raise RuntimeError('boom')\n", "app:registry", "RuntimeError at "),
        ("from outbox import Registry\nregistry = Registry()\n", "app:registy", "no attribute"),
        ("x = (\n", "app:registry", "app.py:1: syntax error"),
        ("registry = 42\n", "app:registry", "is not an outbox.Registry (it is a int)"),
    ],
    ids=["failed-import", "raises", "no-attribute", "syntax-error", "not-a-registry"],
)
def test_app_errors_are_one_line_naming_the_cause(
    tmp_path: Path, source: str, spec: str, expected: str
) -> None:
    (tmp_path / "app.py").write_text(source)
    migrate = [sys.executable, "-m", "outbox", "migrate"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(migrate, cwd=tmp_path, env=env, check=True, capture_output=True, timeout=60)
    done = subprocess.run(
        [sys.executable, "-m", "outbox", "worker", "--app", spec, "--once"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr and "Traceback" not in done.stderr
    if "attribute" in expected:
        assert "no attribute 'registy' in module 'app'" in done.stderr
    error_lines = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(error_lines) == 1


# -- the demo ------------------------------------------------------------------------------


def test_demo_help_names_the_database_url_and_the_jobs_set_to_fail() -> None:
    text = " ".join(cli("demo", "--help").output.split())
    assert "--database-url" in text and "fail once" in text

