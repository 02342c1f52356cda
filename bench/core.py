"""Cases, interleaved rounds, results and target ratios.

A scenario is a list of cases measured in rounds: round 1 runs every case once, then
round 2, and so on (the order rotates each round), so drift in the machine's load hits
all cases alike instead of whichever ran last. A warm-up round runs first and is not
counted: a cold start (empty caches, a server that has just created the database) must
not decide a verdict. A case's sample is a number, or several named numbers (latency
percentiles) that become rows of their own.

A target's value is the ratio of medians; its spread is the min..max of the ratios
taken round by round (cases of one round ran side by side). A target is met only when
the whole spread is on the right side of the bound, missed when all of it is on the
wrong side, and borderline otherwise.
"""

from __future__ import annotations

import math
import statistics
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Sample = float | dict[str, float]


@dataclass
class Case:
    name: str
    measure: Callable[[], Sample]
    unit: str = "jobs/s"
    higher_is_better: bool = True
    pending: str | None = None  # why it cannot run yet (e.g. "pending product")
    warmup: Callable[[], object] | None = None  # a cheaper warm-up than ``measure``
    # unit and direction of named metrics that differ from the case's (jobs/s beside ms)
    metrics: dict[str, tuple[str, bool]] = field(default_factory=dict)


@dataclass
class Result:
    scenario: str
    case: str
    unit: str
    higher_is_better: bool
    samples: list[float] = field(default_factory=list)
    note: str | None = None
    rounds: list[int] = field(default_factory=list)  # the round of each sample

    def by_round(self) -> dict[int, float]:
        return dict(zip(self.rounds or range(len(self.samples)), self.samples, strict=False))

    @property
    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None

    def as_dict(self) -> dict[str, Any]:
        s = self.samples
        return {
            "scenario": self.scenario,
            "case": self.case,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "samples": s,
            "min": min(s) if s else None,
            "median": self.median,
            "max": max(s) if s else None,
            "note": self.note,
            "rounds": self.rounds,
        }


@dataclass
class Target:
    """``ours`` against a reference: a ratio of medians, or an absolute bound.

    ``reference`` names one or more result rows; with several, the best of them counts
    (the best peer). ``reference=None`` compares ``ours`` with ``bound`` itself.
    """

    label: str
    ours: str | Sequence[str]  # several: the best of them counts
    reference: Sequence[str] | None
    op: str  # ">=" or "<="
    bound: float
    per_op_time: bool = False  # compare time per operation (reference rate / our rate)
    ratio: float | None = None
    met: bool | None = None
    detail: str = ""
    spread: tuple[float, float] | None = None  # min..max of the per-round ratios
    verdict: str = "n/a"  # met, borderline, missed, info (no bound), n/a (no figure)

    def evaluate(self, rows: dict[str, Result]) -> None:
        names = [self.ours] if isinstance(self.ours, str) else list(self.ours)
        found = [rows[n] for n in names if n in rows and rows[n].median is not None]
        if not found:
            self.detail = "no figure for ours"
            return
        mine = (max if found[0].higher_is_better else min)(found, key=lambda r: r.median or 0.0)
        value = mine.median or 0.0
        per_round = list(mine.by_round().values())
        if self.reference is None:
            self.detail = mine.case
        else:
            refs = [rows[r] for r in self.reference if r in rows and rows[r].median]
            if not refs:
                self.detail = "no reference figure"
                return
            pick = max if refs[0].higher_is_better else min
            best = pick(refs, key=lambda r: r.median or 0.0)
            value = self._ratio(value, best.median or 1.0)
            theirs = best.by_round()
            per_round = [
                self._ratio(v, theirs[k]) for k, v in mine.by_round().items() if theirs.get(k)
            ]
            self.detail = f"{mine.case} vs {best.case}"
        self.ratio = value
        self.spread = (min(per_round), max(per_round)) if per_round else (value, value)
        if math.isinf(self.bound):
            self.verdict = "info"
            return
        ok = [self._ok(v) for v in self.spread]
        self.verdict = "met" if all(ok) else "borderline" if any(ok) else "missed"
        self.met = self.verdict == "met"

    def _ratio(self, ours: float, reference: float) -> float:
        value = ours / reference if reference else float("inf")
        if self.per_op_time:
            return 1.0 / value if value else float("inf")
        return value

    def _ok(self, value: float) -> bool:
        return value >= self.bound if self.op == ">=" else value <= self.bound

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "ours": [self.ours] if isinstance(self.ours, str) else list(self.ours),
            "reference": list(self.reference) if self.reference else None,
            "op": self.op,
            "bound": self.bound,
            "value": self.ratio,
            "met": self.met,
            "verdict": self.verdict,
            "spread": list(self.spread) if self.spread else None,
            "detail": self.detail,
        }


