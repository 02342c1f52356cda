"""Global limits are checked where they are given: at registration, and in the worker's
configuration. A wrong one raises ConfigurationError naming the job and the value."""

from __future__ import annotations

from typing import Any

import pytest

from outbox import Registry
from outbox.errors import ConfigurationError
from outbox.queue import WorkerConfig
from outbox.queue.limits import Rate, parse_rate


@pytest.mark.parametrize(
    ("text", "rate"),
    [("100/m", Rate(100, 60_000)), ("10/s", Rate(10, 1_000)), ("1000/h", Rate(1000, 3_600_000))],
)
def test_rates_parse_per_second_minute_and_hour(text: str, rate: Rate) -> None:
    assert parse_rate("j", text) == rate
    assert str(rate) == text


@pytest.mark.parametrize("rate", ["fast", "0/s", "10/d", "10 / s", "-1/s", "1.5/s", "", 10])
def test_a_malformed_rate_fails_at_registration_naming_it(rate: Any) -> None:
    registry = Registry()
    with pytest.raises(ConfigurationError) as err:
        registry.job("sync.account", rate=rate)
    message = str(err.value)
    assert f"job 'sync.account': rate {rate!r} is not a rate" in message
    assert "N/s, N/m or N/h" in message
    assert "sync.account" not in registry


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"concurrency": 0}, "concurrency must be a whole number >= 1 (jobs at once) (got 0)"),
        (
            {"concurrency": 2.5},
            "concurrency must be a whole number >= 1 (jobs at once) (got 2.5)",
        ),
        (
            {"concurrency": True},
            "concurrency must be a whole number >= 1 (jobs at once) (got True)",
        ),
        (
            {"concurrency": 2, "concurrency_key": "account_id"},
            "concurrency_key must be a function of the payload (got 'account_id')",
        ),
        ({"concurrency_key": lambda p: p}, "concurrency_key needs concurrency=N or rate=..."),
    ],
)
def test_bad_limits_fail_at_registration(kwargs: dict[str, Any], message: str) -> None:
    registry = Registry()
    with pytest.raises(ConfigurationError) as err:
        registry.job("sync.account", **kwargs)
    assert str(err.value).startswith("job 'sync.account': ")
    assert message in str(err.value)
    assert len(registry) == 0 and registry.limited == {}


def test_registry_knows_which_names_have_limits() -> None:
    registry = Registry()

    @registry.job("a.limited", concurrency=2, concurrency_key=lambda p: p["k"], rate="5/s")
    def limited(payload: Any, ctx: Any) -> None: ...

    @registry.job("a.free")
    def free(payload: Any, ctx: Any) -> None: ...

    limits = registry.limited["a.limited"]
    assert (limits.concurrency, limits.rate) == (2, Rate(5, 1_000))
    assert list(registry.limited) == ["a.limited"]


@pytest.mark.parametrize(
    ("queue_limits", "message"),
    [
        ({"mail": 2}, "'mail' is not one of the worker's queues"),
        ({"default": 0}, "the global limit must be a whole number >= 1"),
        ({"bad name": 1}, "must be 1-200 chars"),
    ],
)
def test_worker_config_refuses_a_bad_queue_limit(
    queue_limits: dict[str, int], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        WorkerConfig(queue_limits=queue_limits).check()
