"""The handlers the harness's workers run: each execution leaves a row in the ledger.

``harness.exec`` is an ordinary handler: it writes its ledger row on a connection of
its own and commits it *before* the worker acknowledges, so an execution that dies
before its acknowledgement is still counted (an explained extra run).
``harness.tx`` is transactional: its ledger row commits with the acknowledgement, so
the ledger must show exactly one row per job whatever is killed.
A payload with ``"fail": "message"`` raises with that message on every attempt;
``"permanent": "message"`` raises ``PermanentFailure`` (dead-lettered at once).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from outbox.errors import PermanentFailure
from outbox.queue.registry import Registry
from tests.fixtures.databases import raw_connect
from tests.fixtures.fault_harness import placeholder

registry = Registry()
# Claims count attempts, so a job on a worker SIGKILLed over and over spends one each
# time; the fault runs must not turn repeated kills into dead letters.
MAX_ATTEMPTS = 20
_local = threading.local()
INSERT = (
    "INSERT INTO harness_ledger (message_id, worker, attempt, transactional, at_ms) VALUES ({0})"
)


class HarnessFailure(Exception):
    """Raised by a handler on purpose; its message may carry the privacy marker."""


def started_ms() -> int:
    return int(time.time() * 1000)


def _own_connection() -> Any:
    conn = getattr(_local, "conn", None)
    if conn is None:
        conn = _local.conn = raw_connect(os.environ["HARNESS_URL"])
    return conn


@registry.job("harness.exec", max_attempts=MAX_ATTEMPTS)
def run(payload: dict[str, Any], ctx: Any) -> None:
    if "fail" in payload:
        raise HarnessFailure(payload["fail"])
    if "permanent" in payload:
        raise PermanentFailure(payload["permanent"])
    url = os.environ["HARNESS_URL"]
    conn = _own_connection()
    ph = placeholder(url)
    try:
        cur = conn.cursor()
        cur.execute(
            INSERT.format(", ".join([ph] * 5)),
            (ctx.message_id, str(os.getpid()), ctx.attempt, 0, started_ms()),
        )
        conn.commit()
    except Exception:
        _local.conn = None  # e.g. the server restarted: reconnect on the next attempt
        raise


@registry.job("harness.tx", transactional=True, max_attempts=MAX_ATTEMPTS)
def run_tx(payload: dict[str, Any], ctx: Any) -> None:
    if "fail" in payload:
        raise HarnessFailure(payload["fail"])
    ph = placeholder(os.environ["HARNESS_URL"])
    ctx.connection.cursor().execute(
        INSERT.format(", ".join([ph] * 5)),
        (ctx.message_id, str(os.getpid()), ctx.attempt, 1, started_ms()),
    )
