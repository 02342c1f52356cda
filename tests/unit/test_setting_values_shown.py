"""A wrong setting's error shows the value given, not only its type (issue 38): ``(got 0)``
where it said ``(got int)``; a long or unprintable string by its size, never echoed."""

from __future__ import annotations

from typing import Any

import pytest

from outbox import Registry
from outbox.errors import ConfigurationError
from outbox.job import shown
from outbox.queue import WorkerConfig


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be an int from 1 to 1000 (got 0)"),
        ({"max_attempts": 1001}, "max_attempts must be an int from 1 to 1000 (got 1001)"),
        ({"max_attempts": "3"}, "max_attempts must be an int from 1 to 1000 (got '3')"),
        ({"timeout": -1}, "timeout must be a positive, finite number of seconds (got -1)"),
        (
            {"timeout": float("inf")},
            "timeout must be a positive, finite number of seconds (got inf)",
        ),
        ({"concurrency": 0}, "concurrency must be a whole number >= 1 (jobs at once) (got 0)"),
        ({"transactional": None}, "transactional must be True or False (got None)"),
    ],
)
def test_registration_errors_give_the_value(options: dict[str, Any], message: str) -> None:
    registry = Registry()
    with pytest.raises(ConfigurationError) as err:
        registry.job("mail.send", **options)
    assert str(err.value) == f"job 'mail.send': {message}"
    assert "mail.send" not in registry


def test_a_long_or_secret_looking_string_is_shown_by_its_size_only() -> None:
    secret = "postgresql://app:hunter2@db/app?" + "x" * 100
    registry = Registry()
    with pytest.raises(ConfigurationError) as err:
        registry.job("mail.send", timeout=secret)
    assert "hunter2" not in str(err.value)
    assert str(err.value).endswith(f"(got a {len(secret)}-byte string)")
    with pytest.raises(ConfigurationError) as err:
        WorkerConfig(queues={"mail": None}, concurrency=secret).check()
    assert "hunter2" not in str(err.value) and "-byte string)" in str(err.value)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (-1.5, "-1.5"),
        (float("nan"), "nan"),
        (True, "True"),
        (None, "None"),
        (10**30, "an int of 100 bits"),
        ("a\nb", "a 3-byte string"),
        ({"payload": "secret"}, "dict"),
    ],
)
def test_shown_caps_what_it_prints(value: object, text: str) -> None:
    assert shown(value) == text
