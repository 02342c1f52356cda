"""One table style for every listing: UPPER_SNAKE headers (the JSON keys' names),
columns as wide as their widest cell, UTC times in one ISO 8601 form, and one way to say
that there is nothing to list (a line ``no <things>`` instead of an empty table)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import UTC, datetime

import click

NONE = "-"  # an empty cell: no such time, no error, no limit


def utc(ms: int | None) -> str:
    """Milliseconds since the epoch as ``2026-11-30T11:38:28Z``; ``-`` for none."""
    if ms is None:
        return NONE
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def age(seconds: float | None) -> str:
    """An age in seconds as ``12.3 s``; ``-`` for none."""
    return NONE if seconds is None else f"{seconds:.1f} s"


def render(
    headers: Sequence[str], rows: Sequence[Sequence[object]], *, right: Collection[int] = ()
) -> list[str]:
    """The lines of one table; columns in ``right`` (numbers) align right."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(widths[i]) if i in right else v.ljust(widths[i]) for i, v in enumerate(values)
        ]
        return "  ".join(parts).rstrip()

    return [line(list(headers)), *(line(r) for r in cells)]


def echo_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    nothing: str,
    right: Collection[int] = (),
) -> None:
    """Print the table, or the single line ``nothing`` when there are no rows."""
    if not rows:
        click.echo(nothing)
        return
    for text in render(headers, rows, right=right):
        click.echo(text)


def shown(count: int, limit: int) -> str:
    """The footer of a limited listing."""
    more = "; pass a larger LIMIT to see more" if count >= limit else ""
    return f"({count} shown, LIMIT {limit}{more})"


def echo_dead_letters(
    rows: Sequence[tuple[str, str, str | None, int, int | None, str]],
    limit: int,
    *,
    nothing: str,
) -> None:
    """The dead-letter listing of `outbox queue failed`, SQL queue and broker alike:
    (message id, queue, job, attempts, dead at in ms, exception class) per row; never
    the payload or the exception's message."""
    echo_table(
        ["MESSAGE_ID", "QUEUE", "JOB", "TRIES", "DEAD_AT", "EXCEPTION"],
        [[m, q, job or NONE, tries, utc(at), exc] for m, q, job, tries, at, exc in rows],
        nothing=nothing,
        right={3},
    )
    if rows:
        click.echo(shown(len(rows), limit))


def queue_state(paused: bool) -> str:
    """A queue's STATE cell: ``paused`` (`outbox queue pause`) or ``active``."""
    return "paused" if paused else "active"
