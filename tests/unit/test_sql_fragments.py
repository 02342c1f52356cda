"""Named SQL may include a fragment written once per dialect (``{fragment:NAME}``)."""

from __future__ import annotations

import pytest

from outbox.db.dialect import MYSQL, POSTGRESQL, SQLITE, Dialect
from outbox.db.sql import parse, queries

TEXT = """
-- fragment: is_big
-- A rule written once.
CASE WHEN n > 10 THEN 'big' END;

-- name: pick
SELECT id, {fragment:is_big} AS verdict FROM t WHERE id = :id;
"""


def test_a_statement_includes_the_fragment_and_the_fragment_is_no_statement() -> None:
    stmts = parse(TEXT, SQLITE, {"is_big": "CASE WHEN n > 10 THEN 'big' END"})
    assert list(stmts) == ["pick"]
    assert stmts["pick"].named == (
        "SELECT id, CASE WHEN n > 10 THEN 'big' END AS verdict FROM t WHERE id = :id"
    )


def test_an_unknown_fragment_is_named_at_load() -> None:
    with pytest.raises(ValueError, match="'pick' includes unknown fragment 'is_big'"):
        parse(TEXT, SQLITE, {})


@pytest.mark.parametrize("dialect", [SQLITE, POSTGRESQL, MYSQL], ids=lambda d: d.name)
def test_every_claim_that_verifies_applies_the_one_written_rule(dialect: Dialect) -> None:
    loaded = queries(dialect)
    reason = "'fingerprint_mismatch'"
    claims = [n for n in ("relay_claim", "relay_claim_checked", "relay_handoff") if n in loaded]
    assert "relay_claim_checked" in claims
    assert all(loaded[n].named.count(reason) == 1 for n in claims)
    assert all("{fragment:" not in s.named for s in loaded.values())
