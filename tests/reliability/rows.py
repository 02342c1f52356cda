"""One row of the reliability report: what one fault scenario measured.

Every fault scenario (the soak runs in ``test_soak.py``, the JetStream faults, ordered
jobs and workflows under kills) builds a ``Row`` and calls ``report``. Outside a report
run that does nothing; ``python -m tests.reliability.report`` sets ``OUTBOX_REPORT_ROWS``
to a file, each scenario appends its row there as one JSON line, and the command writes
``REPORT.md`` and the chart from them, so the whole report comes from one run.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

ROWS_ENV = "OUTBOX_REPORT_ROWS"


@dataclass
class Row:
    """``None`` where a figure is not measured by the scenario (never a made-up 0)."""

    fault: str  # what was done, e.g. "SIGKILL relays+workers"
    backend: str
    traffic: str  # producers, relays, workers and their settings
    jobs: int  # committed jobs (or intents handed off) the checks covered
    faults: int  # how many times the fault was injected
    lost: int
    double_handoffs: int | None
    extra_executions: int | None
    extra_bound: int | None  # what the kills explain (None: nothing may run twice)
    doubled_effects: int | None = None  # transactional handlers / the inbox only
    max_recovery_s: float | None = None
    minutes: float = 0.0
    # Other figures a scenario reports, by name (e.g. "order violations": 0).
    figures: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def holds(self) -> bool:
        """The bar: nothing lost, nothing handed off or taking effect twice, extra
        executions within what the faults explain, and no other problem found."""
        return (
            self.lost == 0
            and not self.double_handoffs
            and not self.doubled_effects
            and (
                self.extra_bound is None
                or self.extra_executions is None
                or self.extra_executions <= self.extra_bound
            )
            and not self.problems
        )


def report(row: Row) -> None:
    """Append ``row`` to the report run's file, if this is a report run."""
    path = os.environ.get(ROWS_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(asdict(row)) + "\n")


def read(path: str) -> list[Row]:
    """The rows a report run collected, in the order the scenarios finished."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [Row(**json.loads(line)) for line in f if line.strip()]
