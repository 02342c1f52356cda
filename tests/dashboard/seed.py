"""Rows for the dashboard tests, made the way production makes them.

Intents are recorded with ``record()`` and handed off or quarantined by a real relay;
jobs are pushed with ``push()``; dead letters come from a real worker whose handler
fails permanently with the message it is given. Rows are edited by hand only where
production would need time or damage: a wrong fingerprint (what a damaged row looks
like), the failing handler's message in its payload, and times moved back by tests.
"""

from __future__ import annotations

import secrets
from typing import Any

import orjson

from outbox import Job, PermanentFailure, Registry, record
from outbox.db.connection import Database
from outbox.db.rows import ClaimedJob
from outbox.ids import new_message_id
from outbox.queue import JobContext, Worker, WorkerConfig, push
from outbox.relay import Relay, RelayConfig
from outbox.schedule.service import Scheduler
from tests.fixtures.databases import backend_of, raw_connect

PAYLOAD_MARKER = "PAYLOAD-SECRET-5d1f"
registry = Registry()


@registry.job("dash.fail")
def fail(payload: Any, ctx: JobContext) -> None:
    raise PermanentFailure(payload["message"])


@registry.job("mail.send")
def send(payload: Any, ctx: JobContext) -> None:
    return None


@registry.job("dash.flaky")
def flaky(payload: Any, ctx: JobContext) -> None:
    raise RuntimeError("try again later")


# The Schedules page's registry (``outbox dashboard --app tests.dashboard.seed:registry``).
@registry.periodic("* * * * *", name="dash.every_minute", queue="periodic")
def every_minute(payload: Any, ctx: JobContext) -> None:
    return None


registry.schedule("0 3 * * *", name="dash.nightly_berlin", job="dash.report",
                  queue="periodic", timezone="Europe/Berlin")


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def _ph(url: str) -> str:
    return "?" if backend_of(url) == "sqlite" else "%s"


def push_jobs(
    url: str, queue: str, names: list[str], *, delay: float = 0, priorities: list[int] | None = None
) -> list[str]:
    app = raw_connect(url)
    each = priorities or [0] * len(names)
    try:
        ids = [
            push(app, Job(n, {"secret": PAYLOAD_MARKER}, queue=queue, priority=p), delay)
            for n, p in zip(names, each, strict=True)
        ]
        app.commit()
        return ids
    finally:
        app.close()


def dead_letters(url: str, count: int, *, message: str = "boom", queue: str = "") -> list[str]:
    """``count`` dead letters in a queue of their own, from a real worker run."""
    queue = queue or unique("dead")
    ids = push_jobs(url, queue, ["dash.fail"] * count)
    app = raw_connect(url)
    try:  # the handler reads its message from the payload
        cur = app.cursor()
        cur.execute(
            f"UPDATE outbox_jobs SET payload = {_ph(url)} WHERE queue = {_ph(url)}",
            ('{"message": ' + _json_str(message) + ', "secret": "' + PAYLOAD_MARKER + '"}',
             queue),
        )
        app.commit()
    finally:
        app.close()
    config = WorkerConfig(queues={queue: None}, stop_when_empty=True, sleep=0.05)
    Worker(Database(url), registry, config).run()
    return ids


def claimed(queue: str, n: int = 1) -> list[ClaimedJob]:
    """``n`` jobs as a worker holds them, for a ``Tally`` to count (never written)."""
    return [ClaimedJob(i, new_message_id(), queue, "dash.job", "{}", 1, None, 0, 0)
            for i in range(n)]


def run_queue(url: str, queue: str) -> None:
    """A real worker drains ``queue`` (what it settles is what the chart counts)."""
    config = WorkerConfig(queues={queue: None}, stop_when_empty=True, sleep=0.05)
    Worker(Database(url), registry, config).run()


def schedule(url: str) -> list[str]:
    """One scheduler look: each schedule's latest due tick is recorded (pending intents)."""
    with Scheduler(Database(url), registry) as scheduler:
        return [r.message_id or "" for r in scheduler.run_once()]


