"""outbox tables, schema version 3: the tables of global concurrency and rate limits."""

from alembic import op

import outbox.alembic

revision = "outbox_0006"
down_revision = "outbox_0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    outbox.alembic.upgrade(op, to=6)


def downgrade() -> None:
    pass  # outbox migrations only go forward; the first revision's downgrade drops all
