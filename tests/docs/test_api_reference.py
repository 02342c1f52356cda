"""Every public name has a docstring and an entry in the API reference.

The public names: ``outbox.__all__``, and in each public module its ``__all__`` or, where
it has none, the classes and functions it defines; for each public class, the methods and
properties it defines itself. The API page (``docs/reference/api.md``) must name each
either with its own ``::: outbox.NAME`` entry or through a ``::: module`` entry that
documents the module's members (all of them, or a ``members:`` list naming it).
"""

from __future__ import annotations

import importlib
import inspect
import re
from types import ModuleType
from typing import Any

import pytest

import outbox
from tests.docs.pages import text

PUBLIC_MODULES = [
    "outbox",
    "outbox.errors",
    "outbox.testing",
    "outbox.queue",
    "outbox.queue.control",
    "outbox.queue.policy",
    "outbox.relay",
    "outbox.schedule",
    "outbox.alembic",
    "outbox.dashboard",
]
PAGE = text("reference/api.md")
# Names that are values, not code: documented in prose on the page.
VALUES = {"__version__"}


def _names(module: ModuleType) -> list[str]:
    if hasattr(module, "__all__"):
        return [n for n in module.__all__ if n not in VALUES]
    return [
        n
        for n, v in vars(module).items()
        if not n.startswith("_")
        and (inspect.isclass(v) or inspect.isfunction(v))
        and getattr(v, "__module__", None) == module.__name__
    ]


def _entries() -> dict[str, list[str] | None]:
    """``::: target`` -> the members its options list (None: every public member)."""
    found: dict[str, list[str] | None] = {}
    for m in re.finditer(r"^::: (\S+)\n((?:    .*\n)*)", PAGE, re.M):
        options = m[2]
        if re.search(r"^\s+members: false$", options, re.M):
            found[m[1]] = []
        elif "members:" in options:
            found[m[1]] = re.findall(r"^\s+- (\w+)$", options, re.M)
        else:
            found[m[1]] = None
    return found


ENTRIES = _entries()
PUBLIC = [(m, n) for m in PUBLIC_MODULES for n in _names(importlib.import_module(m))]


def _directly(module: str, name: str) -> bool:
    obj = getattr(importlib.import_module(module), name)
    defined = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"
    if f"{module}.{name}" in ENTRIES or defined in ENTRIES:  # outbox.record is also a module
        return True
    members = ENTRIES.get(module, [])
    return module in ENTRIES and (members is None or name in (members or []))


def _documented(module: str, name: str) -> bool:
    """Documented here, or the same object documented under another public path (the
    ``outbox.queue.Worker`` that ``outbox.Worker`` re-exports is one entry)."""
    obj = getattr(importlib.import_module(module), name)
    return any(
        _directly(m, n) for m, n in PUBLIC if getattr(importlib.import_module(m), n) is obj
    )


def test_the_module_list_covers_the_top_level_api() -> None:
    assert len(outbox.__all__) >= 25  # it read the real list
    assert {m for m in PUBLIC_MODULES if m != "outbox"} <= set(ENTRIES)


@pytest.mark.parametrize(("module", "name"), PUBLIC, ids=[f"{m}.{n}" for m, n in PUBLIC])
def test_a_public_name_has_a_docstring_and_a_reference_entry(module: str, name: str) -> None:
    obj = getattr(importlib.import_module(module), name)
    assert _documented(module, name), f"{module}.{name} has no entry in docs/reference/api.md"
    if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismethod(obj):
        assert (obj.__doc__ or "").strip(), f"{module}.{name} has no docstring"
    for member, doc in _members(obj):
        assert doc, f"{module}.{name}.{member} has no docstring"


def _members(obj: Any) -> list[tuple[str, str]]:
    """A class's own public methods and properties, each with its docstring."""
    if not inspect.isclass(obj) or not obj.__module__.startswith("outbox"):
        return []
    out = []
    for attr, value in vars(obj).items():
        if attr.startswith("_"):
            continue
        func = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
        if inspect.isfunction(func):
            out.append((attr, (func.__doc__ or "").strip()))
    return out
