"""The report command as shipped: ``python -m tests.reliability.report`` runs a scenario,
writes the report, its docs page and the chart, and says whether the bar held."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.fixtures.databases import BACKENDS
from tests.fixtures.gaps import Gap, skip_gap
from tests.reliability import rows
from tests.reliability.report import ROOT, chart, totals


def _row(**over: object) -> rows.Row:
    base: dict[str, object] = {
        "fault": "SIGKILL relays+workers (3x)", "backend": "sqlite", "traffic": "t",
        "jobs": 100, "faults": 3, "lost": 0, "double_handoffs": 0, "extra_executions": 2,
        "extra_bound": 18,
    }  # fmt: skip
    return rows.Row(**(base | over))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "over",
    [
        {"lost": 1},
        {"double_handoffs": 1},
        {"doubled_effects": 1},
        {"extra_executions": 19},
        {"problems": ["still in the queue after draining: 1"]},
    ],
)
def test_a_row_that_misses_the_bar_is_named_in_the_totals(over: dict[str, object]) -> None:
    good, bad = _row(), _row(backend="mysql", **over)
    assert good.holds() and not bad.holds()
    line = totals([good, bad])
    assert "the bar is missed in 1: SIGKILL relays+workers (3x) on mysql" in line
    assert "0 lost and 0 doubled" in totals([good, _row(backend="postgresql")])


def test_the_chart_is_svg_with_a_bar_per_row() -> None:
    svg = ET.fromstring(chart([_row(), _row(jobs=50_000, lost=1)]))
    bars = [e for e in svg.iter() if e.tag.endswith("rect")]
    assert [b.get("fill") for b in bars] == ["#2e7d32", "#c62828"]


@pytest.mark.slow
def test_the_command_runs_a_scenario_and_writes_the_report(tmp_path: Path) -> None:
    if "sqlite" not in BACKENDS:
        skip_gap(Gap.SQLITE_NOT_SELECTED)
    done = subprocess.run(
        [sys.executable, "-m", "tests.reliability.report", "--jobs", "400", "--out",
         str(tmp_path), "-k", "test_soak_sigkill_relays_and_workers and sqlite"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = (tmp_path / "REPORT.md").read_text()
    assert report.startswith("# Reliability report\n")
    assert "(quick mode)" in report and "scenarios `-k " in report and "load average" in report
    table = [ln for ln in report.splitlines() if ln.startswith("| SIGKILL relays+workers")]
    assert len(table) == 1 and "| sqlite |" in table[0], report
    assert "0 lost and 0 doubled" in report
    assert "![jobs, faults and recovery per row](reliability-chart.svg)" in report
    assert (tmp_path / "reliability.md").read_text() == report
    ET.parse(tmp_path / "reliability-chart.svg")
