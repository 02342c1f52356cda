"""Every skip in the suite takes its reason from ``tests.fixtures.gaps`` (STYLE practice 3).

The suite's source is read with ``ast`` rather than watched at run time, so a skip on a
backend this run did not select is checked too. The rule is stricter than "no literal
reason": nothing outside ``tests/fixtures/gaps.py`` may call pytest's skips at all, so a reason
held in a local constant or an f-string cannot slip past either.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.fixtures.gaps import Gap, skip_gap, skip_mark, skip_unless

TESTS = Path(__file__).resolve().parents[1]
REGISTRY = TESTS / "fixtures" / "gaps.py"
# pytest's ways to skip, as dotted paths below the ``pytest`` module.
FORBIDDEN = frozenset({"skip", "importorskip", "mark.skip", "mark.skipif"})


def _pytest_names(tree: ast.Module) -> dict[str, str]:
    """Local names bound to pytest or to something in it, with its path below pytest."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name: "" for a in node.names if a.name == "pytest"}
        elif isinstance(node, ast.ImportFrom) and node.module == "pytest":
            names |= {a.asname or a.name: a.name for a in node.names}
    return names


def _path(node: ast.expr, names: dict[str, str]) -> str | None:
    """``pytest.mark.skipif`` -> ``"mark.skipif"``; None when not rooted in pytest."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in names:
        return None
    return ".".join(p for p in [names[node.id], *parts] if p)


def _names_the_exception_only(node: ast.expr, parents: dict[ast.AST, ast.AST]) -> bool:
    """``pytest.skip.Exception`` named to catch a skip (not called to raise one) skips nothing."""
    parent = parents.get(node)
    if not isinstance(parent, ast.Attribute):
        return False
    call = parents.get(parent)
    return not (isinstance(call, ast.Call) and call.func is parent)


def bypasses(source: str) -> list[str]:
    """Each use of a pytest skip in ``source``, as ``line: code``."""
    tree = ast.parse(source)
    names = _pytest_names(tree)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Name | ast.Attribute) or _path(node, names) not in FORBIDDEN:
            continue
        if not _names_the_exception_only(node, parents):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    found += [
        f"{n.lineno}: {ast.unparse(n)}"
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom)
        and n.module == "pytest"
        and any(a.name in FORBIDDEN for a in n.names)
    ]
    return found


def _suite() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if p != REGISTRY)


def test_every_skip_in_the_suite_names_a_registered_gap() -> None:
    offenders = [
        f"{path.relative_to(TESTS.parent)}:{hit}"
        for path in _suite()
        for hit in bypasses(path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], (
        "skip through tests.fixtures.gaps (skip_gap / skip_unless / skip_mark with a Gap entry),"
        " never pytest directly:\n" + "\n".join(offenders)
    )


@pytest.mark.parametrize(
    "source",
    [
        'import pytest\npytest.skip("SQLite only")',
        'import pytest\npytest.skip(f"{backend} has no LISTEN")',
        "import pytest\nREASON = 'x'\npytest.skip(REASON)",
        'import pytest\n@pytest.mark.skipif(True, reason="soak")\ndef test_a(): ...',
        "import pytest\n@pytest.mark.skip\ndef test_a(): ...",
        'import pytest\nmarks = [pytest.mark.skip(reason="later")]',
        'import pytest\npytest.importorskip("aiomysql")',
        'import pytest\nraise pytest.skip.Exception("x")',
        'import pytest as pt\npt.skip("x")',
        'from pytest import mark\n@mark.skipif(True, reason="x")\ndef test_a(): ...',
        'from pytest import skip\nskip("x")',
    ],
)
def test_the_scan_catches_each_way_around_the_registry(source: str) -> None:
    assert bypasses(source)


@pytest.mark.parametrize(
    "source",
    [
        "skip_gap(Gap.SQLITE_FILE)",
        'skip_unless(backend, "sqlite", gap=Gap.PRESENTATION_ONLY)',
        "pytestmark = [skip_mark(not SOAK, Gap.SOAK_ONLY)]",
        "import pytest\nwith pytest.raises(pytest.skip.Exception): ...",
        "import pytest\npytest.mark.parametrize('x', [1])\ncursor.skip(3)",
        "def test_relay_never_skips_a_long_transaction(): ...",
    ],
)
def test_the_scan_lets_registry_skips_and_lookalikes_through(source: str) -> None:
    assert bypasses(source) == []


def test_every_registered_gap_is_used_by_some_test() -> None:
    used = {
        node.attr
        for path in _suite()
        if path != Path(__file__).resolve()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "Gap"
    }
    assert {g.name for g in Gap} - used == set(), "a registry entry no test names: delete it"


def test_each_reason_is_one_line_led_by_its_entrys_name() -> None:
    for gap in Gap:
        assert gap.value.strip() and "\n" not in gap.value, gap.name
        assert gap.reason == f"{gap.name}: {gap.value}"


def test_skip_unless_skips_only_the_backends_not_supported() -> None:
    skip_unless("sqlite", "sqlite", "mysql", gap=Gap.SQLITE_FILE)
    with pytest.raises(pytest.skip.Exception, match=r"^LISTEN_NOTIFY: LISTEN/NOTIFY exists"):
        skip_unless("sqlite", "postgresql", gap=Gap.LISTEN_NOTIFY)
    with pytest.raises(pytest.skip.Exception, match=r"^SOAK_ONLY: "):
        skip_gap(Gap.SOAK_ONLY)


def test_skip_mark_carries_the_registered_reason() -> None:
    mark = skip_mark(True, Gap.SOAK_ONLY).mark
    assert (mark.name, mark.args, mark.kwargs) == (
        "skipif",
        (True,),
        {"reason": Gap.SOAK_ONLY.reason},
    )
