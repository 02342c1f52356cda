"""Argument types shared by the commands: a malformed value is a usage error (exit 2)
naming the argument, before any database is touched."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import click

from outbox.ids import is_message_id
from outbox.job import NAME_PATTERN

if TYPE_CHECKING:  # generic in newer click only; plain at run time
    _TextType = click.ParamType[str, Any]
else:
    _TextType = click.ParamType


class MessageId(_TextType):
    """A message id (a UUID, any case); ``all`` too when ``allow_all``."""

    name = "ID"

    def __init__(self, *, allow_all: bool = False) -> None:
        self.allow_all = allow_all

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if self.allow_all and text == "all":
            return text
        if not is_message_id(text):
            self.fail(
                f"{text!r} is not a message id (a UUID such as 01890a5d-ac96-774b-bcce-"
                f"b302099a8057{', or all' if self.allow_all else ''})",
                param,
                ctx,
            )
        return text.lower()


class QueueName(_TextType):
    """A queue name: 1-200 chars of ``[A-Za-z0-9_.:-]``."""

    name = "QUEUE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not NAME_PATTERN.fullmatch(text):
            self.fail(f"{text!r} is not a queue name (1-200 chars of A-Z a-z 0-9 _ . : -)")
        return text


MESSAGE_ID = MessageId()
MESSAGE_ID_OR_ALL = MessageId(allow_all=True)
QUEUE_NAME = QueueName()


class Seconds(click.FloatRange):
    """A number of seconds in a range, and finite: click's range lets ``nan`` through."""

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return float(number)