def _json_str(text: str) -> str:
    return orjson.dumps(text).decode()


def intents(url: str, count: int, *, queue: str = "mail") -> list[str]:
    app = raw_connect(url)
    try:
        ids = [
            record(app, unique("key"), Job("mail.send", {"secret": PAYLOAD_MARKER}, queue=queue))
            for _ in range(count)
        ]
        app.commit()
        return ids
    finally:
        app.close()


def relay(url: str) -> None:
    with Relay(Database(url), RelayConfig()) as r:
        r.run()


def quarantined(url: str, count: int) -> dict[str, str]:
    """``count`` quarantined intents; returns message id → the fingerprint that repairs it."""
    ids = intents(url, count, queue=unique("q"))
    app = raw_connect(url)
    good: dict[str, str] = {}
    try:
        cur = app.cursor()
        for message_id in ids:
            cur.execute(
                f"SELECT fingerprint FROM outbox_messages WHERE message_id = {_ph(url)}",
                (message_id,),
            )
            good[message_id] = cur.fetchone()[0]
            ph = _ph(url)
            cur.execute(
                f"UPDATE outbox_messages SET fingerprint = {ph} WHERE message_id = {ph}",
                ("0" * 64, message_id),
            )
        app.commit()
    finally:
        app.close()
    relay(url)
    return good


def repair(url: str, message_id: str, fingerprint: str) -> None:
    app = raw_connect(url)
    try:
        app.cursor().execute(
            f"UPDATE outbox_messages SET fingerprint = {_ph(url)} WHERE message_id = {_ph(url)}",
            (fingerprint, message_id),
        )
        app.commit()
    finally:
        app.close()


def scalar(url: str, sql: str, *params: Any) -> Any:
    """One value (None for a statement that returns none); ``sql`` uses ``?``
    placeholders, turned into the driver's; committed."""
    app = raw_connect(url)
    try:
        cur = app.cursor()
        cur.execute(sql.replace("?", _ph(url)), params)
        row = cur.fetchone() if cur.description else None
        app.commit()
        return row[0] if row else None
    finally:
        app.close()


def is_dead(url: str, message_id: str) -> bool:
    return bool(scalar(url, "SELECT count(*) FROM outbox_failed_jobs WHERE message_id = ?",
                       message_id))


def is_queued(url: str, message_id: str) -> bool:
    return bool(scalar(url, "SELECT count(*) FROM outbox_jobs WHERE message_id = ?", message_id))


def is_paused(url: str, queue: str) -> bool:
    return bool(scalar(url, "SELECT count(*) FROM outbox_paused_queues WHERE queue = ?", queue))


def paused_queues(url: str) -> list[str]:
    app = raw_connect(url)
    try:
        cur = app.cursor()
        cur.execute("SELECT queue FROM outbox_paused_queues ORDER BY queue")
        return [str(r[0]) for r in cur.fetchall()]
    finally:
        app.close()


def intent_state(url: str, message_id: str) -> str | None:
    value = scalar(url, "SELECT state FROM outbox_messages WHERE message_id = ?", message_id)
    return None if value is None else str(value)


def seed_site(url: str) -> dict[str, Any]:
    """A database an operator would recognise: several queues, handed-off intents, pending
    ones, quarantined ones, delayed and ready jobs, dead letters."""
    handed_off = intents(url, 40, queue="mail")
    intents(url, 25, queue="search")
    relay(url)
    push_jobs(url, "search", ["dash.flaky"] * 2)
    run_queue(url, "search")  # 25 succeed, 2 fail once and wait for their retry
    intents(url, 6, queue="mail")  # (handed off by the relay run of quarantined() below)
    push_jobs(url, "billing", ["billing.charge"] * 12 + ["billing.refund"] * 3)
    push_jobs(url, "billing", ["billing.reminder"] * 5, delay=3600)
    dead = dead_letters(url, 3, message="card declined", queue="reports")
    return {"dead": dead, "quarantined": quarantined(url, 2), "handed_off": handed_off}
