"""The NATS JetStream options of ``outbox relay``, ``worker``, ``status`` and ``queue``.

Kept apart so the commands themselves change by a decorator and a branch: ``--target``
(the relay) and ``--broker`` (the worker, ``status`` and ``queue``) take
``nats://host:4222[,host2:4222…]``; the stream options apply to streams ``create`` makes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from outbox.cli import preflight, tables
from outbox.cli.broker_clients import require_client, require_redis_client
from outbox.errors import ConfigurationError
from outbox.hooks import NO_HOOKS, Hooks
from outbox.jetstream import DEFAULT_DUPLICATE_WINDOW_S, MAX_IN_FLIGHT
from outbox.jetstream.url import BrokerUrl, is_broker_url, parse_url
from outbox.queue.redis.url import RedisUrl, is_redis_url
from outbox.queue.redis.url import parse_url as parse_redis_url

if TYPE_CHECKING:
    from outbox.cli.context import CliContext
    from outbox.jetstream.admin import StreamState
    from outbox.queue.config import WorkerConfig
    from outbox.queue.registry import Registry
    from outbox.relay.jetstream import JetStreamTarget

F = TypeVar("F", bound=Callable[..., Any])


def broker_url(value: str | None, option: str) -> Any:
    """``None`` for the SQL default; a parsed URL for ``nats://`` (``BrokerUrl``) or, for
    ``--broker``, ``redis://`` (``RedisUrl``); else a usage error that lists what is
    accepted, never echoing the value (it may hold a password)."""
    if value is None or value == "sql":
        return None
    redis_ok = option == "--broker"
    if redis_ok and is_redis_url(value):
        try:
            return parse_redis_url(value)
        except ConfigurationError as exc:
            raise click.BadParameter(str(exc), param_hint=option) from None
    if not is_broker_url(value):
        also = " or redis://host:6379/0" if redis_ok else ""
        raise click.BadParameter(
            f"accepted: sql or nats://host:4222[,host2:4222...]{also}", param_hint=option
        )
    try:
        return parse_url(value)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


QUEUE_BROKER_HELP = (
    "Act on NATS JetStream (nats://host:4222[,...]) or Redis (redis://host:6379/0) "
    "instead of the SQL queue. Default: the SQL queue."
)


def queue_admin() -> Any:
    """``outbox.cli.queue_broker``, imported when a ``queue`` command gets --broker (it
    asks for the client of the broker each URL names)."""
    from outbox.cli import queue_broker

    return queue_broker


def check_jetstream(url: BrokerUrl) -> None:
    """At start: the server answers, takes the login, and has JetStream enabled.

    Each is one line and exit 1 here, before a relay or worker runs and would otherwise
    meet a server without JetStream as a failed batch or a traceback.
    """
    from nats.errors import NoRespondersError
    from nats.js.errors import ServiceUnavailableError

    from outbox.jetstream.connect import Broker

    with Broker(url) as broker:
        try:
            broker.call(broker.js.account_info(), 10.0)
        except (ServiceUnavailableError, NoRespondersError):
            raise ConfigurationError(
                f"JetStream is not enabled on the NATS server at {url.shown}: start "
                "nats-server with -js (or a jetstream block in its configuration)"
            ) from None


def broker_option(help_text: str) -> Callable[[F], F]:
    return click.option("--broker", metavar="URL", default=None, help=help_text)


def target_options(fn: F) -> F:
    """``outbox relay``'s target and stream options."""
    for option in reversed(
        [
            click.option(
                "--target",
                metavar="URL",
                default="sql",
                show_default=True,
                help="Where intents go: sql (the queue table in this database), "
                "nats://host:4222[,host2:4222...] (one JetStream stream per queue) or "
                "redis://host:6379/0 (Redis Streams, one per queue and band).",
            ),
            click.option(
                "--provisioning",
                type=click.Choice(["create", "require"]),
                default="create",
                show_default=True,
                help="With nats://: create missing streams, or require them to exist (never "
                "creating or changing one).",
            ),
            click.option(
                "--duplicate-window",
                type=click.FloatRange(min=1),
                default=DEFAULT_DUPLICATE_WINDOW_S,
                show_default=True,
                help="With nats:// and create, or redis://: seconds the broker remembers a "
                "message id; the handoff is exactly once within it.",
            ),
            click.option(
                "--stream-max-msgs",
                type=click.IntRange(min=-1),
                default=-1,
                show_default=True,
                help="With nats:// and create, or redis://: a stream's message limit (-1: "
                "none); when full the relay backs off (Redis never trims).",
            ),
            click.option(
                "--stream-max-bytes",
                type=click.IntRange(min=-1),
                default=-1,
                show_default=True,
                help="With nats:// and create: a new stream's byte limit (-1: none).",
            ),
            click.option(
                "--replicas",
                type=click.IntRange(1, 5),
                default=1,
                show_default=True,
                help="With nats:// and create: copies of each new stream (3 in a 3-node cluster).",
            ),
            click.option(
                "--publish-timeout",
                type=click.FloatRange(min=0.1, max=60),
                default=10.0,
                show_default=True,
                help="With nats:// or redis://: seconds to wait for one batch's acknowledgements.",
            ),
            click.option(
                "--in-flight",
                type=click.IntRange(1, MAX_IN_FLIGHT),
                default=2,
                show_default=True,
                help="With nats:// or redis:// on PostgreSQL or MariaDB: batches in flight at "
                "once, each in its own transaction (one is published while another awaits its "
                "acknowledgements); "
                "1 publishes batch after batch in id order. SQLite always uses 1.",
            ),
        ]
    ):
        fn = option(fn)
    return fn


