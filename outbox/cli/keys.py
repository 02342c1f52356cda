"""``outbox keys status`` / ``outbox keys rotate``: encryption at rest (``outbox.sealing``).

``status`` counts stored rows per key id and table, plaintext included, so an operator
sees what a key still protects before taking it out of the keyring. ``rotate`` re-seals
everything under the keyring's first key, online and resumable (``outbox.db.keys``).
Neither prints a payload or a key; the keyring comes from ``OUTBOX_ENCRYPTION_KEYS`` or
``OUTBOX_ENCRYPTION_KEYRING``, checked before the command runs.
"""

from __future__ import annotations

import click
import orjson

from outbox import sealing
from outbox.cli.context import CliContext, pass_cli
from outbox.db import keys

PLAINTEXT = "plaintext"


@click.group("keys")
def keys_group() -> None:
    """Encryption keys: how many rows each protects, and rotation to the newest."""


@keys_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@pass_cli
def status_command(cli: CliContext, as_json: bool) -> None:
    """Rows per key id in each table ("plaintext": not encrypted), and the key that
    encrypts now."""
    with cli.connect() as conn:
        found = keys.status(conn)
    ring = sealing.active()
    tables = {t: {k or PLAINTEXT: n for k, n in counts.items()} for t, counts in found.items()}
    totals: dict[str, int] = {}
    for counts in tables.values():
        for key_id, n in counts.items():
            totals[key_id] = totals.get(key_id, 0) + n
    if as_json:
        data = {
            "current": None if ring is None else ring.current,
            "keyring": [] if ring is None else list(ring.ids),
            "keys": totals,
            "tables": tables,
        }
        click.echo(orjson.dumps(data).decode())
        return
    current = "nothing (encryption is off)" if ring is None else ring.current
    click.echo(f"encrypting with: {current}")
    known = set(() if ring is None else ring.ids)
    for key_id, n in sorted(totals.items()):
        note = "" if key_id == PLAINTEXT or key_id in known else "  (not in the keyring)"
        click.echo(f"{key_id:<24} {n:>10,} rows{note}")
    for table, counts in tables.items():
        shown = ", ".join(f"{k} {n:,}" for k, n in sorted(counts.items())) or "empty"
        click.echo(f"  {table:<22} {shown}")


@keys_group.command("rotate")
@click.option(
    "--batch",
    type=click.IntRange(1, keys.MAX_BATCH),
    default=keys.DEFAULT_BATCH,
    show_default=True,
    help="Rows per transaction.",
)
@pass_cli
def rotate_command(cli: CliContext, batch: int) -> None:
    """Re-encrypt every stored payload, result and dead-letter message under the newest
    key (the first of the keyring), in short transactions, while producers and workers
    run. Stop it at any time; run it again to finish. Rows whose key is missing or that
    were tampered with are left as they are and counted."""
    with cli.connect() as conn:
        done = keys.rotate(conn, batch=batch)
    for table, n in done.resealed.items():
        click.echo(f"{table:<22} {n:>10,} re-encrypted")
    click.echo(f"under key {done.key_id}: {done.total:,} rows")
    left = done.missing_key + done.tampered
    if left or done.unverified:
        click.echo(
            f"left: {done.missing_key:,} texts whose key is not in the keyring, "
            f"{done.tampered:,} tampered with, {done.unverified:,} intents that do not verify"
        )


def echo_failure(exception_class: str, message: str | None, trace: str | None) -> None:
    """A dead letter's exception, opened when this process has its key, else said to be
    encrypted (key id and size; ``outbox.sealing.readable``). Shared by
    ``queue failed ID`` on SQL and with ``--broker``."""
    click.echo(f"EXCEPTION:   {exception_class}: {sealing.readable(message) or ''}")
    shown = sealing.readable(trace)
    if shown:
        click.echo("")
        click.echo(shown.rstrip())


commands: list[click.Command] = [keys_group]
