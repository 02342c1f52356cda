"""Producers for the fault harness: an application's transactions, in a process of its own.

``produce`` writes a business row and its intent in one transaction (a share rolled back
on purpose) and recovers from lost connections the way an application should: reconnect,
read its own business row back, and run the transaction again with the same key.
``storm`` records overlapping hot keys in random order to provoke deadlocks.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from outbox import record
from outbox.errors import OutboxError, RetryTransaction
from tests.fixtures.databases import backend_of, raw_connect
from tests.fixtures.fault_harness import harness_job, placeholder


class Cut(Exception):
    """The transaction's connection was lost; its outcome must be read back."""


@dataclass
class ProducerStats:
    committed: int = 0
    rolled_back: int = 0
    retries: int = 0
    record_errors: Counter[str] = field(default_factory=Counter)
    other_errors: Counter[str] = field(default_factory=Counter)
    leaked: Counter[str] = field(default_factory=Counter)
    messages: list[str] = field(default_factory=list)

    def as_json(self) -> str:
        return json.dumps(
            {
                "committed": self.committed,
                "rolled_back": self.rolled_back,
                "retries": self.retries,
                "record_errors": dict(self.record_errors),
                "other_errors": dict(self.other_errors),
                "leaked": dict(self.leaked),
                "messages": sorted(set(self.messages))[:20],
            }
        )


class Producer:
    """An application writing business rows and intents, recovering from lost connections.

    After a cut it reconnects with backoff and reads its own business row back: present
    means the transaction landed; absent means it runs the transaction again with the
    same key and job, which ``record()``'s idempotency makes safe.
    """

    def __init__(self, url: str, stats: ProducerStats) -> None:
        self.url = url
        self.ph = placeholder(url)
        self.stats = stats
        self.conn: Any = None

    def connect(self, deadline: float) -> None:
        pause = 0.05
        while True:
            try:
                self.conn = raw_connect(self.url)
                return
            except Exception as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError("producer cannot reconnect") from exc
                time.sleep(pause)
                pause = min(pause * 2, 1.0)

    def drop(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()
        self.conn = None

    def settled(self, key: str, rollback: bool) -> bool:
        table = "harness_rollbacks" if rollback else "harness_orders"
        cur = self.conn.cursor()
        cur.execute(f"SELECT count(*) FROM {table} WHERE k = {self.ph}", (key,))
        found = int(cur.fetchall()[0][0])
        self.conn.rollback()
        return found == 1

    def attempt(self, key: str, n: int, rollback: bool) -> None:
        try:
            mid = record(self.conn, key, harness_job(key, n))
        except RetryTransaction:
            raise
        except OutboxError as exc:
            self.stats.record_errors[type(exc).__name__] += 1
            self.stats.messages.append(str(exc))
            raise Cut from exc
        except Exception as exc:
            self.stats.leaked[type(exc).__name__] += 1
            raise Cut from exc
        try:
            cur = self.conn.cursor()
            cur.execute(
                f"INSERT INTO harness_orders (k, message_id) VALUES ({self.ph}, {self.ph})",
                (key, mid),
            )
            if rollback:
                self.conn.rollback()
                cur = self.conn.cursor()
                cur.execute(f"INSERT INTO harness_rollbacks (k) VALUES ({self.ph})", (key,))
            self.conn.commit()
        except Exception as exc:
            self.stats.other_errors[type(exc).__name__] += 1
            raise Cut from exc

    def one(self, key: str, n: int, rollback: bool, deadline: float) -> None:
        first = True
        while True:
            if self.conn is None:
                self.connect(deadline)
            try:
                if not first and self.settled(key, rollback):
                    break
                first = False
                self.attempt(key, n, rollback)
                break
            except RetryTransaction:
                self._rollback_quietly()
            except Cut:
                self.drop()
            except Exception as exc:  # e.g. the read-back itself hit the outage
                self.stats.other_errors[type(exc).__name__] += 1
                self.drop()
            self.stats.retries += 1
            if time.monotonic() > deadline:
                raise RuntimeError(f"producer gave up on {key}")
            time.sleep(random.uniform(0.0, 0.05))
        if rollback:
            self.stats.rolled_back += 1
        else:
            self.stats.committed += 1

    def _rollback_quietly(self) -> None:
        try:
            self.conn.rollback()
        except Exception:
            self.drop()


def produce(
    url: str,
    prefix: str,
    count: int,
    rollback_ratio: float = 0.1,
    seed: int = 0,
    pause_s: float = 0.0,
    give_up_s: float = 120.0,
) -> ProducerStats:
    """Record ``count`` intents keyed ``prefix:N``, a share rolled back on purpose.

    One intent is given up (the process fails) after ``give_up_s`` of retrying it.
    """
    rng = random.Random(seed)
    stats = ProducerStats()
    producer = Producer(url, stats)
    for n in range(count):
        deadline = time.monotonic() + give_up_s
        producer.one(f"{prefix}:{n}", n, rng.random() < rollback_ratio, deadline)
        if pause_s:
            time.sleep(pause_s)
    if producer.conn is not None:
        producer.drop()
    return stats


def storm(
    url: str, hot_keys: int, transactions: int, per_tx: int, seed: int, start_at: float = 0.0
) -> dict[str, Any]:
    """Transactions recording overlapping hot keys in random order, bumping hot counters.

    Built to deadlock: every abort the database confirms must reach the application as
    ``RetryTransaction`` (from ``record()``) or a retryable driver error (its own
    UPDATE), and running the transaction again must succeed. The storm's processes all
    begin at ``start_at`` (UNIX seconds), connected: started one after another, each ran
    its 40 transactions before the next was up, and on a quiet machine nothing overlapped.
    """
    from outbox.db.errors import is_retryable

    rng = random.Random(seed)
    ph = placeholder(url)
    conn = raw_connect(url)
    if backend_of(url) == "postgresql":
        # The default 1 s before PostgreSQL looks for a deadlock would make a storm slow.
        conn.execute("SET deadlock_timeout = '20ms'")
        conn.commit()
    ids: dict[str, str] = {}
    out: dict[str, Any] = {"committed": 0, "retried": 0, "errors": Counter(), "mismatch": []}
    time.sleep(max(0.0, start_at - time.time()))
    for _ in range(transactions):
        keys = rng.sample(range(hot_keys), per_tx)
        while True:
            try:
                got: dict[str, str] = {}
                cur = conn.cursor()
                for k in keys:
                    got[f"hot:{k}"] = record(conn, f"hot:{k}", harness_job(f"hot:{k}", k))
                    cur.execute(f"UPDATE harness_hot SET n = n + 1 WHERE id = {ph}", (k,))
                conn.commit()
            except RetryTransaction:
                out["retried"] += 1
                conn.rollback()
                continue
            except Exception as exc:
                conn.rollback()
                if not isinstance(exc, OutboxError) and is_retryable(exc):
                    out["retried"] += 1
                    continue
                out["errors"][type(exc).__name__] += 1
                break
            out["committed"] += 1
            for key, mid in got.items():
                if ids.setdefault(key, mid) != mid:
                    out["mismatch"].append(key)
            break
    conn.close()
    out["ids"] = ids
    out["errors"] = dict(out["errors"])
    return out


def install_hot_rows(url: str, hot_keys: int) -> None:
    conn = raw_connect(url)
    ph = placeholder(url)
    try:
        cur = conn.cursor()
        cur.execute("CREATE TABLE harness_hot (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
        for k in range(hot_keys):
            cur.execute(f"INSERT INTO harness_hot (id, n) VALUES ({ph}, 0)", (k,))
        conn.commit()
    finally:
        conn.close()
