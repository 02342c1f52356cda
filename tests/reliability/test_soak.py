"""Soak mode (``OUTBOX_SOAK=1``): long runs of the SQL queue under faults, for the report.

``python -m tests.reliability.report`` runs these (with the JetStream, ordering and
workflow fault tests) and writes ``REPORT.md`` from their rows; on their own::

    OUTBOX_SOAK=1 .venv/bin/pytest tests/reliability/test_soak.py

``OUTBOX_SOAK_JOBS`` sets the jobs per run (default 25,000), ``OUTBOX_SOAK_HOLD_S`` how
long a snapshot is held open (default 600). Each run: four producers (10 % rolled back on
purpose), two relays and three workers under a supervisor that injects the run's fault
(SIGKILL of a random relay or worker, a server restart, every outbox session terminated,
a deadlock storm beside the producers, a snapshot or read view held open). Recovery
time: from a fault until the ledger of executions moves again.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest

from outbox.config import settings
from outbox.queue.config import WorkerConfig
from tests.fixtures import databases as backends
from tests.fixtures.claim_probe import ClaimProbe
from tests.fixtures.fault_harness import (
    QUEUE,
    WORKER_READY,
    check_delivery,
    fetch,
    finish,
    relay_argv,
    role_argv,
    spawn,
    spawn_producers,
    wait_until,
    worker_argv,
)
from tests.fixtures.gaps import Gap, skip_gap, skip_mark
from tests.fixtures.pg_cluster import PgCluster
from tests.fixtures.private_servers import MariaDb
from tests.fixtures.supervisor import Supervisor
from tests.reliability import rows
from tests.reliability.conftest import SOAK, migrated
from tests.reliability.producers import install_hot_rows

pytestmark = [
    pytest.mark.soak,
    skip_mark(not SOAK, Gap.SOAK_ONLY),
    pytest.mark.timeout(3 * 3600),
]
JOBS = int(os.environ.get("OUTBOX_SOAK_JOBS", "25000"))
HOLD_S = float(os.environ.get("OUTBOX_SOAK_HOLD_S", "600"))
PRODUCERS, WORKERS, CONCURRENCY, PREFETCH = 4, 3, 4, 2
Inject = Callable[[Supervisor, random.Random], object]


def _executions(url: str) -> int:
    return int(fetch(url, "SELECT count(*) FROM harness_ledger")[0][0])


def _drained(url: str) -> bool:
    pending = fetch(url, "SELECT count(*) FROM outbox_messages WHERE state = 'pending'")
    jobs = fetch(url, "SELECT count(*) FROM outbox_jobs")
    return int(pending[0][0]) == 0 and int(jobs[0][0]) == 0


def _recovery(url: str, before: int) -> float:
    """Seconds until executions move again (or nothing is left to execute)."""
    return wait_until(
        lambda: _executions(url) > before or _drained(url), 300, "progress after a fault"
    )


def _soak(
    url: str,
    tmp: Path,
    fault: str,
    inject: Inject | None,
    every: tuple[float, float],
    *,
    env: dict[str, str] | None = None,
    pause: float = 0.0,
    beside: Callable[[], contextlib.AbstractContextManager[dict[str, Any]]] | None = None,
    cuts_workers: bool = False,
    lease: float = 2.0,
) -> rows.Row:
    """One run: the crew drains what the producers commit while ``inject`` strikes every
    ``every`` seconds (or, with ``inject`` None, while ``beside`` runs next to it: a storm,
    a held snapshot). ``cuts_workers``: each fault cuts every worker off (a restart, a
    termination), so each may re-run what it held. ``lease``: the workers' (2 s, so the
    jobs of a killed worker come back quickly). The row's verdict is
    ``check_delivery``'s."""
    rng = random.Random(fault)
    env = {"HARNESS_URL": url, **(env or {})}
    crew = Supervisor(tmp)
    for i in range(2):
        crew.add(
            f"relay{i}",
            relay_argv(url, batch_size=200, poll_interval=0.05),
            ready="relay.watch",
        )
    for i in range(WORKERS):
        crew.add(
            f"worker{i}",
            worker_argv(url, concurrency=CONCURRENCY, lease=lease),
            ready=WORKER_READY,
            env=env,
        )
    per = JOBS // PRODUCERS
    faults, worst = 0, 0.0
    began = time.monotonic()
    figures: dict[str, Any] = {}
    try:
        with beside() if beside is not None else contextlib.nullcontext({}) as seen:
            producers = spawn_producers(url, PRODUCERS, per, env=env, pause=pause)
            while any(p.poll() is None for p in producers):
                if inject is None:
                    time.sleep(0.2)
                    continue
                time.sleep(rng.uniform(*every))
                before = _executions(url)
                inject(crew, rng)
                faults += 1
                crew.revive()
                worst = max(worst, _recovery(url, before))
            for proc in producers:
                code, _, err = finish(proc, 3600)
                assert code == 0, err
            wait_until(lambda: crew.revive() >= 0 and _drained(url), 1800, "the crew to drain")
        figures |= seen
        faults = int(figures.pop("faults", faults))
    finally:
        crew.wait_ready()
        results = crew.stop()
    for name, (code, out) in results.items():
        assert code == 0, (name, out[-3000:])
    # Each worker SIGKILL, and each restart or termination for every worker, can leave
    # executed jobs unacknowledged (at most concurrency + prefetch per worker): those run
    # again. Transactional handlers commit their effect with the acknowledgement: none.
    worker_kills = sum(m.kills for n, m in crew.members.items() if n.startswith("worker"))
    cuts = worker_kills + (faults * WORKERS if cuts_workers else 0)
    transactional = env.get("HARNESS_JOB") == "harness.tx"
    bound = cuts * (CONCURRENCY + PREFETCH)
    verdict = check_delivery(url, extra_allowed=0 if transactional else bound)
    lost = [p for p in verdict.problems if "never executed" in p or "without" in p]
    return rows.Row(
        fault=f"{fault} ({faults}x)" if inject is not None else fault,
        backend=backends.backend_of(url),
        traffic=f"{PRODUCERS} producers x {per}, 10% rolled back; 2 relays, {WORKERS} workers"
        + ("" if lease == 2.0 else f" (lease {lease:g} s)")
        + (" (transactional handler)" if transactional else ""),
        jobs=verdict.committed,
        faults=faults,
        lost=len(lost),
        double_handoffs=verdict.double_runs,
        extra_executions=None if transactional else verdict.extra_executions,
        extra_bound=None if transactional else bound,
        doubled_effects=verdict.extra_executions if transactional else None,
        max_recovery_s=round(worst, 2) if inject is not None else None,
        minutes=round((time.monotonic() - began) / 60, 1),
        figures=figures | _latency(url),
        problems=verdict.problems,
    )


