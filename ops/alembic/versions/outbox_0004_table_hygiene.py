"""outbox tables, schema version 'table hygiene': per-table autovacuum and fillfactor on
PostgreSQL for the high-churn tables, and a partial index over intents that are not
pending (status counts and prune read it instead of the backlog).

The version number is looked up by the migration's description, so this revision stays
right when releases are renumbered.
"""

from alembic import op

import outbox.alembic
from outbox.db.migrate import MIGRATIONS

revision = "outbox_0004"
down_revision = "outbox_0003"
branch_labels = None
depends_on = None

VERSION = next(m.version for m in MIGRATIONS if m.description == "table hygiene")


def upgrade() -> None:
    outbox.alembic.upgrade(op, to=VERSION)


def downgrade() -> None:
    pass  # outbox migrations only go forward; the first revision's downgrade drops all
