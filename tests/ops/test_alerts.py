"""ops/prometheus/alerts.yml: valid rules, naming only metrics that really exist.

The metric names come from the real thing: a relay and a worker scraped over HTTP
(``--metrics-port``), and ``ops/prometheus/textfile.sh`` run against a real database.
An alert on a misspelt or removed metric never fires, silently; this catches it.
``promtool check rules`` is not run: Debian's prometheus package (96 MB installed) is
more than the check is worth here, so the structure promtool checks is checked below.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from outbox.db.connection import Database
from tests.fixtures.workers import ROOT, seed_jobs
from tests.ops.test_metrics import Q, _get, _wait_until, processes  # noqa: F401 (fixture)

ALERTS = ROOT / "ops" / "prometheus" / "alerts.yml"
#: metrics Prometheus and node_exporter make themselves, not outbox
NOT_OURS = {"up", "node_textfile_mtime_seconds"}
FUNCTIONS = r"(?:rate|increase|irate|delta|time|sum|max|min|avg|count|abs|absent)"
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "bool", "offset"}


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def metric_names(expr: str) -> set[str]:
    """The series an expression selects: label matchers, ranges, strings, numbers,
    functions and operators' keywords left out."""
    bare = re.sub(r'"[^"]*"|\{[^}]*\}|\[[^\]]*\]', " ", expr)
    bare = re.sub(rf"\b{FUNCTIONS}\s*\(", "(", bare)
    names = set(re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b", bare))
    return {n for n in names if n not in KEYWORDS}


def _exported(text: str) -> set[str]:
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names |= {s.name for s in family.samples}
        if family.type == "counter":  # a labelled counter has no sample until it moves
            names.add(f"{family.name}_total")
    return names


def _textfile(db_url: str, tmp: Path) -> str:
    venv = tmp / "venv"
    (venv / "bin").mkdir(parents=True)
    for tool in ("outbox", "python"):
        (venv / "bin" / tool).symlink_to(ROOT / ".venv" / "bin" / tool)
    env = {
        **os.environ,
        "OUTBOX_VENV": str(venv),
        "TEXTFILE_DIR": str(tmp),
        "OUTBOX_DATABASE_URL": db_url,
    }
    done = subprocess.run(
        ["sh", str(ROOT / "ops/prometheus/textfile.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return (tmp / "outbox.prom").read_text()


def test_every_rule_is_an_alert_with_an_expression_a_severity_and_a_summary() -> None:
    rules = _rules()
    assert len(rules) >= 8
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
        assert re.fullmatch(r"Outbox[A-Za-z]+", rule["alert"]), rule
        assert rule["labels"]["severity"] in {"page", "ticket"}, rule
        assert rule["annotations"]["summary"], rule
        assert "for" not in rule or re.fullmatch(r"\d+[smh]", rule["for"]), rule
        assert rule["expr"].count("(") == rule["expr"].count(")"), rule
    assert len({r["alert"] for r in rules}) == len(rules)


@pytest.mark.slow
def test_alert_rules_parse_and_name_only_exported_metrics(
    processes: tuple[int, int],  # noqa: F811 (the fixture imported above)
    database: Database,
    db_url: str,
    tmp_path: Path,
) -> None:
    relay_port, worker_port = processes
    with database.connect() as conn:
        seed_jobs(conn, 1, queue=Q)
    exported = set(NOT_OURS)
    for port in (relay_port, worker_port):
        exported |= _exported(_get(port, "/metrics")[1])
    exported |= _exported(_textfile(db_url, tmp_path))
    assert "outbox_jobs_dead_total" in exported and "outbox_jobs" in exported  # both sources
    for rule in _rules():
        unknown = metric_names(rule["expr"]) - exported
        assert not unknown, (rule["alert"], unknown)


def test_the_name_reader_would_catch_a_misspelt_metric() -> None:
    assert metric_names('increase(outbox_jobs_ded_total{queue="q"}[15m]) > 0') == {
        "outbox_jobs_ded_total"
    }
    assert metric_names("a > 1 and rate(b[5m]) == 0") == {"a", "b"}
