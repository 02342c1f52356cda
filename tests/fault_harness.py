"""The fault harness: real producer, relay and worker processes, a supervisor, a ledger.

Each role runs as its own OS process (``python -m tests.fault_harness ROLE ...``; the
producer roles live in ``tests/reliability/producers.py``, the handlers in
``tests/reliability/ledger_app.py``, relays are the real ``outbox relay --watch``) so a
test can SIGKILL it at any instant and restart it the way a supervisor would. Truth is
kept in the database under test, never in the processes' memory:

- ``harness_orders``: the producer's business row, written in the SAME transaction as
  ``record()``. A row here is proof the intent committed.
- ``harness_rollbacks``: keys whose transaction the producer rolled back on purpose,
  written after the rollback. None of them may ever reach the queue or run.
- ``harness_ledger``: one row per handler execution (``tests/reliability/ledger_app.py``),
  inside the job's transaction for transactional handlers, on a connection of its own
  for ordinary ones, so the checks count real executions.

``check_intents`` (producers), ``check_handoff`` (relays) and ``check_delivery`` (the
whole pipeline, drained) compare the three with the product's tables and list every
violation of the issue's rules.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from outbox import Job
from tests.fixtures.databases import (
    placeholder,  # noqa: F401 - part of this module's vocabulary
    raw_connect,
)
from tests.fixtures.processes import wait_until

ROOT = Path(__file__).resolve().parent.parent
JOB_NAME = "harness.exec"
QUEUE = "harness"

_DDL = {
    "harness_orders": "CREATE TABLE harness_orders "
    "(k VARCHAR(200) PRIMARY KEY, message_id VARCHAR(36) NOT NULL)",
    "harness_rollbacks": "CREATE TABLE harness_rollbacks (k VARCHAR(200) PRIMARY KEY)",
    "harness_ledger": "CREATE TABLE harness_ledger "
    "(message_id VARCHAR(36) NOT NULL, worker VARCHAR(100) NOT NULL, attempt INTEGER NOT NULL,"
    " transactional INTEGER NOT NULL)",
}



def install_ledger(url: str) -> None:
    """Create the harness tables next to the product's (idempotent)."""
    conn = raw_connect(url)
    try:
        cur = conn.cursor()
        for table, ddl in _DDL.items():
            try:
                cur.execute(ddl)
                conn.commit()
            except Exception:
                conn.rollback()
                cur = conn.cursor()
                cur.execute(f"SELECT count(*) FROM {table}")  # it exists: fine
                cur.fetchall()
                conn.commit()
    finally:
        conn.close()


