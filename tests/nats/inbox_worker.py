"""A JetStream worker process with an inbox that SIGKILLs itself between a transactional
handler's COMMIT and its ack, for the inbox's fault test (``test_inbox.py``).

``python -m tests.nats.inbox_worker NATS_URL DATABASE_URL QUEUE SEED``: runs the
harness's ``harness.tx`` (its ledger row commits in the job's transaction, see
``tests/reliability/ledger_app.py``). After each settled job that committed, the hook
(called after the commit, before the ack is sent) kills the process with probability
1/3, so the ack of a committed job never leaves. ``HARNESS_URL`` must name the database.
"""

from __future__ import annotations

import os
import random
import signal
import sys

from outbox.db.connection import Database
from outbox.db.rows import ClaimedJob
from outbox.hooks import NoHooks
from outbox.jetstream.connect import parse_url
from outbox.jetstream.worker import JetStreamWorker
from outbox.queue.config import WorkerConfig
from tests.reliability.ledger_app import registry


class KillAfterCommit(NoHooks):
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def job_settled(self, job: ClaimedJob, action: str, delay_ms: int, error: str | None) -> None:
        if action == "ack" and self.rng.random() < 1 / 3:
            os.kill(os.getpid(), signal.SIGKILL)


def main() -> int:
    nats_url, db_url, queue, seed = sys.argv[1:5]
    config = WorkerConfig(
        queues={queue: None}, concurrency=2, prefetch=2, lease=1.0, sleep=0.2,
        stop_when_empty=True,
    )
    worker = JetStreamWorker(
        parse_url(nats_url), registry, config, hooks=KillAfterCommit(int(seed)),
        database=Database(db_url),
    )
    return 0 if worker.run().graceful else 1


if __name__ == "__main__":
    sys.exit(main())
