"""Issue 24, "what a new user trips over, round two": each item as a newcomer met it,
through the CLI or the public API, on every backend where a database is involved."""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from outbox import Job, Registry, record
from outbox.db.connection import Connection, Database
from outbox.db.migrate import LATEST, migrate
from outbox.errors import ConfigurationError
from outbox.queue import Worker, WorkerConfig
from outbox.queue.context import JobContext
from outbox.relay import Relay
from outbox.testing import run_pending
from tests.dashboard.client import get
from tests.fixtures import databases as backends
from tests.fixtures.databases import sqlalchemy_url
from tests.fixtures.gaps import Gap, skip_mark
from tests.fixtures.pg_cluster import free_port
from tests.fixtures.read_only import immutable_file
from tests.fixtures.workers import ROOT, count

SAMPLE = ROOT / "examples" / "sample_app"
SECRET = "hunter2-never-shown"


def _outbox(
    *args: str, cwd: Path = ROOT, pythonpath: str = str(ROOT), timeout: float = 120, **env: str
) -> Any:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    full_env.update(PYTHONPATH=pythonpath, OUTBOX_LOG_FORMAT="json", **env)
    return subprocess.run(
        [sys.executable, "-m", "outbox", *args],
        cwd=cwd,
        env=full_env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# -- 1. a transactional handler gets the same ctx.connection in tests and under a worker --


def _writer(seen: list[tuple[type, bool]], app_conn: Any) -> Registry:
    """A transactional handler noting the type of its connection, and whether it is
    ``app_conn`` (only the type is kept: a worker closes its own connection)."""
    registry = Registry()

    @registry.job("t.write", transactional=True)
    def write(payload: Any, ctx: JobContext) -> None:
        seen.append((type(ctx.connection), ctx.connection is app_conn))
        cur = ctx.connection.cursor()  # type: ignore[union-attr]
        cur.execute(f"INSERT INTO t_written (id) VALUES ({int(payload)})")
        cur.close()

    return registry


def test_run_pending_and_the_worker_give_a_handler_the_same_dbapi_connection(
    database: Database, conn: Connection, app_conn: Any
) -> None:
    conn.execute_sql("CREATE TABLE t_written (id INTEGER NOT NULL)")
    in_test: list[tuple[type, bool]] = []
    record(app_conn, "k-test", Job("t.write", 1))
    report = run_pending(app_conn, _writer(in_test, app_conn))
    assert report.done == 1
    assert in_test == [(type(app_conn), True)]  # the test's own DB-API connection
    app_conn.commit()
    in_worker: list[tuple[type, bool]] = []
    record(app_conn, "k-worker", Job("t.write", 2))
    app_conn.commit()
    with Relay(database) as relay:
        relay.run()
    with Worker(database, _writer(in_worker, app_conn), WorkerConfig()) as worker:
        while worker.run_once():
            pass
    assert in_worker == [(type(app_conn), False)]
    assert count(conn, "t_written") == 2


def _sample_registry(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(SAMPLE))
    from shop import jobs, models, service

    return jobs, models, service


def test_the_sample_apps_jobs_write_the_email_under_a_real_worker_and_under_run_pending(
    database: Database, db_url: str, conn: Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs, models, service = _sample_registry(monkeypatch)
    engine = create_engine(sqlalchemy_url(db_url))
    try:
        models.Base.metadata.create_all(engine)
        with Session(engine) as session:
            service.register_user(session, "ada@example.com")
            session.commit()
        pythonpath = os.pathsep.join([str(SAMPLE), str(ROOT)])
        relay = _outbox("--database-url", db_url, "relay", pythonpath=pythonpath)
        assert relay.returncode == 0, relay.stderr
        worker = _outbox(
            "--database-url", db_url, "worker", "default", "crm",
            "--app", "shop.jobs:registry", "--stop-when-empty", pythonpath=pythonpath,
        )  # fmt: skip
        assert worker.returncode == 0, worker.stderr
        assert count(conn, "outbox_failed_jobs") == 0, conn.execute_sql(
            "SELECT exception_message FROM outbox_failed_jobs"
        )
        assert count(conn, "shop_emails") == 1
        with Session(engine) as session:
            service.register_user(session, "grace@example.com")
            report = run_pending(session, jobs.registry)
            assert report.done == 2 and report.failed == 0
            emails = session.scalar(select(func.count()).select_from(models.Email))
            assert emails == 2
            session.rollback()
    finally:
        with engine.begin() as c:
            c.execute(text("DELETE FROM shop_emails"))
        models.Base.metadata.drop_all(engine)
        engine.dispose()


# -- 2. the queue-control API works on the application's own connections ----------------


@pytest.mark.parametrize("kind", ["dbapi", "sqlalchemy_connection", "sqlalchemy_session"])
def test_queue_control_runs_in_the_callers_transaction_on_its_own_connection(
    database: Database,
    db_url: str,
    app_conn: Any,
    conn: Connection,
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from outbox import cancel_job, pause_queue, paused_queues, push, resume_queue

    mid = push(app_conn, Job("t.any", 1, queue="mail"))
    app_conn.commit()
    engine = None
    if kind == "dbapi":
        caller, commit = app_conn, app_conn.commit
    else:
        engine = create_engine(sqlalchemy_url(db_url))
        caller = engine.connect() if kind == "sqlalchemy_connection" else Session(engine)
        commit = caller.commit
    opened: list[str] = []
    monkeypatch.setattr(Database, "connect", lambda self: opened.append("x"))  # never called
    try:
        pause_queue(caller, "mail")
        assert paused_queues(caller) == ["mail"]
        commit()
        assert cancel_job(caller, mid) == "dead"
        assert resume_queue(caller, "mail") is True
        assert resume_queue(caller, "mail") is False
        commit()
    finally:
        if engine is not None:
            caller.close()
            engine.dispose()
    assert opened == []
    monkeypatch.undo()
    assert count(conn, "outbox_paused_queues") == 0
    assert count(conn, "outbox_failed_jobs", "exception_class = 'cancelled'") == 1


def test_queue_control_joins_the_callers_transaction_so_a_rollback_undoes_it(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    from outbox import pause_queue

    pause_queue(app_conn, "mail")
    app_conn.rollback()
    assert count(conn, "outbox_paused_queues") == 0


def test_queue_control_refuses_an_unknown_object_naming_the_kinds_it_takes() -> None:
    from outbox import pause_queue
    from outbox.errors import UnsupportedConnection

    with pytest.raises(UnsupportedConnection) as caught:
        pause_queue(object(), "mail")
    message = str(caught.value)
    assert "psycopg (3 or 2) connection" in message and "sqlite3.Connection" in message
    assert "PyMySQL" in message and "SQLAlchemy" in message and "database URL" in message


# -- 3. a wrong password or a missing database is an answer, not an outage -------------


def _refusals() -> list[tuple[str, str]]:
    pg = make_url(backends.PG_ADMIN_URL)
    my = make_url(backends.MYSQL_ADMIN_URL)
    cases = []
    if "postgresql" in backends.BACKENDS:
        no_db = pg.set(database="outbox_no_such_db")
        cases.append((no_db.render_as_string(hide_password=False), 'database "outbox_no_such_db"'))
        no_role = pg.set(username="outbox_no_such_role")
        cases.append((no_role.render_as_string(hide_password=False), "outbox_no_such_role"))
    if "mysql" in backends.BACKENDS:
        bad_pw = my.set(password=SECRET, database="x")
        cases.append((bad_pw.render_as_string(hide_password=False), "Access denied"))
        no_db = my.set(database="outbox_no_such_db")
        cases.append((no_db.render_as_string(hide_password=False), "Unknown database"))
    return cases


LONG_RUNNING = [
    ("worker", "default", "--app", "tests.fixtures.workers:registry"),
    ("relay", "--watch"),
    ("dashboard", "--bind", f"127.0.0.1:{free_port()}"),
]


@pytest.mark.parametrize("command", LONG_RUNNING, ids=lambda c: c[0])
@pytest.mark.parametrize(
    ("url", "said"), _refusals(), ids=lambda v: v.split(":")[0] if "://" in v else v
)  # ids without the server's port: the run's own servers listen on a port of the run
def test_a_refused_login_or_missing_database_exits_1_with_the_servers_answer(
    url: str, said: str, command: tuple[str, ...]
) -> None:
    done = _outbox("--database-url", url, *command, timeout=30)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot connect to"), done.stderr
    assert said in lines[0] and SECRET not in done.stderr + done.stdout
    assert "database.unavailable" not in done.stderr


@skip_mark("postgresql" not in backends.BACKENDS, Gap.POSTGRESQL_NOT_SELECTED)
def _relay_watch_events(
    url: str, until: str, then: float = 0.0
) -> tuple[list[dict[str, Any]], str]:
    """``relay --watch`` on ``url`` until it logs the event ``until`` (then ``then``
    seconds more, a window for a repeat to show) while still running, then SIGTERM: its
    JSON log events, and its stderr for messages. Waiting on the event, not a fixed
    time, so a loaded machine's slow start does not make the event look missing."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "outbox", "--database-url", url, "--log-format", "json",
         "relay", "--watch"],
        cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("{") and orjson.loads(line).get("event") == until:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        seen.wait(60)  # a bound for a hung process; the assertions below say what failed
        time.sleep(then)
        assert proc.poll() is None  # still running (or waiting)
    finally:
        proc.terminate()
        proc.wait(30)
        reader.join(30)
        assert proc.stderr is not None
        proc.stderr.close()
    err = "".join(lines)
    return [orjson.loads(line) for line in lines if line.startswith("{")], err


def test_a_server_that_is_not_listening_is_waited_for_with_its_errno_logged() -> None:
    url = make_url(backends.PG_ADMIN_URL).set(port=free_port())
    events, err = _relay_watch_events(
        url.render_as_string(hide_password=False), until="database.unavailable"
    )
    waits = [e for e in events if e["event"] == "database.unavailable"]
    assert waits and waits[0]["code"] == "ECONNREFUSED", err


# -- 5. the dashboard's Host check holds on every bind -----------------------------------


def _dashboard_on(bind_host: str, db_url: str, *args: str, **env: str) -> tuple[Any, int]:
    port = free_port()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    full_env.update(env)
    proc = subprocess.Popen(
        [sys.executable, "-m", "outbox", "--database-url", db_url, "dashboard",
         "--bind", f"{bind_host}:{port}", *args],
        cwd=ROOT, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            if get(f"http://127.0.0.1:{port}/api/status").status == 200:
                return proc, port
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("the dashboard did not answer in 60 s")


@pytest.fixture
def sqlite_db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'dash.db'}"
    with Database(url).connect() as c:
        migrate(c)
    return url


def test_a_wildcard_bind_keeps_the_host_check_answering_only_the_machines_names(
    sqlite_db: str,
) -> None:
    proc, port = _dashboard_on("0.0.0.0", sqlite_db)
    url = f"http://127.0.0.1:{port}/api/status"
    try:
        assert get(url, headers={"Host": "evil.example"}).status == 400  # DNS rebinding
        assert get(url, headers={"Host": f"evil.example:{port}"}).status == 400
        assert get(url, headers={"Host": f"0.0.0.0:{port}"}).status == 400
        assert get(url, headers={"Host": f"localhost:{port}"}).status == 200
        assert get(url, headers={"Host": socket.gethostname()}).status == 200
        assert get(url, headers={"Host": f"127.0.0.1:{port}"}).status == 200
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_an_allowed_host_is_answered_on_a_wildcard_bind(sqlite_db: str) -> None:
    proc, port = _dashboard_on("0.0.0.0", sqlite_db, "--allowed-host", "ops.internal")
    url = f"http://127.0.0.1:{port}/api/status"
    try:
        assert get(url, headers={"Host": "ops.internal"}).status == 200
        assert get(url, headers={"Host": "evil.example"}).status == 400
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.mark.parametrize("bind", ["0.0.0.0:8642", "[::]:8642"])
def test_a_wildcard_bind_with_a_token_needs_an_allowed_host(sqlite_db: str, bind: str) -> None:
    done = _outbox(
        "--database-url", sqlite_db, "dashboard", "--bind", bind,
        OUTBOX_DASHBOARD_TOKEN="a-token-of-sixteen-chars",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "needs --allowed-host NAME" in done.stderr and "Traceback" not in done.stderr
    assert "outbox dashboard on" not in done.stdout


def test_the_host_check_answers_the_machines_own_addresses_only() -> None:
    from outbox.dashboard.app import is_own_address

    assert is_own_address("127.0.0.1") and is_own_address("127.0.0.2")
    assert not is_own_address("0.0.0.0") and not is_own_address("192.0.2.1")  # TEST-NET-1
    assert not is_own_address("evil.example")


# -- 4. a schema newer than the code is said, not reported as up to date ---------------


def _from_the_future(conn: Connection) -> int:
    version = LATEST + 1
    conn.execute("migrate_record_version", {"version": version, "description": "future"})
    return version


def test_migrate_on_a_newer_schema_says_so_and_does_nothing(
    database: Database, db_url: str, conn: Connection
) -> None:
    newer = _from_the_future(conn)
    done = _outbox("--database-url", db_url, "migrate")
    assert done.returncode == 0, done.stderr
    assert (
        f"the database is at version {newer}, newer than this release ({LATEST}); nothing to do"
        in done.stdout
    )
    assert "up to date" not in done.stdout


def test_a_long_running_command_on_a_newer_schema_logs_it_once_at_start(
    database: Database, db_url: str, conn: Connection
) -> None:
    newer = _from_the_future(conn)
    # relay.watch comes after the start's checks; a second (default 0.5 s) poll shows a repeat
    events, err = _relay_watch_events(db_url, until="relay.watch", then=1.0)
    said = [e for e in events if e["event"] == "schema.newer"]
    assert len(said) == 1, err
    assert (said[0]["database_version"], said[0]["code_version"]) == (newer, LATEST)


# -- 6, 7. NATS: a refused login and a server without JetStream, one line each ---------


def _nats_server(tmp: Path, *args: str) -> tuple[subprocess.Popen[bytes], int]:
    from tests.nats.servers import BINARY

    port = free_port()
    proc = subprocess.Popen(
        [BINARY, "-a", "127.0.0.1", "-p", str(port), "-l", str(tmp / f"{port}.log"), *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("nats-server did not start")


@pytest.fixture(scope="module")
def nats_servers(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One server with JetStream and a password, one without JetStream; stopped after."""
    tmp = tmp_path_factory.mktemp("nats")
    locked, locked_port = _nats_server(tmp, "-js", "-sd", str(tmp / "js"), "--user", "ops",
                                       "--pass", SECRET)  # fmt: skip
    plain, plain_port = _nats_server(tmp)
    yield {
        "wrong_password": f"nats://ops:not-{SECRET}@127.0.0.1:{locked_port}",
        "no_jetstream": f"nats://127.0.0.1:{plain_port}",
    }
    for proc in (locked, plain):
        proc.terminate()
        proc.wait(10)


NATS_COMMANDS = [
    ("worker", "default", "--app", "tests.fixtures.workers:registry", "--broker"),
    ("relay", "--target"),
    ("relay", "--watch", "--target"),
]


@pytest.mark.parametrize("command", NATS_COMMANDS, ids=" ".join)
@pytest.mark.parametrize(
    ("server", "said"),
    [
        ("wrong_password", "authentication failed"),
        ("no_jetstream", "JetStream is not enabled on the NATS server at 127.0.0.1:"),
    ],
)
def test_nats_refusals_are_one_line_and_exit_1(
    nats_servers: dict[str, str], sqlite_db: str, server: str, said: str,
    command: tuple[str, ...],
) -> None:  # fmt: skip
    done = _outbox("--database-url", sqlite_db, *command, nats_servers[server], timeout=60)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert said in lines[0]
    assert SECRET not in done.stderr + done.stdout and "is nats-server running" not in lines[0]


# -- 8. settings are checked where they are used, never at import ----------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [("OUTBOX_POOLER", "bogus"), ("OUTBOX_NOTIFY", "maybe"), ("OUTBOX_EAGER", "banana")],
)
def test_a_bad_setting_never_breaks_import_outbox(name: str, value: str) -> None:
    env = {**os.environ, name: value}
    done = subprocess.run(
        [sys.executable, "-c", "import outbox, outbox.testing"],
        env=env, cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("OUTBOX_POOLER", "bogus", "OUTBOX_POOLER must be one of none, session, transaction"),
        ("OUTBOX_NOTIFY", "maybe", "OUTBOX_NOTIFY must be one of 1, true, yes, on or 0"),
    ],
)
def test_the_cli_refuses_a_bad_setting_in_one_line_exit_2(
    sqlite_db: str, name: str, value: str, said: str
) -> None:
    done = _outbox("--database-url", sqlite_db, "status", **{name: value})
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr


def test_session_pooling_is_accepted(sqlite_db: str) -> None:
    assert _outbox("--database-url", sqlite_db, "status", OUTBOX_POOLER="session").returncode == 0


def test_outbox_eager_takes_a_boolean_and_names_itself_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from outbox.errors import ConfigurationError
    from outbox.testing.eager import eager_on

    monkeypatch.setenv("OUTBOX_EAGER", "banana")
    with pytest.raises(ConfigurationError, match="OUTBOX_EAGER must be one of"):
        eager_on()
    monkeypatch.setenv("OUTBOX_EAGER", "true")
    assert eager_on()


def test_a_sqlite_url_with_a_query_is_refused_not_ignored(tmp_path: Path) -> None:
    done = _outbox("--database-url", f"sqlite:///{tmp_path}/x.db?timeout=abc", "migrate")
    assert done.returncode == 2, done.stderr
    assert "a SQLite URL takes no query parameters (got timeout)" in done.stderr
    assert "Traceback" not in done.stderr


# -- 9. --concurrency has an upper bound, said in --help -------------------------------


@pytest.mark.parametrize(
    "args",
    [("--concurrency", "100000"), ("a=600", "b=600"), ("search=1001",)],
    ids=["flag", "sum", "cap"],
)
def test_a_worker_refuses_more_threads_than_it_can_start(
    sqlite_db: str, args: tuple[str, ...]
) -> None:
    from outbox.cli.queue import MAX_CONCURRENCY

    flags = [a for a in args if a.startswith("--") or a.isdigit()]
    queues = [a for a in args if a not in flags]
    done = _outbox(
        "--database-url", sqlite_db, "worker", *queues, "--app", "tests.fixtures.workers:registry",
        *flags, timeout=30,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert str(MAX_CONCURRENCY) in done.stderr and "Traceback" not in done.stderr
    helped = _outbox("worker", "--help")
    assert f"at most {MAX_CONCURRENCY}" in " ".join(helped.stdout.split())


# -- 10, 11, 12. one line, not a traceback: a read-only demo database, an unwritable init
# path, a dashboard that cannot bind -------------------------------------------------


def _one_error_line(done: Any, code: int, said: str) -> None:
    assert done.returncode == code, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], done.stderr
    assert "Traceback" not in done.stderr + done.stdout


@pytest.fixture
def immutable(sqlite_db: str) -> Any:
    """The SQLite file made read-only for everyone, root included (``chattr +i``)."""
    with immutable_file(make_url(sqlite_db).database or ""):
        yield sqlite_db


def test_the_demo_on_a_read_only_sqlite_file_says_so_in_one_line(immutable: str) -> None:
    done = _outbox("--database-url", immutable, "demo", "--intents", "10")
    _one_error_line(done, 1, "failed: OperationalError (SQLITE_READONLY)")


def test_init_in_a_folder_it_cannot_write_exits_1_saying_cannot_write() -> None:
    done = _outbox("init", "/sys/jobs.py")  # not writable, root included
    _one_error_line(done, 1, "cannot write /sys/jobs.py")


def test_a_dashboard_that_cannot_bind_exits_1_before_announcing_itself(sqlite_db: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _outbox("--database-url", sqlite_db, "dashboard", "--bind", f"127.0.0.1:{port}")
    _one_error_line(done, 1, f"cannot serve the dashboard on 127.0.0.1:{port}")
    assert "outbox dashboard on" not in done.stdout
    done = _outbox("--database-url", sqlite_db, "dashboard", "--bind", "nosuch.invalid:8642")
    _one_error_line(done, 1, "cannot serve the dashboard on nosuch.invalid:8642")
    assert "outbox dashboard on" not in done.stdout


# -- 15. the demo's closing hint runs as printed ----------------------------------------


def test_the_demos_closing_hint_carries_its_database_and_this_outbox(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tour.db'}"
    venv_outbox = Path(sys.prefix) / "bin" / "outbox"
    env = {"VIRTUAL_ENV": "", "PATH": "/usr/bin:/bin"}  # the venv is not active
    done = _outbox("--database-url", url, "demo", "--intents", "10", cwd=tmp_path, **env)
    assert done.returncode == 0, done.stderr
    hint = done.stdout.strip().splitlines()[-1].split("Try: ", 1)[1]
    for command in hint.split("; "):
        ran = subprocess.run(command, shell=True, cwd=tmp_path, env={**os.environ, **env},
                             capture_output=True, text=True, check=False)  # fmt: skip
        assert ran.returncode == 0, (command, ran.stderr)
    assert hint.startswith(f"{venv_outbox} --database-url {url} ")


# -- 13. as a library, nothing on stdout unless someone configured logging -------------

_IN_PROCESS = """
import logging, sys
from outbox import Database, Event, Job, Relay, Registry, emit, record
if sys.argv[2] == "stdlib":
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(name)s %(message)s")
db = Database(sys.argv[1])
with db.connect() as conn, conn.transaction():
    record(conn.raw, "k1", Job("t.any", 1))
    emit(conn.raw, "k2", Event("nobody.listens", {}), registry=Registry())
Relay(db).run()
"""


@pytest.mark.parametrize("logging_setup", ["none", "stdlib"])
def test_an_application_running_the_relay_in_process_gets_no_lines_on_stdout(
    sqlite_db: str, logging_setup: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _IN_PROCESS, sqlite_db, logging_setup],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    if logging_setup == "none":
        assert done.stderr == ""  # a NullHandler on "outbox": nothing unless asked
    else:  # through the application's own logging, one event=... line each
        assert "outbox.relay event='relay.batch'" in done.stderr
        assert "outbox.events event='event.no_listeners'" in done.stderr


# -- 14. messages that said what went wrong, not where ----------------------------------


@pytest.mark.parametrize(
    ("source", "said"),
    [
        (
            "from outbox import Registry\nregistry = Registry()\n"
            "@registry.periodic('0 3 * * *')\ndef nightly(payload, ctx):\n    pass\n",
            "missing 1 required keyword-only argument: 'name'",
        ),
        (
            "import math\nfrom outbox import Backoff\nB = Backoff(base=math.nan)\n",
            "Backoff needs a number base > 0 and cap >= base, in seconds (got base=nan",
        ),
    ],
    ids=["periodic-without-name", "backoff-nan"],
)
def test_an_app_failing_at_import_in_our_api_shows_the_message(
    tmp_path: Path, source: str, said: str
) -> None:
    (tmp_path / "cr.py").write_text(source)
    done = _outbox("schedule", "list", "--app", "cr:registry", cwd=tmp_path,
                   pythonpath=f"{tmp_path}{os.pathsep}{ROOT}")  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr


def test_an_in_memory_sqlite_url_is_shown_as_written() -> None:
    assert Database("sqlite:///:memory:").describe() == "sqlite:///:memory:"


@pytest.mark.parametrize("command", [("migrate",), ("demo", "--intents", "10")])
def test_a_sqlite_file_in_a_missing_folder_names_the_folder(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    missing = tmp_path / "no-such-folder"
    done = _outbox("--database-url", f"sqlite:///{missing}/jobs.db", *command)
    _one_error_line(done, 1, f"no folder '{missing}' for the SQLite database")


@pytest.mark.parametrize("value", ["nan", "inf", "0.5"])
def test_refresh_must_be_a_finite_number_of_seconds_exit_2_naming_the_option(
    sqlite_db: str, value: str
) -> None:
    done = _outbox("--database-url", sqlite_db, "dashboard", "--refresh", value)
    assert done.returncode == 2, done.stderr
    assert "'--refresh'" in done.stderr and "refresh_s" not in done.stderr


def test_a_cron_of_seven_fields_is_refused() -> None:
    from outbox.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="7 fields; give five, or six"):
        Registry().periodic("0 0 3 * * * 2030", name="t.yearly")
    Registry().periodic("0 0 3 * * *", name="t.six")  # six, with seconds: fine


def test_schedule_list_on_a_registry_without_schedules_says_so(sqlite_db: str) -> None:
    done = _outbox("--database-url", sqlite_db, "schedule", "list",
                   "--app", "tests.fixtures.apps.scheduler:empty")  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = "no schedules: tests.fixtures.apps.scheduler:empty declares no periodic jobs"
    assert done.stdout.strip() == said


def test_schedule_list_has_upper_snake_headers(sqlite_db: str) -> None:
    done = _outbox("--database-url", sqlite_db, "schedule", "list",
                   "--app", "tests.fixtures.apps.scheduler:registry")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:3] == ["NAME", "CRON", "TIMEZONE"]


def test_scheduler_once_twice_reports_nothing_new_the_second_time(sqlite_db: str) -> None:
    args = ("--database-url", sqlite_db, "scheduler", "--once", "--app",
            "tests.fixtures.apps.scheduler:registry")  # fmt: skip
    first, second = _outbox(*args), _outbox(*args)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert "recorded 2 new ticks" in first.stdout
    assert "recorded 0 new ticks; 2 due were recorded already" in second.stdout


@pytest.mark.parametrize(("args", "said"), [(("-1",), "DAYS"), (("1", "-5"), "LIMIT")])
def test_prune_with_a_negative_value_says_the_value_is_out_of_range(
    sqlite_db: str, args: tuple[str, ...], said: str
) -> None:
    done = _outbox("--database-url", sqlite_db, "prune", *args)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "is not in the range" in done.stderr
    assert "No such option" not in done.stderr


@pytest.mark.parametrize("token", [" " * 20, "  padded-short   "])
def test_a_blank_or_trivial_dashboard_token_is_refused(token: str) -> None:
    from outbox.dashboard.auth import check_token
    from outbox.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="OUTBOX_DASHBOARD_TOKEN must be"):
        check_token(token)


def test_a_mysql_password_in_the_query_is_taken_as_libpq_takes_it() -> None:
    from outbox.db.url import mysql_args

    db = Database(f"mysql://root@127.0.0.1:3306/db?password={SECRET}")
    assert mysql_args(db.url)["password"] == SECRET
    assert SECRET not in db.describe()


def test_libpqs_multi_host_form_is_parsed() -> None:
    from outbox.db.url import postgresql_args

    db = Database("postgresql://u@h1:5999,h2:5432/db")
    args = postgresql_args(db.url)
    assert (args["host"], args["port"], args["dbname"]) == ("h1,h2", "5999,5432", "db")


def test_an_unknown_mysql_charset_is_refused_naming_it() -> None:
    from outbox.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="'bogus' is not a MariaDB/MySQL character set"):
        Database("mysql://root@127.0.0.1:3306/db?charset=bogus")


# -- 15. quiet footguns, made loud -------------------------------------------------------


def test_emit_with_no_listener_declared_warns_naming_the_event(app_conn: Any) -> None:
    from structlog.testing import capture_logs

    from outbox import Event, emit

    with capture_logs() as logs:
        assert emit(app_conn, "k1", Event("nobody.listens", {}), registry=Registry()) == []
    (said,) = [e for e in logs if e["event"] == "event.no_listeners"]
    assert said["log_level"] == "warning" and said["name"] == "nobody.listens"
    assert "import the module that declares them" in said["hint"]


def test_pausing_a_queue_with_no_jobs_says_so(sqlite_db: str) -> None:
    done = _outbox("--database-url", sqlite_db, "queue", "pause", "mial")
    assert done.returncode == 0, done.stderr
    assert "paused queue mial; it has no jobs now (a new queue, or a mistyped name?)" in (
        done.stdout
    )


def test_the_release_delay_of_an_unknown_job_is_a_setting(
    database: Database, app_conn: Any, conn: Connection
) -> None:
    from outbox import push

    push(app_conn, Job("t.elsewhere", 1))
    app_conn.commit()
    before = conn.driver.clock_now()
    config = WorkerConfig(unknown_job_delay=600, stop_when_empty=True)
    with Worker(database, Registry(), config) as worker:
        worker.run_once()
    (available_at,) = conn.execute_sql("SELECT available_at FROM outbox_jobs")[0]
    assert 590_000 <= int(available_at) - before <= 610_000  # not the old fixed 60 s
    with pytest.raises(ConfigurationError, match="unknown_job_delay"):
        WorkerConfig(unknown_job_delay=math.nan).check()
    done = _outbox("worker", "--help")
    assert "--unknown-job-delay" in done.stdout


@skip_mark("mysql" not in backends.BACKENDS, Gap.PYMYSQL_CONNECTION)
def test_a_failed_connect_carries_the_drivers_code_for_the_logs() -> None:
    from outbox.errors import DatabaseError

    url = make_url(backends.MYSQL_ADMIN_URL).set(password=SECRET)
    with pytest.raises(DatabaseError) as caught:
        Database(url.render_as_string(hide_password=False)).connect()
    assert (caught.value.operation, caught.value.code) == ("connect", 1045)