def _latency(url: str) -> dict[str, Any]:
    """Record-to-start latency of each job's first execution (the key row's commit-side
    clock against the handler's; one host), p50/p95 over the run and over its last
    minute: a queue that slows while a snapshot is held shows it in the last minute."""
    got = fetch(
        url,
        "SELECT MIN(l.at_ms), MIN(k.created_at) FROM harness_ledger l"
        " JOIN outbox_keys k ON k.message_id = l.message_id"
        " WHERE l.at_ms IS NOT NULL GROUP BY l.message_id",
    )
    if not got:
        return {}
    samples = sorted((int(at), int(at) - int(created)) for at, created in got)
    end = samples[-1][0]
    last = [d for at, d in samples if at >= end - 60_000]
    every = [d for _, d in samples]

    def p(values: list[int], q: int) -> int:
        return int(statistics.quantiles(values, n=100)[q - 1]) if len(values) > 1 else values[0]

    return {
        "record-to-start p50 ms": p(every, 50),
        "record-to-start p95 ms": p(every, 95),
        "last minute p95 ms": p(last, 95),
    }


def _report(row: rows.Row) -> None:
    rows.report(row)
    assert row.problems == [], row.problems


@pytest.fixture
def soak_url(db_url: str) -> str:
    return migrated(db_url)


@pytest.fixture(scope="module")
def mariadb_private() -> Iterator[MariaDb]:
    """A throwaway MariaDB server that this module may restart (never the shared one)."""
    if "mysql" not in backends.BACKENDS:
        skip_gap(Gap.MYSQL_NOT_SELECTED)
    if not MariaDb.available():
        skip_gap(Gap.NO_MARIADB_BINARIES)
    server = MariaDb()  # in the system temp folder: the mysql user must reach it
    try:
        server.start()
        yield server
    finally:
        server.stop()


def _private_pg_db(cluster: PgCluster, name: str) -> str:
    with psycopg.connect(cluster.url(), autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}"')
        c.execute(f'CREATE DATABASE "{name}"')
    return migrated(cluster.url(name))


