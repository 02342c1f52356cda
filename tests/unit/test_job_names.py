"""Job and queue names, max_attempts, available_at: the non-payload parts of a job."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from outbox.errors import InvalidJob
from outbox.job import Job, availability_ms, normalise

NAME_OK = ["a", "notes.index", "A-Z_0.9:x", "x" * 200]
NAME_BAD = ["", "x" * 201, "notes index", "notes/index", "notes\n", "nötes", "a;b", "%"]


@pytest.mark.parametrize("name", NAME_OK)
def test_valid_job_and_queue_names_are_kept(name: str) -> None:
    normal = normalise(Job(name, queue=name))
    assert (normal.name, normal.queue) == (name, name)


@pytest.mark.parametrize("name", NAME_BAD)
def test_job_name_outside_the_alphabet_or_length_is_rejected(name: str) -> None:
    with pytest.raises(InvalidJob, match=r"^job name must be 1-200 characters of A-Z a-z 0-9"):
        normalise(Job(name))


@pytest.mark.parametrize("name", NAME_BAD)
def test_queue_name_outside_the_alphabet_or_length_is_rejected(name: str) -> None:
    with pytest.raises(InvalidJob, match=r"^queue name must be 1-200 characters of A-Z a-z 0-9"):
        normalise(Job("ok", queue=name))


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("", "(got an empty string)"),
        ("notes/index", "(got 'notes/index')"),
        ("x" * 201, "(got a 201-byte string)"),
        (None, "(got NoneType)"),
        (7, "(got int)"),
    ],
)
def test_name_message_says_what_was_given(name: object, shown: str) -> None:
    with pytest.raises(InvalidJob) as info:
        normalise(Job(name))  # type: ignore[arg-type]
    assert str(info.value) == f"job name must be 1-200 characters of A-Z a-z 0-9 _ . : - {shown}"


def test_normalise_refuses_something_that_is_not_a_job() -> None:
    with pytest.raises(InvalidJob, match=r"^expected an outbox.Job \(got dict\)$"):
        normalise({"name": "x"})  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [None, 1, 3, 1000])
def test_max_attempts_none_or_1_to_1000_is_kept(value: int | None) -> None:
    assert normalise(Job("a", max_attempts=value)).max_attempts == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "max_attempts must be between 1 and 1000 (got 0)"),
        (-1, "max_attempts must be between 1 and 1000 (got -1)"),
        (1001, "max_attempts must be between 1 and 1000 (got 1001)"),
        (True, "max_attempts must be an int or None (got bool)"),
        (2.0, "max_attempts must be an int or None (got float)"),
        ("3", "max_attempts must be an int or None (got str)"),
    ],
)
def test_bad_max_attempts_is_rejected(value: object, message: str) -> None:
    with pytest.raises(InvalidJob) as info:
        normalise(Job("a", max_attempts=value))  # type: ignore[arg-type]
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("given", "ms"),
    [
        (0, None),
        (0.0, None),
        (1_700_000_000, 1_700_000_000_000),
        (1_700_000_000.25, 1_700_000_000_250),
        (1_700_000_000.0004, 1_700_000_000_000),
        (datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC), 1_700_000_000_000),
        (
            datetime(2023, 11, 15, 0, 13, 20, 5000, tzinfo=timezone(timedelta(hours=2))),
            1_700_000_000_005,
        ),
        (datetime(1970, 1, 1, tzinfo=UTC), None),
    ],
)
def test_available_at_becomes_integer_milliseconds_with_zero_meaning_now(
    given: object, ms: int | None
) -> None:
    assert availability_ms(given) == ms


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (datetime(2030, 1, 1), "available_at must be an aware datetime (it has no time zone)"),
        (-1, "available_at must not be negative (0 means now)"),
        (-0.5, "available_at must not be negative (0 means now)"),
        (float("nan"), "available_at must be a finite number of UNIX seconds"),
        (float("inf"), "available_at must be a finite number of UNIX seconds"),
        (253_402_300_800, "available_at is after the year 9999"),
        (True, "available_at must be UNIX seconds (int/float) or an aware datetime (got bool)"),
        (
            "2030-01-01",
            "available_at must be UNIX seconds (int/float) or an aware datetime (got str)",
        ),
        (None, "available_at must be UNIX seconds (int/float) or an aware datetime (got NoneType)"),
    ],
)
def test_bad_available_at_is_rejected_with_its_reason(given: object, message: str) -> None:
    with pytest.raises(InvalidJob) as info:
        availability_ms(given)
    assert str(info.value) == message
