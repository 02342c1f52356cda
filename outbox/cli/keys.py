"""``outbox keys status`` / ``outbox keys rotate``: encryption at rest (``outbox.job.sealing``).

``status`` counts stored rows per key id and table, plaintext included, so an operator
sees what a key still protects before taking it out of the keyring. ``rotate`` re-seals
everything under the keyring's first key, online and resumable (``outbox.db.keys``).
Neither prints a payload or a key; the keyring comes from ``OUTBOX_ENCRYPTION_KEYS`` or
``OUTBOX_ENCRYPTION_KEYRING``, checked before the command runs.
"""

from __future__ import annotations

import click
import orjson

from outbox import status as outbox_status
from outbox.cli.context import CliContext, pass_cli
from outbox.db import keys
from outbox.job import sealing

PLAINTEXT = outbox_status.PLAINTEXT


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
        enc = outbox_status.encryption_counts(conn)
    tables = {t: _named(counts) for t, counts in enc.tables.items()}
    if as_json:
        data = {
            "current": enc.sealing_key,
            "keyring": list(enc.keyring),
            "keys": _named(enc.rows),
            "tables": tables,
        }
        click.echo(orjson.dumps(data).decode())
        return
    click.echo(f"encrypting with: {enc.sealing_key or 'nothing (encryption is off)'}")
    for key_id, n in outbox_status.sorted_rows(enc.rows):
        note = "  (not in the keyring)" if key_id in enc.not_in_keyring else ""
        click.echo(f"{key_id or PLAINTEXT:<24} {n:>10,} rows{note}")
    for table, counts in tables.items():
        shown = ", ".join(f"{k} {n:,}" for k, n in counts.items()) or "empty"
        click.echo(f"  {table:<22} {shown}")


def _named(rows: dict[str | None, int]) -> dict[str, int]:
    return {k or PLAINTEXT: n for k, n in outbox_status.sorted_rows(rows)}


def echo_encryption(enc: outbox_status.EncryptionCounts) -> None:
    """``outbox status``'s lines on encryption: this process's key ids (never a key) and
    the stored rows per key id, those this process cannot open marked. Only when it
    matters: this process has a keyring, or some stored row is encrypted (``--json``
    always has them)."""
    if enc.sealing_key is None and not any(k is not None for k in enc.rows):
        return
    click.echo("")
    if enc.sealing_key is None:
        click.echo("encryption: off in this process (no keyring)")
    else:
        ring = ", ".join(enc.keyring)
        click.echo(f"encryption: on, encrypting with {enc.sealing_key} (keyring: {ring})")
    shown = [
        f"{key_id or PLAINTEXT} {n:,}"
        + (" (not in this keyring)" if key_id in enc.not_in_keyring else "")
        for key_id, n in outbox_status.sorted_rows(enc.rows)
    ]
    click.echo(f"stored rows by key: {', '.join(shown) or 'none'} (outbox keys status: per table)")


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


def echo_failure(
    exception_class: str, message: str | None, trace: str | None, payload: str | None
) -> None:
    """A dead letter's payload size and key id (never the payload), and its exception,
    opened when this process has its key, else said to be encrypted (key id and size;
    ``outbox.job.sealing.readable``). Shared by ``queue failed --show`` on SQL and with
    ``--broker``."""
    click.echo(f"PAYLOAD:     {payload_summary(payload)}")
    click.echo(f"EXCEPTION:   {exception_class}: {sealing.readable(message) or ''}")
    shown = sealing.readable(trace)
    if shown:
        click.echo("")
        click.echo(shown.rstrip())


def payload_summary(text: str | None) -> str:
    """``encrypted (key k1, 312 bytes)``, ``120 bytes, not encrypted`` or ``none``."""
    if text is None:
        return "none"
    return sealing.describe(text) or f"{len(text.encode()):,} bytes, not encrypted"


commands: list[click.Command] = [keys_group]
