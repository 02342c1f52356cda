"""The settle policy, row by row: every outcome an attempt can have and what follows it.

The table below is the one in ``outbox.queue.policy``'s docstring and in the docs
(``docs/explanation/state-machines.md``, "What happens after an attempt"); the last test
holds the page to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest

from outbox.db.rows import ClaimedJob, Failure
from outbox.queue.backoff import DEFAULT_BACKOFF, Backoff
from outbox.queue.control import MAX_SNOOZES, SNOOZE_LIMIT
from outbox.queue.execute import Kind, Outcome
from outbox.queue.policy import (
    UNKNOWN_DELAY_MS,
    UNKNOWN_FAILURE,
    WORKER_STOPPED,
    Action,
    Decision,
    decide,
    decide_by_kind,
    decide_stopped,
    retry_delay_ms,
)
from tests.fixtures.workers import ROOT

NOW = 1_700_000_000_000
BOOM = Failure("ValueError", "boom", "trace")
STEADY = Backoff(base=2.0, cap=60.0, jitter=False)


def job(attempts: int = 1, max_attempts: int | None = None) -> ClaimedJob:
    return ClaimedJob(1, "m", "q", "j", "{}", attempts, max_attempts, 0, 0)


@dataclass(frozen=True)
class Row:
    name: str
    outcome: Outcome
    expected: Decision
    cancelled: bool = False
    snoozes: int = 0
    max_attempts: int = 3
    backoff: Backoff | None = STEADY


ROWS = [
    Row("returned", Outcome(Kind.DONE, job()), Decision(Action.ACK)),
    Row("committed (transactional)", Outcome(Kind.ACKED, job()), Decision(Action.ACK)),
    Row("cancelled while held, then returned", Outcome(Kind.DONE, job()),
        Decision(Action.CANCEL, failure=Failure("cancelled", "cancelled by an operator "
                                                "(outbox queue cancel)", "")), cancelled=True),
    Row("cancelled while held, then failed", Outcome(Kind.FAILED, job(), BOOM),
        Decision(Action.CANCEL, failure=Failure("cancelled", "cancelled by an operator "
                                                "(outbox queue cancel)", "")), cancelled=True),
    Row("cancelled (async handler)", Outcome(Kind.CANCELLED, job()),
        Decision(Action.CANCEL, failure=Failure("cancelled", "cancelled by an operator "
                                                "(outbox queue cancel)", ""))),
    Row("cancelled but never started", Outcome(Kind.UNSTARTED, job()),
        Decision(Action.RELEASE), cancelled=True),
    Row("cancelled after its own commit", Outcome(Kind.ACKED, job()),
        Decision(Action.ACK), cancelled=True),
    Row("never started", Outcome(Kind.UNSTARTED, job()), Decision(Action.RELEASE)),
    Row("lease lost before its commit", Outcome(Kind.LOST, job()), Decision(Action.LOST)),
    Row("snoozed", Outcome(Kind.SNOOZED, job(), snooze_s=1.5),
        Decision(Action.SNOOZE, 1500, NOW + 1500)),
    Row("snoozed on its last attempt", Outcome(Kind.SNOOZED, job(3), snooze_s=0),
        Decision(Action.SNOOZE, 0, NOW)),
    Row("snoozed once too often", Outcome(Kind.SNOOZED, job(), snooze_s=1),
        Decision(Action.DEAD, failure=Failure(
            SNOOZE_LIMIT, f"the job was snoozed {MAX_SNOOZES} times, the most a job may be", ""
        )), snoozes=MAX_SNOOZES),
    Row("snoozed for a bad number, attempts left", Outcome(Kind.SNOOZED, job(), snooze_s=-1),
        Decision(Action.RETRY, 2000, NOW + 2000, Failure("outbox.errors.InvalidJob", "", ""))),
    Row("snoozed for a bad number, last attempt", Outcome(Kind.SNOOZED, job(3), snooze_s="x"),
        Decision(Action.DEAD, failure=Failure("outbox.errors.InvalidJob", "", ""))),
    Row("failed permanently", Outcome(Kind.PERMANENT, job(), BOOM),
        Decision(Action.DEAD, failure=BOOM)),
    Row("failed, attempts spent", Outcome(Kind.FAILED, job(3), BOOM),
        Decision(Action.DEAD, failure=BOOM)),
    Row("failed, the recorded limit wins", Outcome(Kind.FAILED, job(2, 2), BOOM),
        Decision(Action.DEAD, failure=BOOM), max_attempts=2),
    Row("failed, attempts left", Outcome(Kind.FAILED, job(1), BOOM),
        Decision(Action.RETRY, 2000, NOW + 2000, BOOM)),
    Row("failed again, the backoff doubles", Outcome(Kind.FAILED, job(2), BOOM),
        Decision(Action.RETRY, 4000, NOW + 4000, BOOM)),
    Row("failed without an exception", Outcome(Kind.FAILED, job(1)),
        Decision(Action.RETRY, 2000, NOW + 2000, UNKNOWN_FAILURE)),
    Row("failed, no handler here", Outcome(Kind.FAILED, job(1), BOOM),
        Decision(Action.RETRY, UNKNOWN_DELAY_MS, NOW + UNKNOWN_DELAY_MS, BOOM), backoff=None),
]


def _same(got: Decision, expected: Decision) -> None:
    assert (got.action, got.delay_ms, got.due_ms) == (
        expected.action, expected.delay_ms, expected.due_ms
    )
    if expected.failure is None:
        assert got.failure is None
        return
    assert got.failure is not None
    assert got.failure.exception_class == expected.failure.exception_class
    if expected.failure.message:  # the InvalidJob rows carry the snooze's own message
        assert got.failure == expected.failure


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_each_outcome_gets_its_decision(row: Row) -> None:
    got = decide(
        row.outcome,
        max_attempts=row.max_attempts,
        backoff=row.backoff,
        now_ms=NOW,
        cancelled=row.cancelled,
        snoozes=row.snoozes,
    )
    _same(got, row.expected)


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_the_handler_free_rows_decide_alike_by_kind(row: Row) -> None:
    """``decide_by_kind`` (what the worker asks before any handler lookup) answers
    exactly the rows that need no handler, as ``decide`` does; the rest are None."""
    got = decide_by_kind(row.outcome.kind, row.cancelled)
    if row.expected.action in (Action.RETRY, Action.DEAD, Action.SNOOZE):
        assert got is None
    else:
        assert got is not None
        _same(got, row.expected)


# What each kind decides without a handler, written out here (``decide`` asks
# ``decide_by_kind`` first, so comparing the two would test nothing).
_BY_KIND = {Kind.DONE: Action.ACK, Kind.ACKED: Action.ACK, Kind.UNSTARTED: Action.RELEASE,
            Kind.LOST: Action.LOST, Kind.CANCELLED: Action.CANCEL}


@pytest.mark.parametrize("cancelled", [False, True])
@pytest.mark.parametrize("kind", list(Kind))
def test_every_kind_is_decided_by_kind_or_left_to_decide(kind: Kind, cancelled: bool) -> None:
    handler_free = decide_by_kind(kind, cancelled)
    if handler_free is None:  # a snooze or a failure: the limit and backoff decide
        assert kind in (Kind.FAILED, Kind.PERMANENT, Kind.SNOOZED) and not cancelled
    else:
        cancels = cancelled and kind not in (Kind.UNSTARTED, Kind.ACKED)
        expected = Action.CANCEL if cancels else _BY_KIND[kind]
        assert handler_free.action is expected


class RaisingBackoff(Backoff):
    def delay(self, attempt: int) -> float:
        raise RuntimeError("a broken backoff")

    def bound(self, attempt: int) -> float:
        raise RuntimeError("a broken backoff")


class NegativeBackoff(Backoff):
    def delay(self, attempt: int) -> float:
        return -1.0


class NanBackoff(Backoff):
    def delay(self, attempt: int) -> float:
        return float("nan")


@pytest.mark.parametrize("broken", [RaisingBackoff, NegativeBackoff, NanBackoff])
def test_a_backoff_that_raises_or_returns_nonsense_gets_the_default(broken: Any) -> None:
    steady = broken(jitter=False)
    got = decide(Outcome(Kind.FAILED, job(2), BOOM), max_attempts=3, backoff=steady, now_ms=NOW)
    assert (got.action, got.delay_ms) == (Action.RETRY, round(DEFAULT_BACKOFF.bound(2) * 1000))
    jittered = broken()
    for _ in range(20):
        delay = retry_delay_ms(jittered, 2)
        assert 0 <= delay <= round(DEFAULT_BACKOFF.bound(2) * 1000)


def test_jitter_false_asks_for_the_bound_of_a_jittered_backoff() -> None:
    """``outbox.testing`` wants repeatable delays from the same handler's backoff."""
    jittered = Backoff(base=2.0, cap=60.0)
    got = decide(
        Outcome(Kind.FAILED, job(3), BOOM), max_attempts=5, backoff=jittered, now_ms=NOW,
        jitter=False,
    )
    assert (got.delay_ms, got.due_ms) == (8000, NOW + 8000)
    assert all(0 <= retry_delay_ms(jittered, 3) <= 8000 for _ in range(50))


def test_the_docs_table_has_a_line_for_every_decision() -> None:
    page = (ROOT / "docs" / "explanation" / "state-machines.md").read_text(encoding="utf-8")
    section = page.split("## What happens after an attempt", 1)[1].split("\n#", 1)[0]
    shown = set(re.findall(r"^\|[^|]+\| \*\*([a-z]+)\*\*", section, re.M))
    assert shown == {a.value for a in Action}


def test_a_job_cut_short_by_the_grace_retries_at_once_or_dead_letters_at_its_limit() -> None:
    """Issue 38: given back as the worker goes, no backoff, its attempt counted."""
    retry, dead = decide_stopped(1, 3), decide_stopped(3, 3)
    assert (retry.action, retry.delay_ms, retry.error) == (Action.RETRY, 0, WORKER_STOPPED)
    assert (dead.action, dead.error) == (Action.DEAD, WORKER_STOPPED)
