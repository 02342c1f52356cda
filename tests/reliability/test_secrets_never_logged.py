"""No password from the database URL, and no payload, reaches a log line or an error.

Every part of the product runs as an operator runs it (the real ``outbox`` command line,
debug logging, JSON and console formats) with the password in each place a URL can
carry it: ``user:password@``, ``?password=``, and percent-encoded (a password with
``@ / : %`` in it). The payloads carry a marker; the worker meets a job that fails (and
is retried) and one that fails permanently (and is dead-lettered). Then the same
commands run against servers that do not answer, on PostgreSQL and MariaDB, because a
connection error is where a driver likes to quote its connection string. Every line of
stdout and stderr is searched for the password in both spellings and for the marker.

PostgreSQL's test server trusts loopback connections, so any password is accepted and
the commands really run; the dead-letter row is the one place the marker may be.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from click.testing import CliRunner
from sqlalchemy.engine import make_url

from outbox import Job, record
from outbox.cli import main
from outbox.db.connection import Database
from outbox.errors import DatabaseError, IdempotencyConflict, InvalidJob
from tests.fixtures.databases import backend_of, raw_connect
from tests.fixtures.fault_harness import QUEUE, cli_argv, fetch, finish, spawn, worker_argv
from tests.fixtures.gaps import Gap, skip_unless

MARKER = "PAYLOAD-51d0-MARKER"
PASSWORD = "Pw-51d0-plain"
SPECIAL = "Pw-51d0@enc/od:ed%"  # needs percent-encoding in a URL
SECRETS = (PASSWORD, SPECIAL, quote(SPECIAL, safe=""), "51d0-plain", "enc/od", "51d0@enc")
#: every command an operator runs against a live database, after relay and worker
COMMANDS: list[list[str]] = [
    ["status"],
    ["status", "--json", "--max-dead", "0"],
    ["failed"],
    ["queue", "jobs"],
    ["queue", "stats"],
    ["queue", "failed"],
    ["schedule", "list", "--app", "tests.fixtures.apps.scheduler:registry"],
    ["scheduler", "--app", "tests.fixtures.apps.scheduler:registry", "--once"],
    ["prune", "0"],
]


SEEDS = (("ok", "secret"), ("retry", "fail"), ("dead", "permanent"))


def _forms(db_url: str) -> dict[str, str]:
    """The test database's URL with a password in each position a URL can hold one."""
    u = make_url(db_url)
    where = f"{u.host}:{u.port or 5432}/{u.database}"
    options = f"options={quote(str(u.query['options']), safe='')}"
    return {
        "userinfo": f"postgresql://{u.username}:{PASSWORD}@{where}?{options}",
        "query": f"postgresql://{u.username}@{where}?password={PASSWORD}&{options}",
        "encoded": f"postgresql://{u.username}:{quote(SPECIAL, safe='')}@{where}?{options}",
    }


def _leaks(text: str) -> list[str]:
    return [s for s in (*SECRETS, MARKER) if s in text]


def _seed(db_url: str, kinds: tuple[tuple[str, str], ...] = SEEDS, tag: str = "") -> dict[str, str]:
    app = raw_connect(db_url)
    ids = {
        name: record(app, f"s:{name}{tag}", Job("harness.exec", {key: MARKER}, queue=QUEUE))
        for name, key in kinds
    }
    app.commit()
    app.close()
    return ids


def _cli(url: str, *args: str, fmt: str = "json") -> tuple[int, str]:
    argv = cli_argv(url, "--log-level", "debug", *args)
    argv[argv.index("--log-format") + 1] = fmt
    code, out, err = finish(spawn(argv), 120)
    return code, out + err


