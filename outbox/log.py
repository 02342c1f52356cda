"""Logging: configured once by the CLI; the library only calls ``get_logger``.

Events are named (``relay.batch``) and carry counts and ids as fields: never a payload,
never an exception message (those live only in the dead-letter row).
JSON lines (via orjson) when stderr is not a terminal, readable console output when it is.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal

import orjson
import structlog

LogFormat = Literal["json", "console", "auto"]
LEVELS = ("debug", "info", "warning", "error")


def _dumps(obj: Any, default: Any = None) -> str:
    return orjson.dumps(obj, default=default).decode()


def configure(fmt: LogFormat = "auto", level: str = "info") -> None:
    """Set up structlog for this process: level filter, timestamps, renderer, stderr."""
    if fmt == "auto":
        fmt = "console" if sys.stderr.isatty() else "json"
    renderer: Any = (
        structlog.processors.JSONRenderer(serializer=_dumps)
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> Any:
    return structlog.get_logger(name)
