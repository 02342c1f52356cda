"""The least-privilege roles of ``ops/sql/``, applied as shipped, on PostgreSQL and MariaDB.

Two tables say what each role is for:

- ``CAN``: role → the parts of outbox it runs. Each part runs for real as that role's
  LOGIN user (the library, the services and the CLI, as a deployment would run them) and
  its outcome is checked as the admin.
- ``CANNOT``: role → what it must be refused. Each statement is sent as that user and
  must fail with a permission error (any other error fails the test: a typo proves
  nothing). The statements change no row even where they would be allowed.

A change to the schema or to a role's duty is a row in these tables.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import pytest
from click.testing import CliRunner, Result
from structlog.testing import capture_logs

from outbox import Job, record, record_many
from outbox.cli import main
from outbox.db import migrate as migrations
from outbox.db.connection import Database
from outbox.db.migrate import LATEST, Migration, migrate
from outbox.errors import IdempotencyConflict
from outbox.metrics import Exporter
from outbox.queue import Worker, WorkerConfig, push, push_many
from outbox.relay import Relay, RelayConfig
from tests.fixtures import databases as backends
from tests.ops.apps import LEDGER_DDL, registry
from tests.ops.grants import SERVER_BACKENDS, GrantedDatabase


@pytest.fixture(scope="module")
def granted_on() -> Iterator[Callable[[str], GrantedDatabase]]:
    """One granted database per backend for the module, made on first use."""
    made: dict[str, GrantedDatabase] = {}

    def get(backend: str) -> GrantedDatabase:
        if backend not in made:
            g = made[backend] = GrantedDatabase(backend)
            g.admin_sql(LEDGER_DDL)
            g.grant_table("worker", "INSERT", "ops_ledger")  # the app's table, for its handler
        return made[backend]

    yield get
    for g in made.values():
        g.close()


@pytest.fixture(params=SERVER_BACKENDS)
def granted(
    request: pytest.FixtureRequest, granted_on: Callable[[str], GrantedDatabase]
) -> GrantedDatabase:
    return granted_on(str(request.param))


@dataclass
class Scene:
    g: GrantedDatabase
    monkeypatch: pytest.MonkeyPatch

    def cli(self, role: str, *args: str) -> Result:
        result = CliRunner().invoke(main, ["--database-url", self.g.url(role), *args])
        assert result.exit_code == 0, f"outbox {' '.join(args)} as {role}: {result.output}"
        return result

    def admin_db(self) -> Database:
        return Database(self.g.admin_url)

    def one(self, sql: str, *params: Any) -> Any:
        rows = self.g.admin_sql(sql.replace("?", "%s"), params)
        return rows[0][0] if rows else None


def _ready(url: str, role: Literal["relay", "worker"]) -> tuple[bool, str]:
    """What /readyz answers for a process logged in as ``role`` (no server started)."""
    exporter = Exporter(Database(url), role)
    try:
        return exporter.ready()
    finally:
        exporter.stop()


def _key() -> str:
    return f"grants:{uuid.uuid4()}"


def _record_as_admin(s: Scene, *jobs: Job) -> list[str]:
    conn = backends.raw_connect(s.g.admin_url)
    try:
        ids = [record(conn, _key(), job) for job in jobs]
        conn.commit()
    finally:
        conn.close()
    return ids


def _push_as_admin(s: Scene, *jobs: Job) -> list[str]:
    conn = backends.raw_connect(s.g.admin_url)
    try:
        ids = [push(conn, job) for job in jobs]
        conn.commit()
    finally:
        conn.close()
    return ids


def _state(s: Scene, message_id: str) -> str | None:
    return s.one("SELECT state FROM outbox_messages WHERE message_id = ?", message_id)  # type: ignore[no-any-return]


def _handed_off(s: Scene, message_id: str) -> bool:
    """The intent left the outbox and its key row stayed."""
    keys = s.one("SELECT count(*) FROM outbox_keys WHERE message_id = ?", message_id)
    return _state(s, message_id) is None and bool(keys)


def _in_jobs(s: Scene, message_id: str) -> bool:
    return bool(s.one("SELECT count(*) FROM outbox_jobs WHERE message_id = ?", message_id))


def _dead(s: Scene, message_id: str) -> str | None:
    return s.one(  # type: ignore[no-any-return]
        "SELECT exception_class FROM outbox_failed_jobs WHERE message_id = ?", message_id
    )


# -- what each role runs -------------------------------------------------------------


def app_records_replays_and_pushes(s: Scene) -> None:
    job = Job("ops.noop", {"n": 1}, queue="grants_app")
    key = _key()
    conn = backends.raw_connect(s.g.url("app"))
    try:
        first = record(conn, key, job)
        conn.commit()
        assert record(conn, key, job) == first  # the replay reads the key's row back
        conn.commit()
        with pytest.raises(IdempotencyConflict):
            record(conn, key, Job("ops.noop", {"n": 2}, queue="grants_app"))
        conn.rollback()
        replayed, fresh = record_many(conn, [(key, job), (_key(), job)])
        conn.commit()
        pushed = push(conn, job)
        many = push_many(conn, [job, job])
        conn.commit()
    finally:
        conn.close()
    assert replayed == first
    assert _state(s, first) == "pending" and _state(s, fresh) == "pending"
    assert all(_in_jobs(s, m) for m in (pushed, *many))


def relay_hands_off_and_quarantines(s: Scene) -> None:
    good, bad = _record_as_admin(s, Job("ops.noop", queue="grants_relay"), Job("ops.noop"))
    s.g.admin_sql("UPDATE outbox_messages SET fingerprint = 'x' WHERE message_id = %s", (bad,))
    s.cli("relay", "relay")
    assert _handed_off(s, good) and _in_jobs(s, good)
    assert _state(s, bad) == "failed" and not _in_jobs(s, bad)
    # The Python verifier's statements, and the schema-version reads of /readyz.
    (python_checked,) = _record_as_admin(s, Job("ops.noop", queue="grants_relay"))
    with Relay(Database(s.g.url("relay")), RelayConfig(verify_in_python=True)) as relay:
        relay.run()
    assert _handed_off(s, python_checked)
    assert _ready(s.g.url("relay"), "relay") == (True, f"ok: schema version {LATEST}")


def worker_runs_retries_dead_letters_and_reaps(s: Scene) -> None:
    q = "grants_worker"
    noop, permanent, failing, slow, credit, ghost_ok, ghost_dead, snoozing, lim1, lim2 = (
        _push_as_admin(
            s,
            Job("ops.noop", queue=q),
            Job("ops.permanent", queue=q),
            Job("ops.fail", queue=q, max_attempts=2),
            Job("ops.slow", {"s": 0.6}, queue=q),
            Job("ledger.credit", {"amount": 5}, queue=q),
            Job("ops.noop", queue=q),
            Job("ops.noop", queue=q),
            Job("ops.snooze_once", queue=q),
            Job("ops.limited", queue=q),
            Job("ops.limited", queue=q),
        )
    )
    held = "UPDATE outbox_jobs SET reserved_by = 'ghost', reserved_at = 1, lease_expires_at = 1, "
    s.g.admin_sql(held + "attempts = 1 WHERE message_id = %s", (ghost_ok,))
    s.g.admin_sql(held + "attempts = 3 WHERE message_id = %s", (ghost_dead,))
    config = WorkerConfig(queues={q: 4}, stop_when_empty=True, lease=1.0, sleep=0.05, listen=False)
    with capture_logs() as logs:
        for _ in range(100):  # ops.fail comes back after its backoff
            stats = Worker(Database(s.g.url("worker")), registry, config).run()
            assert stats.lost == 0
            if not s.one("SELECT count(*) FROM outbox_jobs WHERE queue = ?", q):
                break
            time.sleep(0.05)
    assert not [e for e in logs if e["event"] == "worker.database_error"], logs
    assert not s.one("SELECT count(*) FROM outbox_jobs WHERE queue = ?", q)
    assert str(_dead(s, permanent)).endswith("PermanentFailure")
    assert str(_dead(s, failing)).endswith("RuntimeError")
    assert _dead(s, ghost_dead) == "LeaseExpired"
    assert all(_dead(s, m) is None for m in (noop, slow, credit, ghost_ok, snoozing, lim1, lim2))
    assert s.one("SELECT amount FROM ops_ledger WHERE message_id = ?", credit) == 5
    assert _ready(s.g.url("worker"), "worker") == (True, f"ok: schema version {LATEST}")


def operator_runs_every_command(s: Scene) -> None:
    q = "grants_operator"
    (published,) = _record_as_admin(s, Job("ops.noop", queue=q))
    with Relay(s.admin_db()) as relay:
        relay.run()
    repaired, accepted = _record_as_admin(s, Job("ops.noop", queue=q), Job("ops.noop", queue=q))
    s.g.admin_sql(
        "UPDATE outbox_messages SET state = 'failed', failure_reason = 'fingerprint_mismatch' "
        "WHERE message_id IN (%s, %s)",
        (repaired, accepted),
    )
    s.g.admin_sql(
        'UPDATE outbox_messages SET payload = \'{"b": 1, "a": 2}\' WHERE message_id = %s',
        (accepted,),
    )
    dead = _push_as_admin(s, *[Job("ops.permanent", queue=q) for _ in range(3)])
    Worker(s.admin_db(), registry, WorkerConfig(queues={q: 1}, stop_when_empty=True)).run()
    assert all(_dead(s, m) for m in dead)

    s.cli("operator", "status")
    s.cli("operator", "status", "--json")
    assert repaired in s.cli("operator", "failed").stdout
    s.cli("operator", "retry", repaired)
    s.cli("operator", "retry", accepted, "--accept-current")
    assert _state(s, repaired) == "pending" and _state(s, accepted) == "pending"
    s.cli("operator", "prune", "0")
    assert not s.one("SELECT count(*) FROM outbox_keys WHERE message_id = ?", published)
    s.cli("operator", "queue", "jobs")
    s.cli("operator", "queue", "stats")
    s.cli("operator", "queue", "failed")
    s.cli("operator", "queue", "failed", "--show", dead[0])
    s.cli("operator", "queue", "forget", dead[0], "--yes")
    s.cli("operator", "queue", "retry", dead[1])
    s.cli("operator", "queue", "retry", "all")
    assert not any(_dead(s, m) for m in dead)
    s.cli("operator", "queue", "remove", dead[1], "--yes")
    assert not _in_jobs(s, dead[1]) and _in_jobs(s, dead[2])
    s.cli("operator", "queue", "clear", "--queue", q, "--yes")
    assert not _in_jobs(s, dead[2])
    s.cli("operator", "queue", "pause", q)
    s.cli("operator", "queue", "resume", q)
    (waiting,) = _push_as_admin(s, Job("ops.noop", queue=q))
    s.cli("operator", "queue", "cancel", waiting)
    assert not _in_jobs(s, waiting) and _dead(s, waiting)


_PROBE = Migration(
    LATEST + 1,
    "grants probe",
    lambda d: [
        "CREATE TABLE outbox_probe (id INTEGER PRIMARY KEY)",
        "CREATE INDEX outbox_probe_by_id ON outbox_probe (id)",
        "ALTER TABLE outbox_jobs ADD COLUMN probe INTEGER",
    ],
)


def migrator_migrates(s: Scene) -> None:
    # A database of its own: this one's schema changes.
    with GrantedDatabase(s.g.backend) as fresh:
        assert (
            "up to date"
            in CliRunner().invoke(main, ["--database-url", fresh.url("migrator"), "migrate"]).output
        )
        s.monkeypatch.setattr(migrations, "MIGRATIONS", (*migrations.MIGRATIONS, _PROBE))
        with Database(fresh.url("migrator")).connect() as conn:
            assert migrate(conn) == [LATEST + 1]
        with fresh.server_lock():
            fresh.apply_grants()  # and the file applies again over the upgraded schema


CAN: dict[str, list[Callable[[Scene], None]]] = {
    "app": [app_records_replays_and_pushes],
    "relay": [relay_hands_off_and_quarantines],
    "worker": [worker_runs_retries_dead_letters_and_reaps],
    "operator": [operator_runs_every_command],
    "migrator": [migrator_migrates],
}


@pytest.mark.parametrize(
    "role,part",
    [(r, p) for r, parts in CAN.items() for p in parts],
    ids=lambda v: getattr(v, "__name__", v),
)
def test_role_runs_its_part(
    granted: GrantedDatabase,
    monkeypatch: pytest.MonkeyPatch,
    role: str,
    part: Callable[[Scene], None],
) -> None:
    part(Scene(granted, monkeypatch))


# -- what each role is refused -------------------------------------------------------

_NEW_INTENT = (
    "INSERT INTO outbox_messages (message_id, key_digest, fingerprint, job_name, queue, state, "
    "created_at) VALUES ('m', 'k', 'f', 'n', 'q', 'pending', 0)"
)
_NEW_JOB = (
    "INSERT INTO outbox_jobs (message_id, queue, job_name, payload, attempts, available_at, "
    "created_at) VALUES ('m', 'q', 'n', '{}', 0, 0, 0)"
)
_NEW_DEAD = (
    "INSERT INTO outbox_failed_jobs (message_id, queue, job_name, payload, attempts, "
    "exception_class, failed_at) VALUES ('m', 'q', 'n', '{}', 1, 'E', 0)"
)
_READ_DEAD = "SELECT exception_message FROM outbox_failed_jobs"
_ALTER = "ALTER TABLE outbox_jobs ADD COLUMN intruder INTEGER"


@dataclass(frozen=True)
class No:
    """A refusal: ``what`` the role must not do, as ``sql``; ``only`` on these backends."""

    what: str
    sql: str
    only: tuple[str, ...] = ("postgresql", "mysql")


# MariaDB checks UPDATE on every column an INSERT ... ON DUPLICATE KEY UPDATE writes, so
# its app role holds UPDATE on the recorded columns (see ops/sql/mariadb-grants.sql).
_PG = ("postgresql",)

CANNOT: dict[str, list[No]] = {
    "app": [
        No("read other rows' payloads", "SELECT payload FROM outbox_messages"),
        No("read the queue's payloads", "SELECT payload FROM outbox_jobs"),
        No("delete an intent", "DELETE FROM outbox_messages WHERE 1 = 0"),
        No("delete a key", "DELETE FROM outbox_keys WHERE 1 = 0"),
        No("rewrite a key", "UPDATE outbox_keys SET fingerprint = 'x' WHERE 1 = 0", _PG),
        No(
            "mark an intent published",
            "UPDATE outbox_messages SET state = 'published' WHERE 1 = 0",
            _PG,
        ),
        No("delete a job", "DELETE FROM outbox_jobs WHERE 1 = 0"),
        No("change a job", "UPDATE outbox_jobs SET attempts = 0 WHERE 1 = 0"),
        No("read dead letters", _READ_DEAD),
        No("write a dead letter", _NEW_DEAD),
        No("alter a table", _ALTER),
    ],
    "relay": [
        No("read the queue", "SELECT payload FROM outbox_jobs"),
        No("claim a job", "UPDATE outbox_jobs SET reserved_by = 'x' WHERE 1 = 0"),
        No("delete a job", "DELETE FROM outbox_jobs WHERE 1 = 0"),
        No("rewrite a fingerprint", "UPDATE outbox_messages SET fingerprint = 'x' WHERE 1 = 0"),
        No("delete a key", "DELETE FROM outbox_keys WHERE 1 = 0"),
        No("rewrite a key", "UPDATE outbox_keys SET fingerprint = 'x' WHERE 1 = 0"),
        No("read dead letters", _READ_DEAD),
        No("alter a table", _ALTER),
    ],
    "worker": [
        No("read the outbox", "SELECT payload FROM outbox_messages"),
        No("read the keys", "SELECT fingerprint FROM outbox_keys"),
        No("record an intent", _NEW_INTENT),
        No("change an intent", "UPDATE outbox_messages SET state = 'failed' WHERE 1 = 0"),
        No("delete an intent", "DELETE FROM outbox_messages WHERE 1 = 0"),
        # (The worker inserts jobs since workflows: a node's acknowledgement makes its
        # dependents due, as queue rows, in that transaction.)
        No("record a workflow", "INSERT INTO outbox_workflows (workflow_id) VALUES ('x')"),
        No("rewrite a job's payload", "UPDATE outbox_jobs SET payload = '{}' WHERE 1 = 0"),
        No("read dead letters", _READ_DEAD),
        No("delete dead letters", "DELETE FROM outbox_failed_jobs WHERE 1 = 0"),
        No("resume a queue", "DELETE FROM outbox_paused_queues WHERE 1 = 0"),
        No("alter a table", _ALTER),
    ],
    "operator": [
        No("record an intent", _NEW_INTENT),
        No("rewrite a job's payload", "UPDATE outbox_jobs SET payload = '{}' WHERE 1 = 0"),
        No("claim a job", "UPDATE outbox_jobs SET reserved_by = 'x' WHERE 1 = 0"),
        # (It may write a dead letter: `queue cancel` moves a waiting job there.)
        No("change a job's priority", "UPDATE outbox_jobs SET priority = 0 WHERE 1 = 0"),
        No("change the schema version", "DELETE FROM outbox_schema_version WHERE 1 = 0"),
        No("alter a table", _ALTER),
    ],
}


@pytest.mark.parametrize(
    "backend,role,no",
    [(b, r, n) for b in SERVER_BACKENDS for r, rows in CANNOT.items() for n in rows if b in n.only],
    ids=lambda v: getattr(v, "what", v),
)
def test_role_is_refused(
    granted_on: Callable[[str], GrantedDatabase], backend: str, role: str, no: No
) -> None:
    g = granted_on(backend)
    assert g.denied(role, no.sql), f"{role} was allowed to {no.what}: {no.sql}"


def test_every_role_has_a_login_that_inherits(granted: GrantedDatabase) -> None:
    """PostgreSQL: the roles are NOLOGIN groups; each user logs in and inherits one."""
    if granted.backend != "postgresql":
        rows = granted.admin_sql(
            "SELECT User, default_role FROM mysql.user WHERE User LIKE %s",
            (granted.users["app"][:-3] + "%",),
            db=None,
        )
        assert {(str(u), str(r)) for u, r in rows} == {
            (user, f"outbox_{role}") for role, user in granted.users.items()
        }
        return
    groups = granted.admin_sql(
        "SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname LIKE 'outbox\\_%'"
    )
    assert {r for r, login in groups if not login} >= {f"outbox_{r}" for r in granted.users}
    for role, user in granted.users.items():
        (row,) = granted.admin_sql(
            "SELECT u.rolcanlogin, u.rolinherit, pg_has_role(u.oid, %s, 'MEMBER') "
            "FROM pg_roles u WHERE u.rolname = %s",
            (f"outbox_{role}", user),
        )
        assert row == (True, True, True)
