"""``--app MODULE:ATTR``: the application's Registry (``outbox.queue.loading``), a
loading problem reported as a usage error (exit 2) of one line on ``--app``.
"""

from __future__ import annotations

import click

from outbox.errors import ConfigurationError
from outbox.queue import loading
from outbox.queue.registry import Registry


def load_registry(spec: str) -> Registry:
    """``MODULE:ATTR`` → the ``Registry`` it names (the current directory is importable)."""
    try:
        return loading.load_registry(spec)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="--app") from None
