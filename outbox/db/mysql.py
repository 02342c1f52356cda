"""MariaDB/MySQL: no ``UPDATE … RETURNING``, so a claim selects then marks, under the
row locks ``FOR UPDATE SKIP LOCKED`` took, in one transaction.

Connections (PyMySQL) run in autocommit at READ COMMITTED: gap locks under REPEATABLE
READ turn concurrent claims into deadlocks. Transactions use the driver's own
``begin()``/``commit()``/``rollback()``, which keep its notion of the session in step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from outbox.db.adapters import described
from outbox.db.dialect import MYSQL
from outbox.db.driver import Backend, ConnectOptions, Executor, Row
from outbox.db.rows import ClaimedJob, JobClaim
from outbox.db.shared import SharedDriver, claim_params, claimed_jobs
from outbox.db.url import URL, mysql_args


class MysqlDriver(SharedDriver):
    dialect = MYSQL

    def job_claim(self, p: JobClaim) -> list[ClaimedJob]:
        params = claim_params(p)
        rows = self._transact("claim", lambda c: self._claim_rows_in_tx(params))
        return claimed_jobs(rows)

    def _claim_rows_in_tx(self, params: dict[str, Any]) -> list[Row]:
        """Pick the due rows (with the clock, read once), then mark them held.

        The picked rows carry the attempt count from before the claim; the returned
        rows show it counted, as ``RETURNING`` would.
        """
        conn: Executor = self.conn
        picked = conn.execute("job_claim_pick", params)
        if not picked:
            return []
        now = picked[0][-1]
        conn.execute("job_claim_mark", {**params, "ids": [r[0] for r in picked], "now_ms": now})
        return [_counted(row) for row in picked]


def _counted(row: Row) -> Row:
    """``job_claim_pick``'s row (…, attempts, …, clock) as a claimed row: attempt
    counted, clock dropped."""
    job_id, message_id, queue, job_name, payload, attempts, *rest = row
    return (job_id, message_id, queue, job_name, payload, attempts + 1, *rest[:-1])


def connector(url: URL, options: ConnectOptions) -> Callable[[], Any]:
    args = mysql_args(url)

    def connect() -> Any:
        import pymysql

        raw = pymysql.connect(autocommit=True, **args)
        with raw.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        return raw

    return connect


def begin(raw: Any) -> None:
    raw.begin()


def commit(raw: Any) -> None:
    raw.commit()


def rollback(raw: Any) -> None:
    raw.rollback()


BACKEND = Backend(MYSQL, connector, begin, commit, rollback, described, MysqlDriver)