def _private_mariadb_db(server: MariaDb, name: str) -> str:
    admin = pymysql.connect(host="127.0.0.1", port=server.port, user="root")
    with contextlib.closing(admin), admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cur.execute(f"CREATE DATABASE `{name}`")
    return migrated(f"{server.url()}/{name}")


@pytest.mark.parametrize("backend", backends.BACKENDS)
def test_soak_sigkill_relays_and_workers(backend: str, soak_url: str, tmp_path: Path) -> None:
    _report(_soak(soak_url, tmp_path, "SIGKILL relays+workers", Supervisor.kill_random, (0.5, 2.0)))


def test_soak_sigkill_with_transactional_handlers(soak_url: str, tmp_path: Path) -> None:
    """Transactional handlers: the effect commits with the acknowledgement, so however
    often a worker is killed no job's effect is there twice (doubled effects: 0)."""
    _report(
        _soak(
            soak_url,
            tmp_path,
            "SIGKILL relays+workers",
            Supervisor.kill_random,
            (0.5, 2.0),
            env={"HARNESS_JOB": "harness.tx"},
        )
    )


def test_soak_postgresql_restarts(pg_private: PgCluster, tmp_path: Path) -> None:
    url = _private_pg_db(pg_private, "soak_restart")
    row = _soak(
        url,
        tmp_path,
        "PostgreSQL restart (immediate)",
        lambda crew, rng: pg_private.restart("immediate"),
        (8.0, 12.0),
        cuts_workers=True,
    )
    row.backend = "postgresql (private cluster)"
    _report(row)


def test_soak_mariadb_restarts(mariadb_private: MariaDb, tmp_path: Path) -> None:
    url = _private_mariadb_db(mariadb_private, "soak_restart")

    def restart(crew: Supervisor, rng: random.Random) -> None:
        mariadb_private.restart()

    row = _soak(url, tmp_path, "MariaDB restart", restart, (8.0, 12.0), cuts_workers=True)
    row.backend = "mariadb (private server)"
    _report(row)


def test_soak_every_session_terminated_twice_a_second(
    pg_private: PgCluster, tmp_path: Path
) -> None:
    """Every outbox session of the database (the relays' and workers': the product names
    its sessions ``outbox``) terminated every 0.5 s, on a clock of its own (not waiting
    for the crew to recover in between), for the whole run."""
    url = _private_pg_db(pg_private, "soak_terminate")

    @contextlib.contextmanager
    def terminating() -> Iterator[dict[str, Any]]:
        stop, seen = threading.Event(), {"faults": 0}

        def strike() -> None:
            with psycopg.connect(pg_private.url(), autocommit=True) as admin:
                while not stop.wait(0.5):
                    admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE datname = 'soak_terminate' AND application_name = 'outbox'"
                    )
                    seen["faults"] += 1

        thread = threading.Thread(target=strike, daemon=True)
        thread.start()
        try:
            yield seen
        finally:
            stop.set()
            thread.join()

    row = _soak(url, tmp_path, "pg_terminate_backend of every session, every 0.5 s", None,
                (0, 0), beside=terminating, cuts_workers=True)
    row.fault += f" ({row.faults}x)"
    row.backend = "postgresql (private cluster)"
    _report(row)


