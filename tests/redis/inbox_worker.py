"""A Redis worker process with an inbox that SIGKILLs itself between a transactional
handler's COMMIT and its ack (the hook of ``tests.nats.inbox_worker``), for the inbox's
fault test on Redis (``test_worker_faults.py``).

``python -m tests.redis.inbox_worker REDIS_URL DATABASE_URL QUEUE SEED [P]``: runs the
harness's ``harness.tx`` (its ledger row commits in the job's transaction) and kills
itself after an ack with probability ``P`` (default 1/3); ``HARNESS_URL`` must name the
database.
"""

from __future__ import annotations

import sys

from outbox.db.connection import Database
from outbox.queue.config import WorkerConfig
from outbox.queue.redis.connect import parse_url
from outbox.queue.redis.worker import RedisWorker
from tests.nats.inbox_worker import KillAfterCommit
from tests.reliability.ledger_app import registry


def main() -> int:
    redis_url, db_url, queue, seed = sys.argv[1:5]
    p = float(sys.argv[5]) if len(sys.argv) > 5 else 1 / 3
    config = WorkerConfig(
        queues={queue: None}, concurrency=2, prefetch=2, lease=1.0, sleep=0.2,
        stop_when_empty=True,
    )
    worker = RedisWorker(
        parse_url(redis_url), registry, config, hooks=KillAfterCommit(int(seed), p),
        database=Database(db_url),
    )
    return 0 if worker.run().graceful else 1


if __name__ == "__main__":
    sys.exit(main())
