"""Import an application's jobs module and find its ``Registry`` (``MODULE:ATTR``).

The CLI's ``--app`` and the Django worker's ``OUTBOX['REGISTRY']`` both name a registry
this way, so both load it here. Each way this can go wrong is a ``ConfigurationError`` of
one line naming the real cause: no such module; a module that exists but whose own
import failed (which import, or which exception where); a syntax error (file:line); no
such attribute; an attribute that is not a Registry. Never a traceback, never an
exception message from the application's code (it may quote data), except our own
``OutboxError``s, whose messages are written for this (a bad ``@registry.job(...)``
option, say).
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

from outbox.errors import ConfigurationError, OutboxError
from outbox.queue.registry import Registry


def load_registry(spec: str) -> Registry:
    """``MODULE:ATTR`` → the ``Registry`` it names (the current directory is importable)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError("expected MODULE:ATTR, e.g. myapp.jobs:registry")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except SyntaxError as exc:
        raise ConfigurationError(f"{exc.filename}:{exc.lineno}: syntax error ({exc.msg})") from None
    except ModuleNotFoundError as exc:
        raise ConfigurationError(_not_found(module_name, exc)) from None
    except ImportError as exc:
        raise ConfigurationError(f"importing {module_name!r} failed: {exc}") from None
    except OutboxError as exc:
        raise ConfigurationError(f"importing {module_name!r} failed: {exc}") from None
    except Exception as exc:
        raise ConfigurationError(f"importing {module_name!r} failed: {_where(exc)}") from None
    if not hasattr(module, attr):
        raise ConfigurationError(f"no attribute {attr!r} in module {module_name!r}")
    registry = getattr(module, attr)
    if not isinstance(registry, Registry):
        kind = type(registry).__name__
        raise ConfigurationError(f"{spec!r} is not an outbox.Registry (it is a {kind})")
    return registry


def _not_found(module_name: str, exc: ModuleNotFoundError) -> str:
    missing = exc.name or ""
    if module_name == missing or module_name.startswith(f"{missing}."):
        return f"no module named {module_name!r} (looked in the current folder and sys.path)"
    return f"importing {module_name!r} failed: it imports {missing!r}, which is not installed"


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _where(exc: BaseException) -> str:
    """``RuntimeError at app/jobs.py:12``: the class and the innermost frame, with the
    message when it is ours or Python's own about a call (a ``TypeError``: a missing
    ``name=``), never the application's (which may quote data)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return type(exc).__name__
    last = frames[-1]
    where = f"{type(exc).__name__} at {last.filename}:{last.lineno}"
    ours = os.path.abspath(last.filename).startswith(_PACKAGE + os.sep)
    if (ours or isinstance(exc, TypeError)) and str(exc):
        return f"{where}: {str(exc).splitlines()[0]}"
    return where
