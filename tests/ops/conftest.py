"""Fixtures of the operations tests: one PgBouncer for the whole session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fixtures import databases as backends
from tests.fixtures.gaps import Gap, skip_gap
from tests.ops.pgbouncer import PgBouncer


@pytest.fixture(scope="session")
def pgbouncer() -> Iterator[PgBouncer]:
    """PgBouncer in transaction pooling mode before a migrated database of its own."""
    if "postgresql" not in backends.BACKENDS:
        skip_gap(Gap.POSTGRESQL_NOT_SELECTED)
    bouncer = PgBouncer()
    yield bouncer
    bouncer.close()