@pytest.mark.parametrize("backend", [b for b in backends.BACKENDS if b != "sqlite"])
def test_soak_deadlock_storm(backend: str, soak_url: str, tmp_path: Path) -> None:
    """Storm processes record overlapping hot keys in random order beside the producers,
    while the relays hand both off: every confirmed deadlock is retried, each hot key
    keeps one intent, and its job runs like any other (the storm's ids join the
    producers' in harness_orders, so the delivery check covers them)."""
    hot = 20
    install_hot_rows(soak_url, hot)

    @contextlib.contextmanager
    def storm() -> Iterator[dict[str, Any]]:
        start_at = time.time() + 2.0
        procs = [
            spawn(
                role_argv(
                    "storm", "--url", soak_url, "--hot-keys", str(hot),
                    "--transactions", str(max(40, JOBS // 500)), "--per-tx", "3",
                    "--seed", str(i), "--start-at", str(start_at),
                ),
                {"HARNESS_URL": soak_url},
            )
            for i in range(4)
        ]
        seen: dict[str, Any] = {}
        yield seen
        results = []
        for proc in procs:
            code, out, err = finish(proc, 1800)
            assert code == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
        ids: dict[str, str] = {}
        for r in results:
            assert r["errors"] == {} and r["mismatch"] == [], r
            for key, mid in r["ids"].items():
                assert ids.setdefault(key, mid) == mid, key
        conn = backends.raw_connect(soak_url)
        try:
            ph = backends.placeholder(soak_url)
            conn.cursor().executemany(
                f"INSERT INTO harness_orders (k, message_id) VALUES ({ph}, {ph})",
                sorted(ids.items()),
            )
            conn.commit()
        finally:
            conn.close()
        seen["faults"] = sum(r["retried"] for r in results)
        seen["storm transactions"] = sum(r["committed"] for r in results)

    row = _soak(soak_url, tmp_path, "deadlock storm (hot keys beside the producers)", None,
                (0, 0), beside=storm)
    row.fault += f" ({row.faults} deadlocks retried)"
    _report(row)
    assert row.faults > 0, "no deadlock happened; nothing was proved"


def _held(url: str, connect: Callable[[], Any], begin: str, read: str) -> Callable[
    [], contextlib.AbstractContextManager[dict[str, Any]]
]:
    """A snapshot held open beside the run: ``begin``, one read, then nothing until the
    producers are done and the crew drained. The claim's own latency is probed beside it
    (``ClaimProbe``): the figure a held horizon moves first."""

    @contextlib.contextmanager
    def hold() -> Iterator[dict[str, Any]]:
        conn = connect()
        cur = conn.cursor()
        cur.execute(begin)
        cur.execute(read)
        cur.fetchall()
        since = time.monotonic()
        seen: dict[str, Any] = {"faults": 1}
        probe = ClaimProbe(url, QUEUE)
        try:
            with probe.running():
                yield seen
        finally:
            seen["held minutes"] = round((time.monotonic() - since) / 60, 1)
            seen |= probe.figures()
            cur.execute("ROLLBACK")
            conn.close()

    return hold


# The held-horizon rows kill nothing: their workers run the default lease, as users do.
# With the kill rows' 2 s lease, the soak of 2026-12-06 (load up to 32, MariaDB's purge
# held back 30 minutes) saw workers starved past their lease re-run 1,118 jobs they were
# running (at least once, as a lease allows; 0 lost, 0 doubled hand-offs).
HELD_LEASE = WorkerConfig().lease


def _paced() -> float:
    """A pause between a producer's transactions that spreads the run over ``HOLD_S``."""
    return max(0.0, HOLD_S / max(1, JOBS // PRODUCERS) - 0.004)


def test_soak_held_xmin_horizon(pg_private: PgCluster, tmp_path: Path) -> None:
    """A REPEATABLE READ transaction that read once and stays open (a report, pg_dump, a
    stuck session) for the whole run: nothing it holds back may lose or stall a job."""
    url = _private_pg_db(pg_private, "soak_xmin")
    hold = _held(
        url,
        lambda: psycopg.connect(url, autocommit=True),  # the BEGIN below is the only one
        "BEGIN ISOLATION LEVEL REPEATABLE READ",
        "SELECT count(*) FROM harness_orders",
    )
    row = _soak(
        url,
        tmp_path,
        "held xmin horizon",
        None,
        (0, 0),
        pause=_paced(),
        beside=hold,
        lease=HELD_LEASE,
    )
    row.fault += f" ({row.figures.get('held minutes')} min)"
    row.backend = "postgresql (private cluster)"
    row.traffic += f"; queue storage: {settings.queue_storage}"  # the default: the ring
    _report(row)


def test_soak_long_read_view(mariadb_private: MariaDb, tmp_path: Path) -> None:
    """InnoDB's form of the same: a consistent-snapshot read view held open, so purge
    cannot remove the queue's deleted rows."""
    url = _private_mariadb_db(mariadb_private, "soak_read_view")
    hold = _held(
        url,
        lambda: backends.raw_connect(url),
        "START TRANSACTION WITH CONSISTENT SNAPSHOT",
        "SELECT count(*) FROM harness_orders",
    )
    row = _soak(
        url,
        tmp_path,
        "long read view",
        None,
        (0, 0),
        pause=_paced(),
        beside=hold,
        lease=HELD_LEASE,
    )
    row.fault += f" ({row.figures.get('held minutes')} min)"
    row.backend = "mariadb (private server)"
    _report(row)
