"""Privacy: with a marker in every payload and every exception message, the marker shows
up only in the dead-letter row and in ``outbox queue failed --show``; never in a log
line, a status, a list, or any other command's output."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from outbox import Job, record
from outbox.cli import main
from tests.fixtures.databases import backend_of, raw_connect
from tests.fixtures.fault_harness import QUEUE, cli_argv, fetch, finish, spawn, worker_argv

MARKER = "PRIVATE-7f3a-MARKER"
#: every listing/status command; none may print the marker
COMMANDS: list[list[str]] = [
    ["status"],
    ["status", "--json"],
    ["failed"],
    ["prune", "0"],
    ["queue", "jobs"],
    ["queue", "stats"],
    ["queue", "failed"],
]


def _seed(url: str) -> dict[str, str]:
    app = raw_connect(url)
    ids = {
        "ok": record(app, "p:ok", Job("harness.exec", {"secret": MARKER}, queue=QUEUE)),
        "retry": record(app, "p:retry", Job("harness.exec", {"fail": MARKER}, queue=QUEUE)),
        "dead": record(app, "p:dead", Job("harness.exec", {"permanent": MARKER}, queue=QUEUE)),
        "bad": record(app, "p:bad", Job("harness.exec", {"secret": MARKER}, queue=QUEUE)),
    }
    app.commit()
    ph = "?" if backend_of(url) == "sqlite" else "%s"
    cur = app.cursor()
    cur.execute(
        f"UPDATE outbox_messages SET fingerprint = 'x' WHERE message_id = {ph}", (ids["bad"],)
    )
    app.commit()
    app.close()
    return ids


def _run(url: str, args: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    code, out, err = finish(spawn(cli_argv(url, "--log-level", "debug", *args), env), 120)
    return code, out + err


def _command(url: str, args: list[str]) -> str:
    """A listing command in-process (``CliRunner``, debug logs in JSON on its captured
    stderr): the same code and log lines as in a subprocess, without an interpreter start
    for each; the relay and the worker, whose logs the search is mostly about, stay real
    processes."""
    said = CliRunner().invoke(
        main, ["--database-url", url, "--log-format", "json", "--log-level", "debug", *args]
    )
    return said.output + said.stderr


@pytest.mark.slow
def test_the_marker_appears_only_in_the_dead_letter(ledger_url: str, tmp_path: Path) -> None:
    ids = _seed(ledger_url)
    outputs: dict[str, str] = {}
    code, outputs["relay"] = _run(ledger_url, ["relay"])
    assert code == 0, outputs["relay"]
    env = {"HARNESS_URL": ledger_url}
    worker = spawn(worker_argv(ledger_url, "--stop-when-empty", log_level="debug"), env)
    code, out, err = finish(worker, 120)
    assert code == 0, err
    outputs["worker"] = out + err

    known = set(main.commands)
    for args in COMMANDS:
        if args[0] not in known:  # `outbox queue` is still being built
            continue
        outputs[" ".join(args)] = _command(ledger_url, args)
    if "queue" in known:
        shown = _command(ledger_url, ["queue", "failed", "--show", ids["dead"]])
        assert MARKER in shown
    if "retry" in known:
        outputs["retry"] = _command(ledger_url, ["retry", ids["bad"]])

    leaks = {name: text for name, text in outputs.items() if MARKER in text}
    assert leaks == {}
    dead: list[Any] = fetch(ledger_url, "SELECT payload, exception_message FROM outbox_failed_jobs")
    assert len(dead) == 1 and MARKER in dead[0][0] and MARKER in dead[0][1]
    in_queue = fetch(ledger_url, "SELECT last_error FROM outbox_jobs")
    assert all(MARKER not in str(r[0]) for r in in_queue)
    reasons = fetch(ledger_url, "SELECT failure_reason FROM outbox_messages")
    assert all(MARKER not in str(r[0]) for r in reasons)
    assert "relay.batch" in outputs["relay"], "the relay logged nothing; the search proves nothing"
    assert "job.retry" in outputs["worker"], "the worker logged no failure; nothing was searched"
