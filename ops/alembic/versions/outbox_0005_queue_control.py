"""outbox tables: queue control (priorities, paused queues, cancel, snooze)."""

from alembic import op

import outbox.alembic

revision = "outbox_0005"
down_revision = "outbox_0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    outbox.alembic.upgrade(op, to=5)


def downgrade() -> None:
    pass  # outbox migrations only go forward; the first revision's downgrade drops all
