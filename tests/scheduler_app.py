"""A registry with periodic jobs for the scheduler's acceptance tests (`--app`)."""

from __future__ import annotations

from typing import Any

from outbox import Registry

registry = Registry()


@registry.periodic("0 0 * * *", name="acc.nightly", queue="periodic", payload={"secret": "p-7"})
def nightly(payload: Any, ctx: Any) -> None:
    pass


registry.schedule(
    "0 12 * * *", name="acc.noon_berlin", job="acc.elsewhere", timezone="Europe/Berlin"
)

empty = Registry()
