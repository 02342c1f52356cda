"""outbox tables, the throughput migration: per-minute job completions (outbox_throughput) for
the dashboard's throughput chart."""

from alembic import op

import outbox.alembic
from outbox.db.migrate import MIGRATIONS

revision = "outbox_0003"
down_revision = "outbox_0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # By description, not number: the version this revision brings the database to.
    to = next(m.version for m in MIGRATIONS if m.description == "throughput")
    outbox.alembic.upgrade(op, to=to)


def downgrade() -> None:
    pass  # outbox migrations only go forward; the first revision's downgrade drops all
