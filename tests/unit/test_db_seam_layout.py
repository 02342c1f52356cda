"""The seam's shape, read from the source: only the dialect modules and the factory
branch on a dialect, and nothing outside ``outbox/db`` runs a named statement itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "outbox"
DB = PACKAGE / "db"
DIALECT_HOMES = {DB / "sqlite.py", DB / "postgresql.py", DB / "mysql.py", DB / "drivers.py"}
DIALECTS = {"SQLITE", "POSTGRESQL", "MYSQL"}
DIALECT_NAMES = {"sqlite", "postgresql", "mysql", "mariadb"}
# What runs a named statement on one of our connections, or looks one up.
STATEMENT_CALLS = {"execute", "execute_count", "statement", "queries"}


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _dialect_branches(tree: ast.AST) -> list[int]:
    """Lines comparing with a dialect (``is SQLITE``) or a dialect's name (``== "mysql"``)."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for op, right in zip(node.ops, node.comparators, strict=True):
            named = isinstance(right, ast.Name) and right.id in DIALECTS
            if isinstance(op, (ast.Is, ast.IsNot)) and named:
                lines.append(node.lineno)
            if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(right, ast.Constant):
                left = ast.unparse(node.left)
                if right.value in DIALECT_NAMES and "dialect" in left:
                    lines.append(node.lineno)
    return lines


def _statement_calls(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        literal = bool(node.args) and isinstance(node.args[0], ast.Constant)
        if name == "queries" or (name in STATEMENT_CALLS and literal):
            lines.append(node.lineno)
    return lines


def test_the_detectors_find_what_they_forbid() -> None:
    code = ast.parse(
        "if c.dialect is SQLITE: pass\n"
        "if dialect.name == 'mysql': pass\n"
        "c.execute('now_ms')\n"
        "queries(d)['x']\n"
    )
    assert _dialect_branches(code) == [1, 2]
    assert _statement_calls(code) == [3, 4]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_dialect_modules_and_the_factory_branch_on_a_dialect(path: Path) -> None:
    if path in DIALECT_HOMES:
        return
    found = _dialect_branches(ast.parse(path.read_text(encoding="utf-8")))
    # outbox/cli/preflight.py asks whether a SQLite file exists: not the seam's business.
    allowed = {PACKAGE / "cli" / "preflight.py"}
    assert found == [] or path in allowed, f"{path.relative_to(PACKAGE)}: lines {found}"


OUTSIDE_DB = [p for p in _modules() if not p.is_relative_to(DB)]


@pytest.mark.parametrize("path", OUTSIDE_DB, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_named_statements_run_only_inside_outbox_db(path: Path) -> None:
    found = _statement_calls(ast.parse(path.read_text(encoding="utf-8")))
    assert found == [], f"{path.relative_to(PACKAGE)}: lines {found}"
