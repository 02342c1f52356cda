"""Drives an earlier release's package (version 1, commit ee0df54; the previous release,
commit 34b8ded) against a database: run as a script with ``PYTHONPATH`` holding that
package first (so ``import outbox`` is that version), then this repository (for
``tests.fixtures``). ``populate`` writes version-1 states.

    python v1_actor.py URL migrate
    python v1_actor.py URL populate          rows in every v1 state (prints a JSON summary)
    python v1_actor.py URL record PREFIX N [REPLAY_PREFIX]
    python v1_actor.py URL record-same KEY   the same key three times, the third with
                                             another job; each call's id or error class
    python v1_actor.py URL relay             relay until nothing is pending
    python v1_actor.py URL relay-loop SECONDS [STOP_FILE]
                                             relay over and over until STOP_FILE exists
                                             (SECONDS bound it)
    python v1_actor.py URL drain QUEUE       run a worker until the queue is empty

Each prints one JSON line: what it did, message ids by key, error classes (never payloads).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import outbox
from outbox import Job, record
from outbox.db.connection import Database
from outbox.errors import IdempotencyConflict, RetryTransaction
from outbox.queue.registry import Registry
from outbox.queue.worker import Worker, WorkerConfig
from outbox.relay import Relay
from tests.fixtures.databases import raw_connect


def _record(url: str, key: str, job: Job) -> str:
    """One business transaction recording ``job`` under ``key``: the id, or the error."""
    for _ in range(20):
        app = raw_connect(url)
        try:
            mid = record(app, key, job)
            app.commit()
            return mid
        except RetryTransaction:
            app.rollback()
            time.sleep(0.01)
        except IdempotencyConflict:
            app.rollback()
            return "IdempotencyConflict"
        finally:
            app.close()
    return "RetryTransaction"


def _same_key_jobs(key: str) -> list[Job]:
    return [job_for(key), job_for(key), Job("upgrade.other", {"key": key}, queue="upgrade")]


def _record_once(url: str, key: str, job: Job) -> str:
    """One business transaction: the id it got, or the class of what it raised (rolled
    back)."""
    app = raw_connect(url)
    try:
        mid = record(app, key, job)
        app.commit()
        return mid
    except Exception as exc:
        app.rollback()
        return type(exc).__name__
    finally:
        app.close()


def job_for(key: str) -> Job:
    return Job("upgrade.echo", {"key": key}, queue="upgrade")


def main(url: str, what: str, *args: str) -> dict[str, Any]:
    db = Database(url)
    if what == "migrate":  # version 1 kept the runner in outbox.schemas
        try:
            from outbox.db.migrate import migrate
        except ImportError:
            from outbox.schemas import migrate  # type: ignore[attr-defined,no-redef]

        with db.connect() as c:
            return {"applied": migrate(c)}
    if what == "record":
        prefix, n = args[0], int(args[1])
        keys = [f"{prefix}{i}" for i in range(n)]
        if len(args) > 2:  # also replay keys another producer records
            keys += [f"{args[2]}{i}" for i in range(n)]
        return {"ids": {k: _record(url, k, job_for(k)) for k in keys}}
    if what == "record-same":
        return {"calls": [_record_once(url, args[0], job) for job in _same_key_jobs(args[0])]}
    if what == "relay":
        return {"handed_off": Relay(db).run().handed_off}
    if what == "relay-loop":
        until = time.monotonic() + float(args[0])
        stop = Path(args[1]) if len(args) > 1 else None
        total = 0
        with Relay(db) as relay:
            while time.monotonic() < until and not (stop is not None and stop.exists()):
                total += relay.run().handed_off
                time.sleep(0.01)
        return {"handed_off": total}
    if what == "drain":
        registry = Registry()
        registry.job("upgrade.echo")(lambda payload, ctx: None)
        registry.job("upgrade.fail", max_attempts=1)(_fail)
        config = WorkerConfig(queues={args[0]: 2}, stop_when_empty=True, listen=False)
        stats = Worker(db, registry, config).run()
        return {"succeeded": stats.succeeded, "dead": stats.dead}
    if what == "populate":
        return _populate(url, db)
    raise SystemExit(f"unknown command {what}")


def _fail(payload: Any, ctx: Any) -> None:
    raise RuntimeError("always")


def _populate(url: str, db: Database) -> dict[str, Any]:
    """Rows in every version-1 state: handed off (tombstones) with their jobs run, handed
    off and waiting in the queue, dead-lettered, quarantined, and pending."""
    ids: dict[str, str] = {}
    for i in range(5):
        ids[f"done{i}"] = _record(url, f"done{i}", Job("upgrade.echo", {"i": i}, queue="ran"))
    ids["dead0"] = _record(url, "dead0", Job("upgrade.fail", {"i": 0}, queue="ran"))
    Relay(db).run()
    main(url, "drain", "ran")
    for i in range(4):
        ids[f"queued{i}"] = _record(url, f"queued{i}", job_for(f"queued{i}"))
    ids["bad0"] = _record(url, "bad0", job_for("bad0"))
    with db.connect() as c:  # corrupt one row: the relay quarantines it
        c.execute_sql(
            f"UPDATE outbox_messages SET payload = '[' WHERE message_id = '{ids['bad0']}'"
        )
    Relay(db).run()
    for i in range(3):
        ids[f"pending{i}"] = _record(url, f"pending{i}", job_for(f"pending{i}"))
    return {"ids": ids, "version": outbox.__version__}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], *sys.argv[3:])), flush=True)
