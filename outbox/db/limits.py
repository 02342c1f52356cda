"""The driver's limit operations: admit claimed jobs within global limits, free and renew
their concurrency slots. ``SharedDriver`` inherits them; every dialect shares the logic, the
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

from outbox.db.driver import Executor
from outbox.db.rows import ClaimedJob, LimitAdmit, LimitAsk, LimitScope, LimitSlot, LimitVerdict

# A freed slot wakes the first waiting job that is still in the queue unheld; waiters
# left behind by a job removed meanwhile are skipped, at most this many per slot.
WAKE_TRIES = 3


class LimitOps:
    conn: Executor

    def limit_admit(self, p: LimitAdmit) -> list[LimitVerdict]:
        if not p.asks:
            return []
        return self.conn.transact(lambda c: _Admission(c, p).run(), operation="limit admit")

    def limit_release(self, holder: str, slots: Sequence[LimitSlot]) -> int:
        if not slots:
            return 0

        def free(c: Executor) -> int:
            _lock(c, (s.key for s in slots))
            now = _now(c)
            freed = 0
            for slot in slots:
                if c.execute_count("limit_slot_free", _slot_params(holder, slot)):
                    freed += 1
                    _wake_one(c, slot.key, now)
            return freed

        return self.conn.transact(free, operation="limit release")

    def limit_heartbeat(self, holder: str, slots: Sequence[LimitSlot], lease_ms: int) -> int:
        if not slots:
            return 0

        def renew(c: Executor) -> int:
            ordered = sorted(slots, key=lambda s: (s.key, s.job.id))
            params = [{**_slot_params(holder, s), "lease_ms": lease_ms} for s in ordered]
            return sum(c.execute_count("limit_slot_renew", p) for p in params)

        return self.conn.transact(renew, operation="limit heartbeat")

    def limit_prune(self, older_ms: int, batch: int = 1000) -> int:
        params = {"older_ms": older_ms, "batch": batch}

        def batches(name: str) -> int:
            total = 0
            while True:
                n = self.conn.transact(
                    lambda c: c.execute_count(name, params), operation="prune limits"
                )
                total += n
                if n < batch:
                    return total

        batches("limit_prune_starts")
        batches("limit_prune_slots")
        self.conn.transact(lambda c: c.execute_count("limit_prune_waits"), operation="prune limits")
        return batches("limit_prune_keys")


class _Admission:
    """One admission transaction over a batch of asks.

    Concurrency first: a job over a concurrency limit waits for a slot (registered to be
    woken). Then rate: a job starts now if fewer than ``rate`` starts lie within the
    window before now; the count is of admissions only, by the database's clock, so the
    limit holds exactly whoever is late. Otherwise it takes a ticket and waits in the
    queue until the ticket's time: tickets are placed as if they were starts (one window
    after the rate-th latest start or ticket), so the jobs deferred by every worker come
    back one by one, each about when the window has room for it, instead of all at once.
    A ticket is a place in line, not a start: a job that comes back late takes the room
    there is, and a ticket whose job vanished costs nothing. A job within its limits but
    past ``room`` goes back at once, keeping its place.
    """

    def __init__(self, c: Executor, p: LimitAdmit) -> None:
        self.c = c
        self.p = p
        self.now = 0
        self.admitted = 0
        # Per key, read once per transaction and kept up to date as jobs are admitted:
        # live slots and the first one's expiry; starts within the window.
        self.slots: dict[str, tuple[int, int]] = {}
        self.started: dict[str, int] = {}
        self.fronted: dict[str, int] = {}  # per key: jobs put first in line so far

    def run(self) -> list[LimitVerdict]:
        scopes = {s.key: s for ask in self.p.asks for s in ask.scopes}
        _lock(self.c, scopes)
        # The clock is read once the locks are held: a start stamped with a time read
        # before waiting for a lock would count as earlier than it was.
        self.now = _now(self.c)
        for scope in scopes.values():
            self._tidy(scope)
        return [self._decide(ask) for ask in self.p.asks]

    def _decide(self, ask: LimitAsk) -> LimitVerdict:
        job = ask.job
        full = {s.key: w for s in ask.scopes if _slots(s) and (w := self._slot_wait_ms(s))}
        if full:
            for key in full:
                self.c.execute_count("limit_wait_add", {"key": key, "job_id": job.id})
            return self._defer(job, max(full.values()))
        tickets = [self._ticket(s, job) for s in ask.scopes if s.rate is not None and self._full(s)]
        if tickets:
            return self._defer(job, max(tickets) - self.now)
        if self.admitted >= self.p.room:
            self.c.execute_count("limit_job_return", self._job(job))
            return LimitVerdict(job, False, 0)
        self._take(ask)
        self.admitted += 1
        return LimitVerdict(job, True)

    def _tidy(self, s: LimitScope) -> None:
        key = {"key": s.key, "now": self.now}
        if s.concurrency is not None:
            self.c.execute_count("limit_slot_clear_expired", key)
        if s.rate is not None:
            self.c.execute_count("limit_start_prune", {**key, "since": self.now - s.window_ms})

    def _slot_wait_ms(self, s: LimitScope) -> int:
        """0 when ``s`` has a free slot, else when its first slot's lease runs out."""
        assert s.concurrency is not None
        if s.key not in self.slots:
            ((live, first), *_) = self.c.execute("limit_slot_count", {"key": s.key})
            self.slots[s.key] = (int(live), int(first or 0))
        live, first_expiry = self.slots[s.key]
        if live < s.concurrency:
            return 0
        return max(first_expiry - self.now, 1)

    def _full(self, s: LimitScope) -> bool:
        """Have ``rate`` jobs under ``s`` started within the window before now?"""
        assert s.rate is not None
        if s.key not in self.started:
            window = {"key": s.key, "since": self.now - s.window_ms}
            self.started[s.key] = int(self.c.execute("limit_start_count", window)[0][0])
        return self.started[s.key] >= s.rate

    def _ticket(self, s: LimitScope, job: ClaimedJob) -> int:
        """When ``job`` should try again under the full rate scope ``s``: its ticket's
        time; or, if that came before the room did (earlier starts ran late), first in
        line, as the window next frees; or a new ticket at the end of the line, one
        window after the rate-th latest start or ticket."""
        assert s.rate is not None
        mine = {"key": s.key, "job_id": job.id}
        rows = self.c.execute("limit_start_ticket", mine)
        if rows and int(rows[0][0]) > self.now:
            return int(rows[0][0])
        if rows:
            self.c.execute_count("limit_start_drop_ticket", mine)
            front = self.fronted.get(s.key, 0)
            self.fronted[s.key] = front + 1
            skip = {
                "key": s.key,
                "since": self.now - s.window_ms,
                "skip": self.started[s.key] - s.rate + front,
            }
            rows = self.c.execute("limit_start_nth_oldest", skip)
        else:
            rows = self.c.execute("limit_start_nth_latest", {"key": s.key, "skip": s.rate - 1})
        at = max(self.now + 1, int(rows[0][0]) + s.window_ms) if rows else self.now + 1
        self._take_start(s.key, at, job.id)
        return at

    def _take(self, ask: LimitAsk) -> None:
        job = ask.job
        slot_keys = [s.key for s in ask.scopes if _slots(s)]
        for key in slot_keys:
            live, first_expiry = self.slots[key]
            expiry = self.now + self.p.lease_ms
            self.slots[key] = (live + 1, min(first_expiry, expiry) if live else expiry)
            self.c.execute_count(
                "limit_slot_take",
                {
                    "key": key,
                    "job_id": job.id,
                    "attempts": job.attempts,
                    "holder": self.p.holder,
                    "now": self.now,
                    "lease_ms": self.p.lease_ms,
                },
            )
        for s in ask.scopes:
            if s.rate is not None:
                self.c.execute_count("limit_start_drop_ticket", {"key": s.key, "job_id": job.id})
                self._take_start(s.key, self.now, None)
                self.started[s.key] += 1
        if slot_keys:
            self.c.execute_count("limit_wait_drop_job", {"job_id": job.id})

    def _take_start(self, key: str, at: int, job_id: int | None) -> None:
        self.c.execute_count("limit_start_take", {"key": key, "at": at, "job_id": job_id})

    def _defer(self, job: ClaimedJob, wait_ms: int) -> LimitVerdict:
        """Back to the queue, unspent, due in ``wait_ms`` (a freed slot may wake it sooner)."""
        self.c.execute_count("limit_job_wait", {**self._job(job), "until": self.now + wait_ms})
        return LimitVerdict(job, False, wait_ms)

    def _job(self, job: ClaimedJob) -> dict[str, Any]:
        return {"id": job.id, "holder": self.p.holder, "attempts": job.attempts}


def _slots(s: LimitScope) -> bool:
    return s.concurrency is not None


def _now(c: Executor) -> int:
    return int(c.execute("now_ms")[0][0])


def _lock(c: Executor, keys: Iterable[str]) -> None:
    """Lock every key's row, in sorted order, creating the rows not there yet."""
    for key in sorted(set(keys)):
        if not c.execute("limit_lock", {"key": key}):
            c.execute_count("limit_key_add", {"key": key})
            c.execute("limit_lock", {"key": key})


def _slot_params(holder: str, slot: LimitSlot) -> dict[str, Any]:
    return {
        "key": slot.key,
        "job_id": slot.job.id,
        "attempts": slot.job.attempts,
        "holder": holder,
    }


def _wake_one(c: Executor, key: str, now: int) -> None:
    for _ in range(WAKE_TRIES):
        rows = c.execute("limit_wait_first", {"key": key})
        if not rows:
            return
        params = {"key": key, "job_id": int(rows[0][0]), "now": now}
        c.execute_count("limit_wait_drop", params)
        if c.execute_count("limit_wake", params):
            return
