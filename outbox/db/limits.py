"""The driver's limit operations: admit claimed jobs within global limits, free and renew
their concurrency slots. ``Driver`` inherits them; every dialect shares the logic, the
statements differ only in how a key's row is created and locked (``limit_lock``,
``limit_key_add``, ``limit_wait_add`` in each dialect's ``limits.sql``).

Serialisation: each transaction first locks the row of every key it touches, in sorted
order (so two workers never wait on each other in a cycle): ``SELECT … FOR UPDATE`` on
PostgreSQL and MariaDB, the writer lock of ``BEGIN IMMEDIATE`` on SQLite. Counting the
slots or starts of a key and taking one are then one atomic step, whatever the number of
workers and hosts. The clock is the database's, read once per transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from outbox.db.connection import Connection
from outbox.db.rows import ClaimedJob, LimitAdmit, LimitAsk, LimitScope, LimitSlot, LimitVerdict

# A freed slot wakes the first waiting job that is still in the queue unheld; waiters
# left behind by a job removed meanwhile are skipped, at most this many per slot.
WAKE_TRIES = 3


class LimitOps:
    conn: Connection

    def limit_admit(self, p: LimitAdmit) -> list[LimitVerdict]:
        """Admit ``p.asks`` in order while within every limit and ``p.room``: an
        admitted job holds a slot (concurrency) and counts a start (rate). Each other
        ask goes back to the queue unspent: over a limit, due when room is expected
        (and registered to be woken when a slot frees); past ``p.room``, at once."""
        if not p.asks:
            return []
        return self.conn.transact(lambda c: _Admission(c, p).run(), operation="limit admit")

    def limit_release(self, holder: str, slots: Sequence[LimitSlot]) -> int:
        """Free the slots of settled jobs, each waking the first job that waits on its
        key; how many were still held."""
        if not slots:
            return 0

        def free(c: Connection) -> int:
            now = _now(c)
            _lock(c, (s.key for s in slots), now)
            freed = 0
            for slot in slots:
                if c.execute_count("limit_slot_free", _slot_params(holder, slot)):
                    freed += 1
                    _wake_one(c, slot.key, now)
            return freed

        return self.conn.transact(free, operation="limit release")

    def limit_heartbeat(self, holder: str, slots: Sequence[LimitSlot], lease_ms: int) -> int:
        """Renew held slots for another ``lease_ms``; how many were still held."""
        if not slots:
            return 0

        def renew(c: Connection) -> int:
            ordered = sorted(slots, key=lambda s: (s.key, s.job.id))
            params = [{**_slot_params(holder, s), "lease_ms": lease_ms} for s in ordered]
            return sum(c.execute_count("limit_slot_renew", p) for p in params)

        return self.conn.transact(renew, operation="limit heartbeat")


class _Admission:
    """One admission transaction over a batch of asks."""

    def __init__(self, c: Connection, p: LimitAdmit) -> None:
        self.c = c
        self.p = p
        self.now = 0
        self.deferred: dict[str, int] = {}  # per rate key: asks deferred so far

    def run(self) -> list[LimitVerdict]:
        c, p = self.c, self.p
        self.now = _now(c)
        scopes = {s.key: s for ask in p.asks for s in ask.scopes}
        _lock(c, scopes, self.now)
        for scope in scopes.values():
            self._tidy(scope)
        verdicts: list[LimitVerdict] = []
        admitted = 0
        for ask in p.asks:
            if admitted >= p.room:
                c.execute_count("limit_job_return", self._job(ask.job))
                verdicts.append(LimitVerdict(ask.job, False, 0))
                continue
            waits = {s.key: self._wait_ms(s) for s in ask.scopes}
            wait = max(waits.values(), default=0)
            if wait:
                for s in ask.scopes:
                    if s.rate is not None:
                        self.deferred[s.key] = self.deferred.get(s.key, 0) + 1
                self._defer(ask, wait, [k for k, w in waits.items() if w and _slots(scopes[k])])
                verdicts.append(LimitVerdict(ask.job, False, wait))
            else:
                self._take(ask)
                admitted += 1
                verdicts.append(LimitVerdict(ask.job, True))
        return verdicts

    def _tidy(self, s: LimitScope) -> None:
        key = {"key": s.key, "now": self.now}
        if s.concurrency is not None:
            self.c.execute_count("limit_slot_clear_expired", key)
        if s.rate is not None:
            self.c.execute_count("limit_start_prune", {**key, "since": self.now - s.window_ms})

    def _wait_ms(self, s: LimitScope) -> int:
        """0 when ``s`` has room now, else how long until it is expected to."""
        if s.concurrency is not None:
            ((live, first_expiry),) = self.c.execute("limit_slot_count", {"key": s.key})
            if int(live) >= s.concurrency:
                return max(int(first_expiry) - self.now, 1)
        if s.rate is not None:
            window = {"key": s.key, "since": self.now - s.window_ms}
            started = int(self.c.execute("limit_start_count", window)[0][0])
            if started >= s.rate:
                # The k-th ask deferred in this batch is due when the k-th start from
                # the one that makes room leaves the window: they come back one by one.
                skip = started - s.rate + self.deferred.get(s.key, 0)
                if skip >= started:
                    return s.window_ms
                (nth,) = self.c.execute("limit_start_nth", {**window, "skip": skip})[0]
                return max(int(nth) + s.window_ms - self.now, 1)
        return 0

    def _take(self, ask: LimitAsk) -> None:
        job = ask.job
        slot_keys = [s.key for s in ask.scopes if _slots(s)]
        for key in slot_keys:
            params = {"key": key, "job_id": job.id}
            self.c.execute_count("limit_slot_drop", params)
            self.c.execute_count(
                "limit_slot_take",
                {
                    **params,
                    "attempts": job.attempts,
                    "holder": self.p.holder,
                    "now": self.now,
                    "lease_ms": self.p.lease_ms,
                },
            )
        for s in ask.scopes:
            if s.rate is not None:
                self.c.execute_count("limit_start_take", {"key": s.key, "now": self.now})
        if slot_keys:
            self.c.execute_count("limit_wait_drop_job", {"job_id": job.id})

    def _defer(self, ask: LimitAsk, wait_ms: int, slot_keys: list[str]) -> None:
        """Back to the queue until ``wait_ms`` from now, woken earlier by a freed slot."""
        for key in slot_keys:
            self.c.execute_count("limit_wait_add", {"key": key, "job_id": ask.job.id})
        self.c.execute_count("limit_job_wait", {**self._job(ask.job), "until": self.now + wait_ms})

    def _job(self, job: ClaimedJob) -> dict[str, Any]:
        return {"id": job.id, "holder": self.p.holder, "attempts": job.attempts}


def _slots(s: LimitScope) -> bool:
    return s.concurrency is not None


def _now(c: Connection) -> int:
    return int(c.execute("now_ms")[0][0])


def _lock(c: Connection, keys: Iterable[str], now: int) -> None:
    """Lock every key's row, in sorted order, creating the rows not there yet."""
    for key in sorted(set(keys)):
        if not c.execute("limit_lock", {"key": key}):
            c.execute_count("limit_key_add", {"key": key, "now": now})
            c.execute("limit_lock", {"key": key})


def _slot_params(holder: str, slot: LimitSlot) -> dict[str, Any]:
    return {
        "key": slot.key,
        "job_id": slot.job.id,
        "attempts": slot.job.attempts,
        "holder": holder,
    }


def _wake_one(c: Connection, key: str, now: int) -> None:
    for _ in range(WAKE_TRIES):
        rows = c.execute("limit_wait_first", {"key": key})
        if not rows:
            return
        params = {"key": key, "job_id": int(rows[0][0]), "now": now}
        c.execute_count("limit_wait_drop", params)
        if c.execute_count("limit_wake", params):
            return
