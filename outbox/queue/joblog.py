"""The worker's per-job and start/stop log lines, the same on every broker.

The SQL worker (``outbox.queue.settle``, ``outbox.queue.worker``) and the broker worker
(``outbox.queue.broker``) log what follows an attempt under the same event names with the same
fields, so one dashboard query or alert reads either: ``job.retry`` and ``job.dead``
(warning), ``job.cancelled``, and ``worker.stopped`` with the run's counts. The logger
passed in is bound to the worker's ``worker_id``.

Encryption at rest shows as key ids and sizes, never a payload or a key:
``worker.started`` says which key id the worker encrypts with (``encryption``, "off"
without a keyring) and its keyring's ids; ``job.retry``/``job.dead`` give the stored
payload's size and the key id it is encrypted under (``payload_key``, null: plaintext).
"""

from __future__ import annotations

from typing import Any

from outbox.db.rows import ClaimedJob, Failure
from outbox.job import sealing
from outbox.queue.config import WorkerStats
from outbox.queue.policy import Action


def job_failed(
    log: Any,
    job: ClaimedJob,
    action: Action,
    failure: Failure,
    ran_s: float | None,
    max_attempts: int,
) -> None:
    """``job.retry`` or ``job.dead``: the attempt that failed, and its exception's class
    (never its message, which only the dead letter keeps)."""
    log.warning(
        f"job.{action}",
        message_id=job.message_id,
        queue=job.queue,
        job=job.job_name,
        attempt=job.attempts,
        duration_ms=None if ran_s is None else round(ran_s * 1000, 2),
        max_attempts=max_attempts,
        error=failure.exception_class,
        **payload_fields(job.payload),
    )


def payload_fields(text: str | None) -> dict[str, Any]:
    """What a log line says of a stored payload: its size and its key id, not its text."""
    return {
        "payload_bytes": None if text is None else len(text.encode()),
        "payload_key": sealing.key_id_of(text),
    }


def encryption_fields() -> dict[str, Any]:
    """``worker.started``'s fields on encryption: key ids only."""
    ring = sealing.active()
    if ring is None:
        return {"encryption": "off"}
    return {"encryption": ring.current, "keyring": list(ring.ids)}


def job_cancelled(log: Any, job: ClaimedJob) -> None:
    log.warning("job.cancelled", message_id=job.message_id, job=job.job_name)


def worker_stopped(log: Any, stats: WorkerStats) -> None:
    """``worker.stopped``: how it stopped and what the run did."""
    how = "stopped gracefully" if stats.graceful else "stopped with jobs unfinished"
    log.info(
        "worker.stopped",
        outcome=how,
        claimed=stats.claimed,
        succeeded=stats.succeeded,
        retried=stats.retried,
        dead=stats.dead,
        released=stats.released,
        lost=stats.lost,
    )
