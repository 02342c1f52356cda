"""Backoff bounds, the registry's rules and the worker's settings (no database)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from outbox import Registry
from outbox.errors import ConfigurationError
from outbox.queue import Backoff, WorkerConfig
from outbox.queue.registry import DEFAULT_MAX_ATTEMPTS


def test_backoff_is_exponential_capped_and_fully_jittered() -> None:
    b = Backoff(base=5, cap=300, rng=random.Random(7))
    assert [b.bound(n) for n in range(1, 9)] == [5, 10, 20, 40, 80, 160, 300, 300]
    for attempt in range(1, 12):
        draws = [b.delay(attempt) for _ in range(200)]
        assert all(0 <= d <= b.bound(attempt) for d in draws)
        assert max(draws) > 0.8 * b.bound(attempt)  # spread over the whole range
        assert min(draws) < 0.2 * b.bound(attempt)


def test_backoff_without_jitter_returns_the_bound() -> None:
    b = Backoff(base=0.5, cap=3, jitter=False)
    assert [b.delay_ms(n) for n in (1, 2, 3, 4, 5)] == [500, 1000, 2000, 3000, 3000]


@pytest.mark.parametrize(("base", "cap"), [(0, 10), (-1, 10), (10, 5)])
def test_backoff_rejects_nonsense(base: float, cap: float) -> None:
    named = r"Backoff needs a number base > 0 and cap >= base, in seconds \(got base="
    with pytest.raises(ValueError, match=named):
        Backoff(base=base, cap=cap)


def test_registry_resolves_max_attempts_recorded_then_handler_then_default() -> None:
    registry = Registry()
    registry.job("r.five", max_attempts=5)(lambda payload, ctx: None)
    assert registry.max_attempts("r.five", None) == 5
    assert registry.max_attempts("r.five", 2) == 2
    assert registry.max_attempts("r.unknown", None) == DEFAULT_MAX_ATTEMPTS == 3
    assert registry.get("r.five") is not None and "r.five" in registry and len(registry) == 1


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("bad name", {}, "job name"),
        ("", {}, "job name"),
        ("r.ok", {"max_attempts": 0}, "max_attempts"),
        ("r.ok", {"max_attempts": True}, "max_attempts"),
        ("r.ok", {"timeout": 0}, "timeout"),
    ],
)
def test_registry_refuses_bad_settings(name: str, kwargs: dict[str, Any], message: str) -> None:
    registry = Registry()
    with pytest.raises(ConfigurationError, match=message):
        registry.job(name, **kwargs)(lambda payload, ctx: None)
    assert len(registry) == 0


def test_registry_refuses_a_second_handler_for_one_name() -> None:
    registry = Registry()
    registry.job("r.once")(lambda payload, ctx: None)
    with pytest.raises(ConfigurationError, match="already registered"):
        registry.job("r.once")(lambda payload, ctx: None)


@pytest.mark.parametrize(
    "config",
    [
        WorkerConfig(queues={}),
        WorkerConfig(queues={"bad queue": None}),
        WorkerConfig(queues={"q": 0}),
        WorkerConfig(prefetch=0),
        WorkerConfig(concurrency=0),
        WorkerConfig(lease=0.1),
    ],
)
def test_worker_config_refuses_nonsense(config: WorkerConfig) -> None:
    with pytest.raises(ConfigurationError):
        config.check()


def test_queue_caps_default_to_concurrency() -> None:
    assert WorkerConfig(queues={"a": 8, "b": None}, concurrency=3).caps() == {"a": 8, "b": 3}
