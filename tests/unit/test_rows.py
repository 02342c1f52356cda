"""The driver seam's rows compare, hash and print as dataclasses do, though the frozen
ones share one ``==``, ``hash`` and ``repr`` (``outbox.db.rows._Row``) instead of
compiling their own at import."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from outbox.db import rows

ROWS = [
    c
    for c in vars(rows).values()
    if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == rows.__name__
]


def _values(cls: type, first: Any = None) -> dict[str, Any]:
    fields = dataclasses.fields(cls)
    values = {f.name: (i if i % 2 else f"v{i}") for i, f in enumerate(fields)}
    return values if first is None else {**values, fields[0].name: first}


@pytest.mark.parametrize("cls", ROWS, ids=lambda c: c.__name__)
def test_a_row_compares_hashes_and_prints_as_a_dataclass(cls: type) -> None:
    one, same, other = cls(**_values(cls)), cls(**_values(cls)), cls(**_values(cls, "x"))
    assert one == same and one != other and one != 1
    assert one.__eq__(dataclasses.make_dataclass("Other", [])()) is NotImplemented
    shown = ", ".join(
        f"{f.name}={getattr(one, f.name)!r}" for f in dataclasses.fields(cls) if f.repr
    )
    assert repr(one) == f"{cls.__qualname__}({shown})"
    if cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        assert hash(one) == hash(same) == hash(tuple(_values(cls).values()))
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(one, dataclasses.fields(cls)[0].name, "x")
    else:  # mutable: unhashable, as a dataclass with eq is
        with pytest.raises(TypeError):
            hash(one)
    assert dataclasses.replace(one, **{dataclasses.fields(cls)[0].name: "x"}) == other

