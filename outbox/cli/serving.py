"""``--metrics-port`` and ``--metrics-bind`` for the long-running commands.

Each reads ``OUTBOX_<COMMAND>_METRICS_PORT`` first, then ``OUTBOX_METRICS_PORT`` (one
setting for a host that runs one process), and likewise for the bind address.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def metrics_options() -> Callable[[F], F]:
    """Add the two options to ``command``; their environment names (and the shared
    ``OUTBOX_METRICS_*`` aliases) come from ``outbox.cli.conventions``."""

    def decorate(fn: F) -> F:
        fn = click.option(
            "--metrics-bind",
            default="127.0.0.1",
            show_default=True,
            help="Address the metrics port listens on.",
        )(fn)
        return click.option(
            "--metrics-port",
            type=click.IntRange(1, 65535),
            callback=_needs_prometheus,
            help="Serve /metrics, /healthz and /readyz on this port.",
        )(fn)

    return decorate


def _needs_prometheus(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """Refuse the option at once, not at the first scrape, when the extra is missing."""
    if value is not None:
        try:
            import prometheus_client  # noqa: F401
        except ImportError:
            raise click.BadParameter(
                "needs prometheus-client: pip install 'outbox-relay[metrics]'"
            ) from None
    return value
