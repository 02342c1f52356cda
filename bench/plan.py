"""What a scenario hands the runner: its cases, its targets, its notes, its clean-up."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.core import Case, Target

OBAN_PYTHON = Path(__file__).resolve().parent / ".work" / "oban-venv" / "bin" / "python"


@dataclass
class Ctx:
    backend: str
    quick: bool
    rounds: int
    warmup: bool = True

    def size(self, full: int, quick: int) -> int:
        return quick if self.quick else full


@dataclass
class Plan:
    cases: list[Case] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rounds: int | None = None  # None: the run's default
    after: list[Callable[[], None]] = field(default_factory=list)  # runs after measuring


def rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


PY = sys.executable
