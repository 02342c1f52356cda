"""``outbox queue stats/jobs/failed/retry/forget/pause/resume/cancel --broker
nats://…|redis://…``: the same commands on JetStream (``outbox.jetstream.admin``) or
Redis (``outbox.queue.redis.control``). Output has the SQL commands' columns where the broker
has the figure; listings carry ids, names, classes and times, never a payload or an
exception message. (``queue remove`` and ``queue clear`` are the SQL queue's only.)"""

from __future__ import annotations

import asyncio
from typing import Any

import click
import orjson

from outbox.cli import keys, prompt, tables
from outbox.cli.broker_clients import require_client, require_redis_client
from outbox.errors import MessageNotFound
from outbox.jetstream.url import BrokerUrl
from outbox.queue.redis.url import RedisUrl

Url = BrokerUrl | RedisUrl


def _nats() -> Any:
    """The JetStream side (nats-py, the ``nats`` extra, imported only for it)."""
    require_client()
    from outbox.jetstream import admin, control
    from outbox.jetstream.connect import Broker

    return admin, control, Broker


def _redis(url: RedisUrl, name: str, *args: Any) -> Any:
    """``outbox.queue.redis.control.<name>(url, *args)``, run to its end."""
    require_redis_client()
    from outbox.queue.redis import control

    return asyncio.run(getattr(control, name)(url, *args))


def _admin(url: Url, name: str, *args: Any) -> Any:
    """The command ``name`` on the broker ``url`` names: ``outbox.queue.redis.control.<name>``
    or ``outbox.jetstream.admin.<name>``, with the same arguments after the URL."""
    if isinstance(url, RedisUrl):
        return _redis(url, name, *args)
    admin, _, Broker = _nats()
    with Broker(url) as broker:
        return getattr(admin, name)(broker, *args)


def stats(url: Url, as_json: bool) -> None:
    if isinstance(url, RedisUrl):
        _redis_stats(url, as_json)
        return
    admin, _, Broker = _nats()
    with Broker(url) as broker:
        rows = admin.stats(broker)
    if as_json:
        data = {
            r.queue: {
                "ready": r.ready,
                "reserved": r.reserved,
                "dead": r.dead,
                "dead_letters": r.dead,
            }
            for r in rows
        }
        click.echo(orjson.dumps({"broker": url.shown, "queues": data}).decode())
        return
    tables.echo_table(
        ["QUEUE", "READY", "RESERVED", "DEAD_LETTERS"],
        [[r.queue, r.ready, r.reserved, r.dead] for r in rows],
        nothing="no queues on NATS",
        right={1, 2, 3},
    )


def _redis_stats(url: RedisUrl, as_json: bool) -> None:
    from outbox.queue.redis import control

    rows = _redis(url, "stats")
    if as_json:
        click.echo(control.dumps(rows, url.shown))
        return
    tables.echo_table(
        ["QUEUE", "READY", "RESERVED", "DELAYED", "DEAD_LETTERS"],
        [[r.queue, r.ready, r.reserved, r.delayed, r.dead] for r in rows],
        nothing="no queues on Redis",
        right={1, 2, 3, 4},
    )


def failed(url: Url, limit: int, show_id: str | None) -> None:
    where = "Redis" if isinstance(url, RedisUrl) else "NATS"
    rows = _admin(url, "failed", None if show_id else limit)
    if show_id is not None:
        match = [r for r in rows if r.message_id == show_id]
        if not match:
            raise MessageNotFound(f"no dead letter on {where} has message id {show_id}")
        d = match[0]
        click.echo(f"MESSAGE_ID:  {d.message_id}")
        click.echo(f"QUEUE:       {d.queue}")
        click.echo(f"JOB:         {d.job_name or tables.NONE}")
        click.echo(f"TRIES:       {d.attempts}/{d.max_attempts or tables.NONE}")
        click.echo(f"DEAD_AT:     {tables.utc(d.failed_at_ms)}")
        message, trace = d.body.get("exception_message"), d.body.get("exception_trace")
        payload = d.body.get("payload")
        keys.echo_failure(d.exception_class, None if message is None else str(message),
                          None if trace is None else str(trace),
                          None if payload is None else str(payload))  # fmt: skip
        return
    tables.echo_dead_letters(
        [
            (r.message_id, r.queue, r.job_name, r.attempts, r.failed_at_ms, r.exception_class)
            for r in rows
        ],
        limit,
        nothing=f"no dead letters on {where}",
    )


