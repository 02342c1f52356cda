"""The pytest plugin of ``outbox.testing`` (entry point ``pytest11``: loaded wherever
outbox is installed, and inert until a test asks for one of its fixtures).

Fixtures:

- ``outbox_registry``: the application's ``Registry``, from the ini setting
  ``outbox_registry = myapp.jobs:registry`` (or override the fixture);
- ``outbox_clock``: a fresh frozen ``Clock`` per test;
- ``outbox``: ``run_pending``/``recorded``/``assert_recorded`` bound to both;
- ``outbox_eager``: eager mode for one test (``OUTBOX_EAGER=1`` turns it on for all).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest

from outbox.queue.registry import Registry
from outbox.testing.assertions import ANY, RecordedJob, assert_recorded, recorded
from outbox.testing.clock import Clock
from outbox.testing.eager import eager, eager_on
from outbox.testing.run import Report, run_pending, use

INI = "outbox_registry"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(INI, "MODULE:ATTR of the application's outbox Registry", default="")


def load(spec: str) -> Registry:
    """The registry at ``MODULE:ATTR``; a clear usage error otherwise."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise pytest.UsageError(f"{INI} must be MODULE:ATTR, e.g. myapp.jobs:registry")
    registry = getattr(importlib.import_module(module_name), attr, None)
    if not isinstance(registry, Registry):
        raise pytest.UsageError(f"{INI}: {spec} is not an outbox Registry")
    return registry


@pytest.fixture
def outbox_registry(pytestconfig: pytest.Config) -> Registry:
    spec = str(pytestconfig.getini(INI))
    if not spec:
        raise pytest.UsageError(
            f"set {INI} = MODULE:ATTR in the pytest ini, or override the outbox_registry fixture"
        )
    registry = load(spec)
    use(registry)
    return registry


@pytest.fixture
def outbox_clock() -> Clock:
    return Clock()


class Outbox:
    """The helpers with the test's registry and clock filled in."""

    def __init__(self, registry: Registry, clock: Clock) -> None:
        self.registry = registry
        self.clock = clock

    def run_pending(self, conn: Any) -> Report:
        return run_pending(conn, self.registry, clock=self.clock)

    def recorded(
        self, conn: Any, name: str | None = None, payload: Any = ANY, **kw: Any
    ) -> list[RecordedJob]:
        return recorded(conn, name, payload, **kw)

    def assert_recorded(
        self, conn: Any, name: str, payload: Any = ANY, **kw: Any
    ) -> list[RecordedJob]:
        return assert_recorded(conn, name, payload, **kw)


@pytest.fixture
def outbox(outbox_registry: Registry, outbox_clock: Clock) -> Outbox:
    return Outbox(outbox_registry, outbox_clock)


@pytest.fixture
def outbox_eager(outbox_registry: Registry, outbox_clock: Clock) -> Iterator[None]:
    with eager(outbox_registry, clock=outbox_clock):
        yield


@pytest.fixture(autouse=True)
def _outbox_eager_env(request: pytest.FixtureRequest) -> Iterator[None]:
    """``OUTBOX_EAGER=1``: every test runs in eager mode (needs ``outbox_registry``)."""
    if not eager_on():
        yield
        return
    registry = request.getfixturevalue("outbox_registry")
    with eager(registry, clock=request.getfixturevalue("outbox_clock")):
        yield
