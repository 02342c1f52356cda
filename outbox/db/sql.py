"""Named SQL, one folder per dialect (``outbox/schemas/<dialect>/*.sql``) plus ``common/``.

Each file holds statements headed by ``-- name: NAME``; comment lines after the header
say what the statement is for. Statements every dialect writes alike live once, in
``outbox/schemas/common/``; a name is defined in one place only. ``{now_ms}`` stands for
the dialect's clock expression, and ``{max_payload_bytes}``, ``{max_name_chars}``,
``{max_attempts_limit}``, ``{fingerprint_version}`` and
``{fingerprint_version_default_priority}`` stand for ``outbox.job``'s limits,
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

_HEADER = re.compile(r"^--\s*name:\s*([a-z0-9_]+)\s*$", re.MULTILINE)
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


def parse(text: str, dialect: Dialect) -> dict[str, Statement]:
    """Split one ``.sql`` file into its named statements."""
    out: dict[str, Statement] = {}
    parts = _HEADER.split(text)
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [ln for ln in body.strip().splitlines() if not ln.lstrip().startswith("--")]
        sql = _templated("\n".join(lines).strip().rstrip(";").strip(), dialect)
        if name in out:
            raise ValueError(f"query {name!r} is defined twice")
        driver = sql if dialect.paramstyle == "named" else to_pyformat(sql)
        out[name] = Statement(name, sql, driver)
    return out


def _templated(sql: str, dialect: Dialect) -> str:
    values = {
        "{now_ms}": dialect.now_ms,
        "{max_payload_bytes}": str(job.MAX_PAYLOAD_BYTES),
        "{max_name_chars}": str(job.MAX_NAME_CHARS),
        "{max_attempts_limit}": str(job.MAX_ATTEMPTS_LIMIT),
        "{fingerprint_version}": job.FINGERPRINT_VERSION,
        "{fingerprint_version_default_priority}": job.FINGERPRINT_VERSION_DEFAULT_PRIORITY,
    }
    for marker, value in values.items():
        sql = sql.replace(marker, value)
    return sql


@cache
def queries(dialect: Dialect) -> dict[str, Statement]:
    """Every named statement of ``dialect``: the common files' and its own."""
    out: dict[str, Statement] = {}
    for folder_name in ("common", dialect.name):
        folder = resources.files("outbox.schemas") / folder_name
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.name.endswith(".sql"):
                for name, stmt in parse(entry.read_text(encoding="utf-8"), dialect).items():
                    if name in out:
                        raise ValueError(f"query {name!r} is defined twice for {dialect.name}")
                    out[name] = stmt
    return out
