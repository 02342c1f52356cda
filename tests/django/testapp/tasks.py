"""The tests' ``django.tasks`` tasks (the worker imports this module by path)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

try:
    from django.tasks import task  # type: ignore[import-not-found,unused-ignore]
except ImportError:
    from django_tasks import task


def _log(line: str) -> None:
    folder = os.environ.get("OUTBOX_TEST_RUNLOG")
    if folder:
        with open(Path(folder) / f"{os.getpid()}.log", "a", encoding="utf-8") as f:
            f.write(line + "\n")


@task()
def add(a: int, b: int) -> int:
    _log(f"add {a} {b}")
    return a + b


@task(queue_name="mail")
def send(to: str, *, subject: str = "") -> dict[str, Any]:
    _log(f"send {to}")
    return {"to": to, "subject": subject}


@task()
def fails(reason: str) -> None:
    raise LookupError(reason)


@task(takes_context=True)
def which_attempt(context: Any) -> int:
    return int(context.attempt)


@task()
async def add_async(a: int, b: int) -> int:
    return a + b


@task()
def ordered(label: str) -> None:
    _log(f"ordered {label}")


@task()
def sync_order(order_id: int) -> int:
    """The ordering page's task (``docs/how-to/ordering.md``)."""
    return order_id
