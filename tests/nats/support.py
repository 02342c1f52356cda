"""Helpers of the NATS tests: recording intents, reading a stream without consuming it,
and the in-process relay target."""

from __future__ import annotations

import secrets
from collections import Counter
from typing import Any

from nats.js.errors import NotFoundError

from outbox import Job, record
from outbox.db.connection import Database
from outbox.jetstream import codec, names
from outbox.jetstream.connect import parse_url
from outbox.jetstream.provision import StreamSettings
from outbox.relay import Relay, RelayConfig
from outbox.relay.jetstream import JetStreamSettings, JetStreamTarget
from tests.fixtures.databases import raw_connect
from tests.nats.servers import run


def queue_name(prefix: str = "q") -> str:
    """A queue (and so streams) no other test uses on the session's servers."""
    return f"{prefix}{secrets.token_hex(4)}"


def record_jobs(
    url: str, queue: str, n: int, job: str = "t.ok", payload: Any = None, prefix: str = "k"
) -> list[str]:
    conn = raw_connect(url)
    try:
        ids = [
            record(
                conn,
                f"{prefix}{queue}{i}",
                Job(job, payload if payload is not None else {"i": i}, queue=queue),
            )
            for i in range(n)
        ]
        conn.commit()
        return ids
    finally:
        conn.close()


def target(
    url: str,
    *,
    provisioning: str = "create",
    streams: StreamSettings | None = None,
    publish_timeout: float = 5.0,
    in_flight: int = 2,
) -> JetStreamTarget:
    settings = JetStreamSettings(
        streams or StreamSettings(),
        provisioning,  # type: ignore[arg-type]
        publish_timeout,
        in_flight,
    )
    return JetStreamTarget(parse_url(url), settings, reconnect_max=5.0)


def relay(db: Database, url: str, batch_size: int = 100, **kw: Any) -> Relay:
    return Relay(
        db, RelayConfig(batch_size=batch_size, reconnect_max=5.0), target=target(url, **kw)
    )


def stream_ids(url: str, stream: str) -> Counter[str]:
    """How many times each message id sits in ``stream`` (read by sequence, not consumed)."""

    async def read(js: Any) -> Counter[str]:
        try:
            state = (await js.stream_info(stream)).state
        except NotFoundError:
            return Counter()
        seen: Counter[str] = Counter()
        if not state.messages:
            return seen
        for seq in range(state.first_seq, state.last_seq + 1):
            try:
                msg = await js.get_msg(stream, seq)
            except NotFoundError:
                continue
            seen[(msg.headers or {}).get(codec.MESSAGE_ID, "?")] += 1
        return seen

    return run(url, read)


def msg_ids(url: str, queue: str) -> list[tuple[str, str]]:
    """(Nats-Msg-Id, Outbox-Message-Id) of every message in ``queue``'s stream."""

    async def read(js: Any) -> list[tuple[str, str]]:
        state = (await js.stream_info(names.stream(queue))).state
        out = []
        for seq in range(state.first_seq, state.last_seq + 1):
            h = (await js.get_msg(names.stream(queue), seq)).headers or {}
            out.append((h.get(codec.MSG_ID, ""), h.get(codec.MESSAGE_ID, "")))
        return out

    return run(url, read)


def stream_count(url: str, stream: str) -> int:
    async def read(js: Any) -> int:
        try:
            return int((await js.stream_info(stream)).state.messages)
        except NotFoundError:
            return -1

    return run(url, read)


def outbox_rows(url: str) -> tuple[int, int]:
    """(intents still in outbox_messages, key rows)."""
    conn = raw_connect(url)
    try:
        cur = conn.cursor()
        cur.execute("SELECT count(*) FROM outbox_messages")
        pending = int(cur.fetchone()[0])
        cur.execute("SELECT count(*) FROM outbox_keys")
        return pending, int(cur.fetchone()[0])
    finally:
        conn.close()