@pytest.mark.slow
def test_no_password_or_payload_in_any_output(ledger_url: str) -> None:
    skip_unless(backend_of(ledger_url), "postgresql", gap=Gap.TRUSTED_LOGIN)
    ids = _seed(ledger_url)
    outputs: dict[str, str] = {}
    for form, url in _forms(ledger_url).items():
        if form != "userinfo":  # a dead letter of its own for this form's worker
            _seed(ledger_url, (("dead", "permanent"),), tag=f":{form}")
        code, outputs[f"{form}: migrate"] = _cli(url, "migrate", fmt="console")
        assert code == 0, outputs[f"{form}: migrate"]
        code, outputs[f"{form}: relay"] = _cli(url, "relay")
        assert code == 0, outputs[f"{form}: relay"]
        code, out, err = finish(
            spawn(
                worker_argv(url, "--stop-when-empty", log_level="debug"),
                {"HARNESS_URL": ledger_url},
            ),
            120,
        )
        assert code == 0, err
        outputs[f"{form}: worker"] = out + err
        assert "job.dead" in out + err, f"{form}: the worker met no failing job"
        # Every command once (first form); each form's own connect path via status. The
        # dead letter's second round (retry, dead again) is the same whatever the form.
        for args in COMMANDS if form == "userinfo" else [["status", "--json"]]:
            outputs[f"{form}: {' '.join(args)}"] = _cli(url, *args)[1]
        if form != "userinfo":
            continue
        outputs[f"{form}: queue retry"] = _cli(url, "queue", "retry", ids["dead"], "--yes")[1]
        # the requeued dead letter fails permanently again: dead-lettered once more
        code, out, err = finish(
            spawn(
                worker_argv(url, "--stop-when-empty", log_level="debug"),
                {"HARNESS_URL": ledger_url},
            ),
            120,
        )
        outputs[f"{form}: worker again"] = out + err
    leaks = {name: _leaks(text) for name, text in outputs.items() if _leaks(text)}
    assert leaks == {}
    everything = "\n".join(outputs.values())
    for event in ("relay.batch", "job.retry", "job.dead", "worker.started", "schedule"):
        assert event in everything, f"no {event} logged: the search proves nothing"
    dead = fetch(ledger_url, "SELECT payload FROM outbox_failed_jobs")
    assert dead and all(MARKER in row[0] for row in dead)  # the marker was there to leak


UNREACHABLE = {
    "postgresql": [
        f"postgresql://u:{PASSWORD}@127.0.0.1:1/db",
        f"postgresql://u@127.0.0.1:1/db?password={PASSWORD}",
        f"postgresql://u:{quote(SPECIAL, safe='')}@127.0.0.1:1/db",
    ],
    "mysql": [
        f"mysql://u:{PASSWORD}@127.0.0.1:1/db",
        f"mysql://u:{quote(SPECIAL, safe='')}@127.0.0.1:1/db",
    ],
}
OFFLINE = [
    ["migrate"],
    ["relay"],
    ["status", "--json"],
    ["failed"],
    ["prune", "0"],
    ["queue", "stats"],
    ["queue", "retry", "all"],
    ["retry", "00000000-0000-4000-8000-000000000000"],
]


@pytest.mark.parametrize("kind", sorted(UNREACHABLE))
def test_a_database_that_does_not_answer_never_gets_its_password_quoted(kind: str) -> None:
    """In-process (``CliRunner``, debug logs on its captured stderr), for speed: the
    error path is the same code as in a subprocess, without an interpreter start each."""
    for url in UNREACHABLE[kind]:
        for args in OFFLINE:
            result = CliRunner().invoke(
                main, ["--database-url", url, "--log-level", "debug", *args]
            )
            said = result.output + result.stderr
            assert result.exit_code == 1, (args, said)
            assert "cannot connect to" in said, (args, said)
            assert _leaks(said) == [], (url, args, said)
        with pytest.raises(DatabaseError) as caught:
            Database(url).connect()
        shown = f"{caught.value} {caught.value!r} {Database(url).describe()}"
        assert _leaks(shown) == [], shown


def test_record_errors_never_quote_the_payload(app_conn: object) -> None:
    record(app_conn, "k:1", Job("t.x", {"secret": MARKER}))
    with pytest.raises(IdempotencyConflict) as conflict:
        record(app_conn, "k:1", Job("t.x", {"secret": MARKER, "v": 2}))
    with pytest.raises(InvalidJob) as invalid:
        record(app_conn, "k:2", Job("t.x", {"secret": MARKER, "bad": {1, 2}}))
    with pytest.raises(InvalidJob) as too_big:
        record(app_conn, "k:3", Job("t.x", {"secret": MARKER * 5000}))
    for exc in (conflict.value, invalid.value, too_big.value):
        assert _leaks(f"{exc} {exc!r}") == [], exc
