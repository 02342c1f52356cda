"""``WorkerConfig.check``: every setting refused where it is given, by name, before a
worker starts; never a bare ``TypeError`` or a NaN that fails at the first idle sleep."""

from __future__ import annotations

from typing import Any

import pytest

from outbox.errors import ConfigurationError
from outbox.queue.config import WorkerConfig

BAD: list[tuple[dict[str, Any], str]] = [
    ({"concurrency": "4"}, "concurrency must be a whole number >= 1 (got '4')"),
    ({"concurrency": 0}, "concurrency must be a whole number >= 1 (got 0)"),
    ({"concurrency": True}, "concurrency must be a whole number >= 1 (got True)"),
    ({"prefetch": -1}, "prefetch must be a whole number >= 1 (got -1)"),
    ({"prefetch": 2.5}, "prefetch must be a whole number >= 1 (got 2.5)"),
    ({"max_jobs": -1}, "max_jobs must be a whole number >= 1 (got -1)"),
    ({"queues": {"default": 0}}, "queue 'default': the concurrency cap must be a whole number"),
    ({"queues": {"default": True}}, "queue 'default': the concurrency cap must be a whole number"),
    ({"lease": 0.1}, "lease must be >= 0.3 seconds (got 0.1)"),
    ({"lease": float("inf")}, "lease must be a finite number of seconds (got inf)"),
    ({"sleep": float("nan")}, "sleep must be a number of seconds (got nan)"),
    ({"sleep": 0}, "sleep must be > 0 seconds (got 0)"),
    ({"sleep": "1"}, "sleep must be a number of seconds (got '1')"),
    ({"grace": -1}, "grace must be >= 0 seconds (got -1)"),
    ({"max_time": 0}, "max_time must be > 0 seconds (got 0)"),
    ({"reap_every": float("inf")}, "reap_every must be a finite number of seconds (got inf)"),
    ({"unknown_job_delay": 90_000}, "unknown_job_delay must be >= 0 and <= 86400 seconds"),
    ({"unknown_job_delay": float("nan")}, "unknown_job_delay must be a number of seconds"),
    ({"listen": "yes"}, "listen must be True or False (got 'yes')"),
    ({"stop_when_empty": 1}, "stop_when_empty must be True or False (got 1)"),
]


@pytest.mark.parametrize(("settings", "message"), BAD, ids=[str(s) for s, _ in BAD])
def test_a_bad_setting_is_refused_by_name(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        WorkerConfig(**settings).check()
    assert message in str(refused.value)


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"concurrency": 8, "prefetch": 100, "max_jobs": 1, "queues": {"a": 2, "b": None}},
        {"lease": 0.3, "sleep": 0.01, "grace": 0, "unknown_job_delay": 0},
        {"max_time": float("inf"), "reap_every": 5, "stop_when_empty": True, "listen": False},
    ],
)
def test_good_settings_pass(settings: dict[str, Any]) -> None:
    WorkerConfig(**settings).check()