def retry(url: Url, target: str) -> None:
    n = _admin(url, "retry", None if target == "all" else target)
    click.echo(f"re-drove {n} job(s) onto their queues")


def forget(url: Url, message_id: str, yes: bool) -> None:
    if isinstance(url, RedisUrl):
        prompt.confirm(yes, f"Delete dead letter {message_id} from Redis for good?")
        _redis(url, "forget", message_id)
        click.echo(f"forgot {message_id}")
        return
    admin, _, Broker = _nats()
    with Broker(url) as broker:
        prompt.confirm(yes, f"Delete dead letter {message_id} from NATS for good?")
        admin.forget(broker, message_id)
    click.echo(f"forgot {message_id}")


def pause(url: Url, queue: str) -> None:
    if isinstance(url, RedisUrl):
        changed, known = _redis(url, "pause", queue)
        if changed and not known:  # as the SQL queue says it (outbox.cli.queue)
            click.echo(
                f"paused queue {queue}; it has no keys on Redis now (a new queue, or a "
                "mistyped name?): jobs that arrive in it wait until it is resumed"
            )
            return
    else:
        _, control, Broker = _nats()
        with Broker(url) as broker:
            changed = broker.call(control.pause(broker.js, queue), 10.0)
    click.echo(f"paused queue {queue}" if changed else f"queue {queue} was paused already")


def resume(url: Url, queue: str) -> None:
    if isinstance(url, RedisUrl):
        changed = _redis(url, "resume", queue)
    else:
        _, control, Broker = _nats()
        with Broker(url) as broker:
            changed = broker.call(control.resume(broker.js, queue), 10.0)
    click.echo(f"resumed queue {queue}" if changed else f"queue {queue} was not paused")


def cancel(url: Url, message_id: str) -> None:
    how = _admin(url, "cancel", message_id)
    if how == "dead":
        click.echo(f"cancelled {message_id} (moved to the dead letters)")
    else:
        click.echo(
            f"cancelling {message_id}: a worker has it; it will be recorded as cancelled"
        )


HEADERS = ["MESSAGE_ID", "QUEUE", "JOB", "STATE", "PRIORITY", "MAX_TRIES", "DUE"]


def jobs(url: Url, queue: str | None, limit: int) -> None:
    """The SQL listing's columns where the broker has the figure (no lease, no last
    error: an entry carries neither), and where the job is: JetStream's stream sequence,
    or the Redis stream entry id ("-" in the delayed set)."""
    rows = _admin(url, "jobs", queue, limit)
    if isinstance(url, RedisUrl):
        where, header = "Redis", "ENTRY"
        last: list[Any] = [r.entry.decode() if r.entry else tables.NONE for r in rows]
    else:
        where, header, last = "NATS", "SEQ", [r.job.id for r in rows]
    tables.echo_table(
        [*HEADERS, header],
        [
            [
                r.job.message_id,
                r.job.queue,
                r.job.job_name,
                r.state,
                r.job.priority,
                r.job.max_attempts or tables.NONE,
                tables.utc(r.job.available_at or None),
                at,
            ]
            for r, at in zip(rows, last, strict=True)
        ],
        nothing=f"no jobs in {f'queue {queue}' if queue else 'a queue'} on {where}",
        right={4, 5, 7},
    )
    if rows:
        click.echo(tables.shown(len(rows), limit))
