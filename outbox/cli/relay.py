"""`outbox relay` commands (being built)."""

import click

commands: list[click.Command] = []
