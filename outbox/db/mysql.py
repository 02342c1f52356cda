"""MariaDB/MySQL: no ``UPDATE … RETURNING``, so a claim selects then marks, under the
row locks ``FOR UPDATE SKIP LOCKED`` took, in one transaction."""

from __future__ import annotations

from typing import Any

from outbox.db.connection import Connection, Row
from outbox.db.dialect import MYSQL
from outbox.db.driver import Driver, _claim_params, _claimed
from outbox.db.rows import ClaimedJob, JobClaim


class MysqlDriver(Driver):
    dialect = MYSQL

    def job_claim(self, p: JobClaim) -> list[ClaimedJob]:
        params = _claim_params(p)
        rows = self._transact("claim", lambda c: self._claim_rows_in_tx(params))
        return _claimed(rows)

    def _claim_rows_in_tx(self, params: dict[str, Any]) -> list[Row]:
        """Pick the due rows (with the clock, read once), then mark them held.

        The picked rows carry the attempt count from before the claim; the returned
        rows show it counted, as ``RETURNING`` would.
        """
        conn: Connection = self.conn
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
