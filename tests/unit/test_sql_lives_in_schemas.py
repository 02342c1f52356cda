"""SQL text lives in ``outbox/schemas/`` and ``outbox/db/`` only: nowhere else in the package.

Every string literal of every other module is searched for statement shapes; a query
written inline elsewhere (an f-string ``LISTEN``, a count in the demo) fails here.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "outbox"
ALLOWED = (PACKAGE / "db", PACKAGE / "schemas")
STATEMENT = re.compile(
    r"\bSELECT\b[^\n]*\bFROM\b|\bINSERT\s+INTO\b|\bUPDATE\s+\w+\s+SET\b|\bDELETE\s+FROM\b"
    r"|\b(CREATE|ALTER|DROP)\s+(TABLE|INDEX|SCHEMA|DATABASE)\b"
    r"|\b(LISTEN|NOTIFY)\s+(outbox_\w+|\{)"
    r"|\bSET\s+(SESSION|LOCAL)\b|\bPRAGMA\s+\w"
)


def _modules() -> list[Path]:
    return sorted(
        p for p in PACKAGE.rglob("*.py") if not any(p.is_relative_to(a) for a in ALLOWED)
    )


def _strings(path: Path) -> list[tuple[int, str]]:
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
    return [
        (t.start[0], t.string)
        for t in tokens
        if t.type == tokenize.STRING or t.type == getattr(tokenize, "FSTRING_MIDDLE", -1)
    ]


def test_the_search_finds_inline_sql() -> None:
    """The detector itself: each shape the rule forbids is caught."""
    for sql in (
        "SELECT COUNT(*) FROM outbox_jobs",
        "LISTEN outbox_jobs",
        "LISTEN {channel}",
        "INSERT INTO t VALUES (1)",
        "UPDATE outbox_jobs SET x = 1",
        "DELETE FROM outbox_jobs",
        "CREATE TABLE demo (id INTEGER)",
        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        "PRAGMA busy_timeout=5000",
    ):
        assert STATEMENT.search(sql), sql


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_sql_outside_schemas_and_db(path: Path) -> None:
    found = [(line, s[:60]) for line, s in _strings(path) if STATEMENT.search(s)]
    assert found == [], f"SQL text in {path.relative_to(PACKAGE)}: {found}"