def make_target(
    target: str,
    provisioning: str,
    duplicate_window: float,
    stream_max_msgs: int,
    stream_max_bytes: int,
    replicas: int,
    publish_timeout: float,
    in_flight: int,
    reconnect_max: float,
) -> JetStreamTarget | None:
    """The relay's target from its options (``None``: the SQL queue), connected."""
    url = broker_url(target, "--target")
    if url is None:
        return None
    require_client()
    from outbox.jetstream.provision import StreamSettings
    from outbox.relay.jetstream import JetStreamSettings, JetStreamTarget

    streams = StreamSettings(duplicate_window, stream_max_msgs, stream_max_bytes, replicas)
    settings = JetStreamSettings(
        streams, "require" if provisioning == "require" else "create", publish_timeout, in_flight
    )
    check_jetstream(url)
    jet = JetStreamTarget(url, settings, reconnect_max=reconnect_max)
    jet.open()
    return jet


def target_status(value: str | None) -> list[StreamState] | None:
    """``outbox status --target``: each queue stream's fill and whether it refuses."""
    url = broker_url(value, "--target")
    if url is None:
        return None
    require_client()
    from outbox.jetstream import admin
    from outbox.jetstream.connect import Broker

    with Broker(url) as broker:
        return admin.streams(broker)


def target_json(states: list[StreamState]) -> dict[str, Any]:
    return {
        "streams": {
            s.stream: {
                "queue": s.queue,
                "messages": s.messages,
                "max_msgs": s.max_msgs,
                "bytes": s.bytes,
                "max_bytes": s.max_bytes,
                "refusing": s.refusing,
            }
            for s in states
        },
        "refusing": sorted(s.stream for s in states if s.refusing),
    }


def echo_target(states: list[StreamState]) -> None:
    click.echo("")
    tables.echo_table(
        ["STREAM", "MESSAGES", "MAX_MSGS", "BYTES", "MAX_BYTES", "ACCEPTS"],
        [
            [
                s.stream,
                s.messages,
                _limit(s.max_msgs),
                s.bytes,
                _limit(s.max_bytes),
                f"no: full ({s.refusing})" if s.refusing else "yes",
            ]
            for s in states
        ],
        nothing="no queue streams on NATS",
        right={1, 2, 3, 4},
    )


def _limit(n: int) -> str:
    return "-" if n < 0 else str(n)


def run_worker(
    cli: CliContext,
    url: BrokerUrl | RedisUrl,
    registry: Registry,
    config: WorkerConfig,
    metrics_port: int | None,
    metrics_bind: str,
) -> None:
    """``outbox worker --broker``: checked at start (the server — for JetStream, that it
    is enabled; for Redis, the login and the version, in the worker's connect — and for
    transactional handlers the inbox's database, migrated), then run until stopped."""
    from outbox.queue.broker.context import refuse_sql_only, transactional_jobs

    if isinstance(url, RedisUrl):
        require_redis_client()
    else:
        require_client()
    database = cli.database() if transactional_jobs(registry) else None
    refuse_sql_only(registry, config, database)  # before any connection
    if database is not None:
        with preflight.stop_on_signals() as stop:
            try:
                preflight.ready(database, wait=True, stop=stop)
            except preflight.Stopped:
                return
    if not isinstance(url, RedisUrl):
        check_jetstream(url)
    make = _worker_maker(url, registry, config, database)
    if metrics_port is None:
        if not make(NO_HOOKS).run().graceful:
            sys.exit(1)
        return
    from outbox.cli.broker_metrics import BrokerExporter, jetstream_pending, redis_pending

    box: list[Any] = []
    pending = redis_pending(url) if isinstance(url, RedisUrl) else jetstream_pending(url)
    exporter = BrokerExporter(
        url.shown, database, lambda: bool(box) and box[0].connected(), pending,
        queues=list(config.queues), jobs=registry,
    )
    exporter.start(metrics_bind, metrics_port)
    if database is not None:
        database.on_retry = exporter.transaction_retried
    try:
        box.append(make(exporter))
        graceful = box[0].run().graceful
    finally:
        exporter.stop()
    if not graceful:
        sys.exit(1)


def _worker_maker(
    url: BrokerUrl | RedisUrl, registry: Registry, config: WorkerConfig, database: Any
) -> Callable[[Hooks], Any]:
    """Makes the transport's worker, given its hooks (the exporter, or none)."""
    if isinstance(url, RedisUrl):
        from outbox.queue.redis.worker import RedisWorker

        return lambda hooks: RedisWorker(url, registry, config, hooks=hooks, database=database)
    from outbox.jetstream.worker import JetStreamWorker

    return lambda hooks: JetStreamWorker(url, registry, config, hooks=hooks, database=database)