def warm_up(scenario: str, cases: list[Case]) -> None:
    """One round that is not counted (a failure here shows again in the measured rounds)."""
    for case in cases:
        started = time.monotonic()
        try:
            sample = (case.warmup or case.measure)()
        except Exception as exc:
            print(f"  [{scenario}] warm-up {case.name} FAILED: {type(exc).__name__}", flush=True)
            continue
        shown = _show(sample) if isinstance(sample, float | int | dict) else "done"
        print(
            f"  [{scenario}] warm-up {case.name}: {shown}  ({time.monotonic() - started:.1f} s,"
            " not counted)",
            flush=True,
        )


def measure_rounds(
    scenario: str, cases: list[Case], rounds: int, warmup: bool = True
) -> list[Result]:
    """A warm-up round, then ``rounds`` interleaved rounds of ``cases``; one ``Result``
    per figure."""
    rows: dict[str, Result] = {}
    order: list[str] = []
    runnable = [c for c in cases if c.pending is None]
    for c in cases:
        if c.pending is not None:
            rows[c.name] = Result(scenario, c.name, c.unit, c.higher_is_better, note=c.pending)
            order.append(c.name)
    if warmup:
        warm_up(scenario, runnable)
    for r in range(rounds):
        shift = r % max(len(runnable), 1)
        for case in runnable[shift:] + runnable[:shift]:
            started = time.monotonic()
            try:
                sample = case.measure()
            except Exception as exc:
                _record_failure(rows, order, scenario, case, exc)
                continue
            took = time.monotonic() - started
            _record(rows, order, scenario, case, sample, r)
            print(
                f"  [{scenario}] round {r + 1}/{rounds} {case.name}: {_show(sample)}"
                f"  ({took:.1f} s)",
                flush=True,
            )
    return [rows[n] for n in order]


def _record(
    rows: dict[str, Result], order: list[str], scenario: str, case: Case, sample: Sample, r: int
) -> None:
    items = sample.items() if isinstance(sample, dict) else [("", sample)]
    for metric, value in items:
        name = f"{case.name} {metric}".strip()
        if name not in rows:
            unit, higher = case.metrics.get(metric, (case.unit, case.higher_is_better))
            rows[name] = Result(scenario, name, unit, higher)
            order.append(name)
        rows[name].samples.append(float(value))
        rows[name].rounds.append(r)


def _record_failure(
    rows: dict[str, Result], order: list[str], scenario: str, case: Case, exc: Exception
) -> None:
    print(f"  [{scenario}] {case.name} FAILED: {type(exc).__name__}", flush=True)
    traceback.print_exc(limit=3)
    if case.name not in rows:
        rows[case.name] = Result(scenario, case.name, case.unit, case.higher_is_better)
        order.append(case.name)
    rows[case.name].note = f"failed: {type(exc).__name__}"


def _show(sample: Sample) -> str:
    if isinstance(sample, dict):
        return " ".join(f"{k}={v:,.2f}" for k, v in sample.items())
    return f"{sample:,.1f}"
