"""A JetStream worker process with an inbox that SIGKILLs itself between a transactional
handler's COMMIT and its ack, for the inbox's fault test (``test_inbox.py``).

``python -m tests.nats.inbox_worker NATS_URL DATABASE_URL QUEUE SEED [P [APP]]``: runs
the harness's ``harness.tx`` (its ledger row commits in the job's transaction, see
``tests/reliability/ledger_app.py``), or the registry ``APP`` names. After each settled
job that committed, the hook (called after the commit, before the ack is sent) kills the
process with probability ``P`` (default 1/3), so the ack of a committed job never
leaves. ``HARNESS_URL`` must name the database.
"""

from __future__ import annotations

import os
import random
import signal
import sys

from outbox.cli.app import load_registry
from outbox.db.connection import Database
from outbox.db.rows import ClaimedJob
from outbox.hooks import NoHooks
from outbox.jetstream.connect import parse_url
from outbox.jetstream.worker import JetStreamWorker
from outbox.queue.config import WorkerConfig
from tests.reliability.ledger_app import registry


class KillAfterCommit(NoHooks):
    def __init__(self, seed: int, p: float) -> None:
        self.rng, self.p = random.Random(seed), p

    def job_settled(self, job: ClaimedJob, action: str, delay_ms: int, error: str | None) -> None:
        if action == "ack" and self.rng.random() < self.p:
            os.kill(os.getpid(), signal.SIGKILL)


def main() -> int:
    nats_url, db_url, queue, seed = sys.argv[1:5]
    p = float(sys.argv[5]) if len(sys.argv) > 5 else 1 / 3
    jobs = load_registry(sys.argv[6]) if len(sys.argv) > 6 else registry
    config = WorkerConfig(
        queues={queue: None}, concurrency=2, prefetch=2, lease=1.0, sleep=0.2,
        stop_when_empty=True,
    )
    worker = JetStreamWorker(
        parse_url(nats_url), jobs, config, hooks=KillAfterCommit(int(seed), p),
        database=Database(db_url),
    )
    return 0 if worker.run().graceful else 1


if __name__ == "__main__":
    sys.exit(main())
