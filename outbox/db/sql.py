"""Named SQL, one folder per dialect (``outbox/schemas/<dialect>/*.sql``) plus ``common/``.

Each file holds statements headed by ``-- name: NAME``; comment lines after the header
say what the statement is for. A block headed ``-- fragment: NAME`` is a piece of SQL
(an expression, say) that statements of the same dialect include as
``{fragment:NAME}``, so a rule written once is not copied into every statement that
applies it. Statements every dialect writes alike live once, in
``outbox/schemas/common/``; a name is defined in one place only. ``{now_ms}`` stands for
the dialect's clock expression, and ``{max_payload_bytes}``, ``{max_name_chars}``,
``{max_attempts_limit}``, ``{fingerprint_version}`` and
``{fingerprint_version_default_priority}``, ``{fingerprint_version_ordered}`` and
``{blocked_offset_ms}`` stand for ``outbox.job``'s limits,
so the relay's SQL verification and ``record()``'s checks cannot drift apart.
Statements use ``:name`` placeholders, converted once, at load, to the driver's own
style, so the hot path does no string work. Only
``outbox.db`` reads these files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from outbox import job
from outbox.db.dialect import Dialect

_HEADER = re.compile(r"^--\s*(name|fragment):\s*([a-z0-9_]+)\s*$", re.MULTILINE)
_FRAGMENT = re.compile(r"\{fragment:([a-z0-9_]+)\}")
_PLACEHOLDER = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


@dataclass(frozen=True, slots=True)
class Statement:
    """One named statement, in both placeholder styles."""

    name: str
    named: str  # with :name placeholders (sqlite3, SQLAlchemy text())
    driver: str  # in the dialect's driver paramstyle


def to_pyformat(sql: str) -> str:
    """``:name`` → ``%(name)s``, doubling literal ``%`` first."""
    return _PLACEHOLDER.sub(r"%(\1)s", sql.replace("%", "%%"))


def _blocks(text: str) -> list[tuple[str, str, str]]:
    """``(kind, name, sql)`` of each block of one ``.sql`` file, comment lines dropped."""
    parts = _HEADER.split(text)
    out = []
    for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        lines = [ln for ln in body.strip().splitlines() if not ln.lstrip().startswith("--")]
        out.append((kind, name, "\n".join(lines).strip().rstrip(";").strip()))
    return out


def parse(
    text: str, dialect: Dialect, fragments: dict[str, str] | None = None
) -> dict[str, Statement]:
    """Split one ``.sql`` file into its named statements (``fragments`` by name)."""
    out: dict[str, Statement] = {}
    for kind, name, body in _blocks(text):
        if kind == "fragment":
            continue
        sql = _templated(_included(body, fragments or {}, name), dialect)
        if name in out:
            raise ValueError(f"query {name!r} is defined twice")
        driver = sql if dialect.paramstyle == "named" else to_pyformat(sql)
        out[name] = Statement(name, sql, driver)
    return out


def _included(sql: str, fragments: dict[str, str], name: str) -> str:
    def piece(m: re.Match[str]) -> str:
        try:
            return fragments[m.group(1)]
        except KeyError:
            raise ValueError(f"query {name!r} includes unknown fragment {m.group(1)!r}") from None

    return _FRAGMENT.sub(piece, sql)


def _templated(sql: str, dialect: Dialect) -> str:
    values = {
        "{now_ms}": dialect.now_ms,
        "{max_payload_bytes}": str(job.MAX_PAYLOAD_BYTES),
        "{max_name_chars}": str(job.MAX_NAME_CHARS),
        "{max_attempts_limit}": str(job.MAX_ATTEMPTS_LIMIT),
        "{fingerprint_version}": job.FINGERPRINT_VERSION,
        "{fingerprint_version_default_priority}": job.FINGERPRINT_VERSION_DEFAULT_PRIORITY,
        "{fingerprint_version_ordered}": job.FINGERPRINT_VERSION_ORDERED,
        "{blocked_offset_ms}": str(job.BLOCKED_OFFSET_MS),
    }
    for marker, value in values.items():
        sql = sql.replace(marker, value)
    return sql


@cache
def queries(dialect: Dialect) -> dict[str, Statement]:
    """Every named statement of ``dialect``: the common files' and its own."""
    texts = []
    for folder_name in ("common", dialect.name):
        folder = resources.files("outbox.schemas") / folder_name
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.name.endswith(".sql"):
                texts.append(entry.read_text(encoding="utf-8"))
    fragments = {
        name: body for text in texts for kind, name, body in _blocks(text) if kind == "fragment"
    }
    out: dict[str, Statement] = {}
    for text in texts:
        for name, stmt in parse(text, dialect, fragments).items():
            if name in out:
                raise ValueError(f"query {name!r} is defined twice for {dialect.name}")
            out[name] = stmt
    return out
