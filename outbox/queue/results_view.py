"""``ctx.results``: a workflow node's view of its dependencies' results.

Read on first use, once per run, from the results store (a node keeps its result for its
dependents: ``outbox.results.kept_ms``). The mapping's keys are the dependencies' node
names, in name order: iteration, ``len``, ``keys``, ``values`` and ``items`` see each
dependency once, so ``sum(r["count"] for r in ctx.results.values())`` counts each result
once. A lookup (``[]``, ``in``, ``get``) also takes a node id, which is an alias of its
name and never a key of its own. Values are the JSON return values, decoded (bounded as
in the results store). A dependency that did not succeed (only a node with
``on_failure="run"`` runs then) is not a key; ``failed`` names it. A job outside a
workflow has none (``NO_RESULTS``), and no query is made for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from outbox.job import sealing

Loader = Callable[[], list[tuple[str, str, str, str | None]]]


class DependencyResults(Mapping[str, Any]):
    """``ctx.results[name_or_id]``; ``failed``: the names of dependencies that did not
    succeed."""

    __slots__ = ("_failed", "_load", "_names", "_values")

    def __init__(self, load: Loader | None = None) -> None:
        self._load = load
        self._values: dict[str, Any] | None = None if load is not None else {}
        self._names: dict[str, str] = {}  # node id -> node name, for lookups only
        self._failed: list[str] = []

    def _all(self) -> dict[str, Any]:
        if self._values is None:
            assert self._load is not None
            values: dict[str, Any] = {}
            for name, node_id, state, value in sorted(self._load()):
                if state != "succeeded":
                    self._failed.append(name)
                    continue
                values[name] = None if value is None else sealing.loads(value)
                self._names[node_id] = name
            self._values = values
        return self._values

    @property
    def failed(self) -> list[str]:
        self._all()
        return list(self._failed)

    def __getitem__(self, key: str) -> Any:
        values = self._all()
        try:
            return values[self._names.get(key, key)]
        except KeyError:
            raise KeyError(
                f"{key!r} is not a succeeded dependency of this job"
                + (f" (failed: {', '.join(self._failed)})" if self._failed else "")
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __repr__(self) -> str:
        return f"DependencyResults({sorted(self._all())!r})"


NO_RESULTS: Mapping[str, Any] = DependencyResults()