def fetch(url: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    conn = raw_connect(url)
    try:
        cur = conn.cursor()
        cur.execute(sql, tuple(params))
        rows = [tuple(r) for r in cur.fetchall()]
        conn.commit()
        return rows
    finally:
        conn.close()


def harness_job(key: str, n: int) -> Job:
    """The producers' job; ``HARNESS_JOB`` picks the handler (``harness.tx``: transactional)."""
    return Job(os.environ.get("HARNESS_JOB", JOB_NAME), {"k": key, "n": n}, queue=QUEUE)


# --------------------------------------------------------------------------- checks


@dataclass
class Verdict:
    """What ``check`` found; ``problems`` is empty when every rule holds."""

    committed: int = 0
    rolled_back: int = 0
    executions: int = 0
    extra_executions: int = 0
    double_runs: int = 0
    problems: list[str] = field(default_factory=list)

    def fail(self, what: str, items: Sequence[Any]) -> None:
        if items:
            self.problems.append(f"{what}: {len(items)} e.g. {sorted(map(str, items))[:5]}")


def check_intents(url: str) -> Verdict:
    """Producer-side rules: each committed business row has exactly its intent, and back."""
    v = Verdict()
    orders = dict(fetch(url, "SELECT k, message_id FROM harness_orders"))
    rollbacks = {r[0] for r in fetch(url, "SELECT k FROM harness_rollbacks")}
    # Every intent has a key row, handed off or not (none is pruned during a run).
    messages = {r[0] for r in fetch(url, "SELECT message_id FROM outbox_keys")}
    v.committed, v.rolled_back = len(orders), len(rollbacks)
    v.fail("rolled back and committed", sorted(rollbacks & set(orders)))
    v.fail("committed without an intent", [k for k, m in orders.items() if m not in messages])
    v.fail("intent without its business row", sorted(messages - set(orders.values())))
    return v


def check_handoff(url: str) -> Verdict:
    """Relay rules: every committed intent handed off (gone from the outbox) and in the
    queue exactly once."""
    v = check_intents(url)
    committed = {r[0] for r in fetch(url, "SELECT message_id FROM harness_orders")}
    queued = Counter(r[0] for r in fetch(url, "SELECT message_id FROM outbox_jobs"))
    v.fail("committed but not in the queue", sorted(committed - set(queued)))
    v.fail("in the queue but never committed", sorted(set(queued) - committed))
    v.fail("in the queue twice", sorted(m for m, n in queued.items() if n > 1))
    states = Counter(r[0] for r in fetch(url, "SELECT state FROM outbox_messages"))
    if states:
        v.problems.append(f"outbox rows not handed off: {dict(states)}")
    return v


def drained(url: str) -> bool:
    """Nothing pending in the outbox and nothing left in the queue."""
    jobs = fetch(url, "SELECT count(*) FROM outbox_jobs")
    return pending_count(url) == 0 and int(jobs[0][0]) == 0


def pending_count(url: str) -> int:
    return int(fetch(url, "SELECT count(*) FROM outbox_messages WHERE state = 'pending'")[0][0])



def cli_argv(url: str, *args: str) -> list[str]:
    """The real ``outbox`` command line, as an operator or a systemd unit runs it."""
    return [sys.executable, "-m", "outbox", "--database-url", url, "--log-format", "json", *args]


def relay_argv(
    url: str, *, batch_size: int, poll_interval: float, log_level: str = "info"
) -> list[str]:
    """The real ``outbox relay --watch``, polling only (the harness never relies on NOTIFY)."""
    return cli_argv(
        url,
        "--log-level",
        log_level,
        "relay",
        "--watch",
        "--batch-size",
        str(batch_size),
        "--poll-interval",
        str(poll_interval),
        "--poll-only",
    )


def worker_argv(
    url: str, *extra: str, concurrency: int = 2, lease: float = 2.0, log_level: str = "info"
) -> list[str]:
    """The real ``outbox worker`` on the harness queue, running the ledger handlers."""
    return cli_argv(
        url,
        "--log-level",
        log_level,
        "worker",
        QUEUE,
        "--app",
        "tests.reliability.ledger_app:registry",
        "--concurrency",
        str(concurrency),
        "--prefetch",
        "2",
        "--lease",
        str(lease),
        "--sleep",
        "0.05",
        "--grace",
        "10",
        *extra,
    )


WORKER_READY = "worker.started"


def check_delivery(url: str, extra_allowed: int = 0) -> Verdict:
    """Every rule of the issue, after the relays and workers have drained everything.

    ``extra_allowed``: how many duplicate executions the injected faults explain (at
    most the jobs a killed worker had executed but not yet acknowledged).
    """
    v = check_intents(url)
    orders = dict(fetch(url, "SELECT k, message_id FROM harness_orders"))
    committed = set(orders.values())
    runs = Counter(r[0] for r in fetch(url, "SELECT message_id FROM harness_ledger"))
    v.executions = sum(runs.values())
    v.extra_executions = sum(n - 1 for n in runs.values() if n > 1)
    v.fail("committed but never executed", sorted(committed - set(runs)))
    v.fail("executed but never committed (rolled back?)", sorted(set(runs) - committed))
    if v.extra_executions > extra_allowed:
        v.problems.append(f"{v.extra_executions} extra executions; faults explain {extra_allowed}")
    # A re-run after a kill carries the next attempt number (claims count attempts and the
    # reaper keeps them); the same attempt twice means a second handoff or a broken fence.
    attempts = Counter(fetch(url, "SELECT message_id, attempt FROM harness_ledger"))
    doubled = sorted({m for (m, _), n in attempts.items() if n > 1})
    v.double_runs = len(doubled)
    v.fail("the same attempt executed twice (double handoff or broken fence)", doubled)
    states = Counter(r[0] for r in fetch(url, "SELECT state FROM outbox_messages"))
    if states:
        v.problems.append(f"outbox rows not handed off: {dict(states)}")
    left = fetch(url, "SELECT message_id FROM outbox_jobs")
    v.fail("still in the queue after draining", [r[0] for r in left])
    dead = fetch(url, "SELECT message_id FROM outbox_failed_jobs")
    v.fail("dead-lettered", [r[0] for r in dead])
    return v


# --------------------------------------------------------------------------- processes


def role_argv(role: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "tests.fault_harness", role, *args]


def spawn(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.Popen(
        argv,
        cwd=ROOT,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def spawn_producers(
    url: str,
    n: int,
    count: int,
    *,
    rollback_ratio: float = 0.1,
    pause: float = 0.0,
    env: dict[str, str] | None = None,
) -> list[subprocess.Popen[str]]:
    """``n`` producer processes (prefixes ``p0``.., seeds 0..), ``count`` transactions each."""
    return [
        spawn(
            role_argv(
                "produce",
                *("--url", url, "--prefix", f"p{i}", "--count", str(count)),
                *("--rollback-ratio", str(rollback_ratio), "--seed", str(i), "--pause", str(pause)),
            ),
            env,
        )
        for i in range(n)
    ]


def finish(proc: subprocess.Popen[str], timeout: float) -> tuple[int, str, str]:
    """Wait for ``proc``; on timeout kill it, so a test never leaves children behind."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return -9, out, err + "\n[harness: killed after timeout]"
    return proc.returncode, out, err


@dataclass
class Supervised:
    name: str
    argv: list[str]
    env: dict[str, str]
    ready: str
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    restarts: int = 0
    kills: int = 0
    crashes: int = 0
    logs: list[Path] = field(default_factory=list)

    def output(self) -> str:
        return "".join(p.read_text(errors="replace") for p in self.logs if p.exists())

    def is_ready(self) -> bool:
        return (
            self.log is not None
            and self.log.exists()
            and self.ready in self.log.read_text(errors="replace")
        )


class Supervisor:
    """Starts long-running roles, SIGKILLs them on request and restarts them, like systemd.

    Output goes to one file per incarnation under ``logdir`` (a pipe nobody reads would
    fill up and block a chatty process). ``kills`` counts SIGKILLs delivered to running
    processes: the bound on explained duplicate executions.
    """

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.members: dict[str, Supervised] = {}

    def add(
        self, name: str, argv: list[str], ready: str = "", env: dict[str, str] | None = None
    ) -> None:
        member = Supervised(name, argv, env or {}, ready)
        self.members[name] = member
        self._start(member)

    def _start(self, member: Supervised) -> None:
        member.log = self.logdir / f"{member.name}.{member.restarts}.log"
        member.logs.append(member.log)
        with member.log.open("wb") as sink:
            member.proc = subprocess.Popen(
                member.argv,
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT), **member.env},
                stdout=sink,
                stderr=subprocess.STDOUT,
            )

    def kill(self, name: str) -> bool:
        member = self.members[name]
        proc = member.proc
        if proc is None or proc.poll() is not None:
            return False
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        member.kills += 1
        member.restarts += 1
        self._start(member)
        return True

    def revive(self) -> int:
        """Restart members that exited by themselves (``Restart=always``); count crashes."""
        revived = 0
        for member in self.members.values():
            if member.proc is not None and member.proc.poll() is not None:
                member.crashes += 1
                member.restarts += 1
                self._start(member)
                revived += 1
        return revived

    @property
    def crashes(self) -> int:
        return sum(m.crashes for m in self.members.values())

    def kill_random(self, rng: random.Random, prefix: str = "") -> str | None:
        names = [n for n in self.members if n.startswith(prefix)]
        if not names:
            return None
        name = rng.choice(names)
        return name if self.kill(name) else None

    @property
    def kills(self) -> int:
        return sum(m.kills for m in self.members.values())

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until every member's current incarnation printed its ready marker."""
        wait_until(
            lambda: all(m.is_ready() for m in self.members.values()),
            timeout,
            "supervised processes to be ready",
        )

    def stop(self, timeout: float = 60.0) -> dict[str, tuple[int, str]]:
        """SIGTERM everyone, wait, SIGKILL stragglers; return exit codes and output."""
        for m in self.members.values():
            if m.proc is not None and m.proc.poll() is None:
                m.proc.send_signal(signal.SIGTERM)
        results: dict[str, tuple[int, str]] = {}
        for m in self.members.values():
            if m.proc is None:
                continue
            try:
                code = m.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                m.proc.kill()
                code = m.proc.wait()
            results[m.name] = (code, m.output())
        return results

    def wait(self, timeout: float) -> dict[str, tuple[int, str]]:
        """Wait for every member to exit by itself (e.g. ``--stop-when-empty``)."""
        end = time.monotonic() + timeout
        out: dict[str, tuple[int, str]] = {}
        for m in self.members.values():
            if m.proc is None:
                continue
            try:
                code = m.proc.wait(max(1.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                m.proc.kill()
                code = -9
            out[m.name] = (code, m.output())
        return out


def kill_relays_while_producing(
    url: str,
    relays: Sequence[list[str]],
    logdir: Path,
    *,
    seed: int,
    per_producer: int,
    pause: float,
    nap: tuple[float, float],
    env: dict[str, str] | None = None,
) -> Supervisor:
    """Run the relays under a supervisor while two producers write ``per_producer``
    transactions each, SIGKILLing a relay at random every ``nap`` seconds; then wait for
    the relays to drain and stop them. Every relay must exit 0 on its final SIGTERM.
    Returns the supervisor, whose ``kills`` the caller reports."""
    rng = random.Random(seed)
    supervisor = Supervisor(logdir)
    for i, argv in enumerate(relays):
        supervisor.add(f"relay{i}", argv, ready="relay.watch")
    producers = spawn_producers(url, 2, per_producer, pause=pause, env=env)
    try:
        while any(p.poll() is None for p in producers):
            time.sleep(rng.uniform(*nap))
            supervisor.kill_random(rng)
        for proc in producers:
            code, _, err = finish(proc, 240)
            assert code == 0, err
        wait_until(lambda: pending_count(url) == 0, 120, "relays to drain")
    finally:
        supervisor.wait_ready()
        results = supervisor.stop()
    assert supervisor.kills > 0
    for name, (code, out) in results.items():
        assert code == 0, (name, out[-2000:])
    return supervisor


# --------------------------------------------------------------------------- entry point


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests.fault_harness")
    sub = parser.add_subparsers(dest="role", required=True)
    p = sub.add_parser("produce")
    p.add_argument("--url", required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--rollback-ratio", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pause", type=float, default=0.0)
    s = sub.add_parser("storm")
    s.add_argument("--url", required=True)
    s.add_argument("--hot-keys", type=int, required=True)
    s.add_argument("--transactions", type=int, required=True)
    s.add_argument("--per-tx", type=int, default=3)
    s.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from tests.reliability.producers import produce, storm

    if args.role == "storm":
        result = storm(args.url, args.hot_keys, args.transactions, args.per_tx, args.seed)
        print(json.dumps(result), flush=True)
    if args.role == "produce":
        stats = produce(
            args.url,
            args.prefix,
            args.count,
            args.rollback_ratio,
            args.seed,
            args.pause,
        )
        print(stats.as_json(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
