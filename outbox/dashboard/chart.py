"""The throughput chart as SVG geometry, computed here so the page needs no chart script.

One stacked bar per minute: jobs that succeeded at the bottom, failed attempts sent back
to retry above them, dead-lettered on top. The y axis has four round steps, the last at
or above the busiest minute.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from outbox.dashboard.store import Minute

WIDTH = 720
HEIGHT = 200
LEFT = 44
RIGHT = 8
TOP = 10
BOTTOM = 24
TICKS = 4


@dataclass(frozen=True, slots=True)
class Segment:
    kind: str  # the CSS class: succeeded, retried, dead
    y: float
    h: float


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    width: float
    segments: list[Segment]
    title: str


@dataclass(frozen=True, slots=True)
class Tick:
    pos: float
    label: str


@dataclass(frozen=True, slots=True)
class Chart:
    width: int
    height: int
    left: int
    plot_right: int
    baseline: float
    bars: list[Bar]
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    succeeded_total: int
    retried_total: int
    dead_total: int
    peak: int


def nice_step(value: int) -> int:
    """The grid step: the smallest of 1, 2, 2.5 and 5 times a power of ten (whole numbers
    only) whose four steps reach ``value``, so every tick label is a round number."""
    scale = 1
    while True:
        for m in (10, 20, 25, 50):
            step = m * scale // 10
            if step >= 1 and step * TICKS >= value:
                return step
        scale *= 10


def _bar(x: float, width: float, baseline: float, scale: float, m: Minute) -> Bar:
    segments, top = [], baseline
    for kind, n in (("succeeded", m.succeeded), ("retried", m.retried), ("dead", m.dead)):
        if n:
            h = scale * n
            top -= h
            segments.append(Segment(kind, round(top, 2), round(h, 2)))
    at = datetime.fromtimestamp(m.start_ms / 1000, tz=UTC).strftime("%H:%M")
    title = f"{at} UTC: {m.succeeded:,} succeeded, {m.retried:,} retried, {m.dead:,} dead-lettered"
    return Bar(round(x, 2), round(width, 2), segments, title)


def build(minutes: list[Minute]) -> Chart:
    peak = max((m.succeeded + m.retried + m.dead for m in minutes), default=0)
    step = nice_step(peak)
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    baseline = float(TOP + plot_h)
    slot = plot_w / max(len(minutes), 1)
    scale = plot_h / (step * TICKS)
    bars = [
        _bar(LEFT + i * slot + 1, max(slot - 2, 1), baseline, scale, m)
        for i, m in enumerate(minutes)
    ]
    y_ticks = [
        Tick(round(baseline - plot_h * k / TICKS, 2), f"{step * k:,}") for k in range(TICKS + 1)
    ]
    n = len(minutes)
    x_ticks = [
        Tick(round(LEFT + i * slot + slot / 2, 2), "now" if i == n - 1 else f"-{n - 1 - i}m")
        for i in range(n)
        if (n - 1 - i) % 10 == 0
    ]
    return Chart(
        WIDTH,
        HEIGHT,
        LEFT,
        WIDTH - RIGHT,
        baseline,
        bars,
        y_ticks,
        x_ticks,
        sum(m.succeeded for m in minutes),
        sum(m.retried for m in minutes),
        sum(m.dead for m in minutes),
        peak,
    )
