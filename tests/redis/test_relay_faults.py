"""Real processes and real crashes: relays SIGKILLed while producers commit, and a Redis
with ``appendfsync always`` killed and restarted from its AOF under a watching relay.
Each ends with every intent on its stream exactly once."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis

from outbox.db.connection import Database
from outbox.status import pending_count
from tests.fixtures.databases import backend_of
from tests.fixtures.processes import wait_until
from tests.fixtures.redis_servers import RedisServer, message_ids, record_jobs
from tests.reliability import rows
from tests.reliability.conftest import SOAK_SIZED

ROUNDS, PER_TX = (600 if SOAK_SIZED else 60), 10  # the producer's transactions, and their size
TRAFFIC = f"1 producer, {PER_TX} intents a transaction; relays `--target redis://` (batch 25)"


def pending(db: Database) -> int:
    with db.connect() as conn:
        return pending_count(conn)


def start_relay(db_url: str, target: str, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """A watching relay whose log goes to the file ``log`` (a pipe nobody reads would
    fill and stop the relay at its next log line)."""
    argv = [sys.executable, "-m", "outbox", "--database-url", db_url, "relay", "--watch"]
    argv += ["--target", target, "--batch-size", "25", "--poll-interval", "0.05", *args]
    with log.open("ab") as err:
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)


def stop_relay(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)


class Producer(threading.Thread):
    """Commits ``rounds`` transactions of ``per_tx`` intents, a little apart."""

    def __init__(self, db_url: str, queue: str, rounds: int, per_tx: int) -> None:
        super().__init__(daemon=True)
        self.db_url, self.queue, self.rounds, self.per_tx = db_url, queue, rounds, per_tx
        self.ids: list[str] = []

    def run(self) -> None:
        for r in range(self.rounds):
            self.ids += record_jobs(self.db_url, self.queue, self.per_tx, prefix=f"r{r}-")
            time.sleep(0.02)


def test_relays_killed_at_random_leave_every_intent_on_its_stream_once(
    database: Database, db_url: str, redis_url: str, redis_queue: str, tmp_path: Path
) -> None:
    log, began = tmp_path / "relays.log", time.monotonic()
    rng = random.Random(os.getpid())
    producer = Producer(db_url, redis_queue, rounds=ROUNDS, per_tx=PER_TX)
    producer.start()
    kills = 0
    while producer.is_alive() or kills < 4:
        proc = start_relay(db_url, redis_url, log)
        time.sleep(rng.uniform(0.5, 1.2))  # about half of it starting the interpreter
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
    producer.join()
    proc = start_relay(db_url, redis_url, log)
    try:
        wait_until(lambda: pending(database) == 0, 60, "the last relay to hand everything off")
    finally:
        stop_relay(proc)
    with redis.Redis.from_url(redis_url) as client:
        seen = message_ids(client, redis_queue)
    assert len(producer.ids) == ROUNDS * PER_TX
    assert seen == {i: 1 for i in producer.ids}  # none lost, none twice
    _report(f"SIGKILL relays → Redis ({kills}x)", db_url, len(producer.ids), kills, TRAFFIC, began)


def test_a_redis_restart_with_aof_always_loses_nothing_it_acknowledged(
    database: Database, db_url: str, redis_aof: RedisServer, redis_queue: str, tmp_path: Path
) -> None:
    log, began = tmp_path / "relay.log", time.monotonic()
    producer = Producer(db_url, redis_queue, rounds=ROUNDS, per_tx=PER_TX)
    proc = start_relay(db_url, redis_aof.url + "?fsync=always", log, "--in-flight", "2")
    producer.start()
    try:
        for n in (1, 2):  # twice while the producer commits and the relay hands off
            wait_until(lambda: pending(database) < len(producer.ids), 30, "a handoff")
            time.sleep(0.3)
            redis_aof.restart()  # SIGKILL: only what Redis fsynced comes back
            restarts = n
        producer.join()
        try:
            wait_until(lambda: pending(database) == 0, 60, "the relay to catch up after restarts")
        except AssertionError as exc:  # what the relay said is what explains it
            raise AssertionError(f"{exc}; {pending(database)} pending; the relay's log ends:\n"
                                 f"{log.read_text()[-3000:]}") from None
    finally:
        stop_relay(proc)
    assert restarts == 2 and "Traceback" not in log.read_text()
    seen = message_ids(redis_aof.client(), redis_queue)
    # An intent leaves the outbox only once Redis acknowledged it, so a lost entry would
    # be missing here; a re-publish after a restart would be here twice.
    assert len(producer.ids) == ROUNDS * PER_TX
    assert seen == {i: 1 for i in producer.ids}
    fault = "redis-server SIGKILLed and restarted from its AOF, appendfsync always (2x)"
    traffic = TRAFFIC + ", `?fsync=always`, 2 in flight"
    _report(fault, db_url, len(producer.ids), restarts, traffic, began)


def test_a_redis_restart_while_batches_are_in_flight_keeps_the_relay_watching(
    database: Database, db_url: str, redis_aof: RedisServer, redis_queue: str, tmp_path: Path
) -> None:
    """A backlog committed first, so the relay hands it off with several batches in
    flight (``--in-flight 2``), and Redis SIGKILLed and restarted while they are: the
    broker's transient error is waited out as in a single batch (it ended ``watch``
    when it came from the batches in flight), and every intent lands once."""
    log = tmp_path / "relay.log"
    ids = [i for half in "ab" for i in record_jobs(db_url, redis_queue, 1_000, prefix=half)]
    proc = start_relay(db_url, redis_aof.url + "?fsync=always", log, "--in-flight", "2")
    try:
        wait_until(lambda: pending(database) < len(ids), 30, "a handoff")
        redis_aof.restart()
        wait_until(lambda: pending(database) == 0 or proc.poll() is not None, 60,
                   "the relay to hand the backlog off or end")
        assert proc.poll() is None, log.read_text()[-3000:]  # still watching
    finally:
        stop_relay(proc)
    assert "Traceback" not in log.read_text()
    assert message_ids(redis_aof.client(), redis_queue) == {i: 1 for i in ids}


def _report(
    fault: str, db_url: str, committed: int, faults: int, traffic: str, began: float
) -> None:
    """The scenario's row of the reliability report; every check above has passed."""
    rows.report(
        rows.Row(
            fault=fault, backend=backend_of(db_url), traffic=traffic, jobs=committed,
            faults=faults, lost=0, double_handoffs=0, extra_executions=None, extra_bound=None,
            minutes=round((time.monotonic() - began) / 60, 1),
        )
    )
