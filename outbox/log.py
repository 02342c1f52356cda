"""Logging: configured once by the CLI; the library only calls ``get_logger`` (below).

Events are named (``relay.batch``) and carry counts and ids as fields: never a payload,
never an exception message (those live only in the dead-letter row). The same things go
by the same keys everywhere: ``event``, ``message_id``, ``queue``, ``job`` (the job's
name), ``attempt``, ``duration_ms``, ``worker_id``, ``error`` (an exception's class).
JSON lines (via orjson) when stderr is not a terminal, readable console output when it is.

Every entry is one line in both formats: a traceback becomes its exception's class name
(``exc_info`` is dropped: a traceback's lines may quote a payload or a URL), and a line
break inside a value is written as ``\n``. While the CLI draws a progress bar on the
terminal (``progress_bar``), a log line first clears the bar's line and the bar is drawn
again beneath it, so neither breaks the other.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any, Literal, Protocol, TextIO

import orjson
import structlog

LogFormat = Literal["json", "console", "auto"]
LEVELS = ("debug", "info", "warning", "error")


def _dumps(obj: Any, default: Any = None) -> str:
    return orjson.dumps(obj, default=default).decode()


class _Bar(Protocol):
    def render_progress(self) -> None: ...


_bar: _Bar | None = None
_lock = threading.Lock()


@contextmanager
def progress_bar(bar: _Bar) -> Iterator[None]:
    """Keep ``bar`` (a click progress bar on stderr) whole while log lines are written."""
    global _bar
    _bar = bar
    try:
        yield
    finally:
        _bar = None


class LineLogger:
    """Writes each rendered entry as one line; clears and redraws an active progress bar."""

    def __init__(self, file: TextIO | None = None) -> None:
        self._file = file

    def msg(self, message: str) -> None:
        out = self._file or sys.stderr
        with _lock:
            bar = _bar
            if bar is not None:
                out.write("\r\x1b[K")
            out.write(message + "\n")
            out.flush()
            if bar is not None:
                # click draws only a changed line; the line was just cleared, so forget it.
                if hasattr(bar, "_last_line"):
                    bar._last_line = None
                bar.render_progress()

    debug = info = warning = warn = error = critical = exception = fatal = log = msg


def _one_line(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """No traceback, no line break: an exception is named by its class only."""
    exc = event.pop("exc_info", None)
    event.pop("exception", None)
    if exc is not None and "error" not in event:
        err = sys.exc_info()[1] if exc is True else exc
        if isinstance(err, BaseException):
            event["error"] = type(err).__name__
    for key, value in event.items():
        if isinstance(value, str) and ("\n" in value or "\r" in value):
            event[key] = value.replace("\r", "\\r").replace("\n", "\\n")
    return event


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
            _one_line,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=lambda *_: LineLogger(sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> Any:
    """The library's logger ``name``: structlog's once anyone (the CLI, the application)
    configured structlog; until then the stdlib logger of that name, which writes only
    where the application's logging says (we add a ``NullHandler`` to ``outbox``, so an
    application that configured nothing gets nothing, and never our lines on stdout)."""
    return _LibraryLogger(name, {})


class _LibraryLogger:
    """Decides per call, so a logger made at import follows a configuration made later."""

    __slots__ = ("_context", "_name")

    def __init__(self, name: str, context: dict[str, Any]) -> None:
        self._name = name
        self._context = context

    def bind(self, **values: Any) -> _LibraryLogger:
        return _LibraryLogger(self._name, {**self._context, **values})

    def __getattr__(self, method: str) -> Any:
        if structlog.is_configured():
            target = structlog.get_logger(self._name)
        else:
            target = _stdlib_logger(self._name)
        return getattr(target.bind(**self._context) if self._context else target, method)


def _stdlib_logger(name: str) -> Any:
    """``name`` through stdlib logging: one ``event key=value`` line, filtered by level
    there (a debug line costs a level check, nothing more)."""
    return structlog.wrap_logger(
        logging.getLogger(name),
        processors=[
            structlog.contextvars.merge_contextvars,
            _one_line,
            structlog.processors.KeyValueRenderer(key_order=["event"], drop_missing=True),
        ],
        wrapper_class=structlog.stdlib.BoundLogger,
    )


logging.getLogger("outbox").addHandler(logging.NullHandler())
