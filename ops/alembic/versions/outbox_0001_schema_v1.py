"""outbox tables, schema version 1

One revision per outbox schema version: when an outbox release adds version 2, add a
revision whose upgrade() calls outbox.alembic.upgrade(op, to=2) and whose downgrade()
does nothing (outbox migrations only go forward).
"""

from alembic import op

import outbox.alembic

revision = "outbox_0001"
down_revision = None  # your previous revision
branch_labels = None
depends_on = None


def upgrade() -> None:
    outbox.alembic.upgrade(op, to=1)


def downgrade() -> None:
    outbox.alembic.downgrade(op)  # drops the outbox tables and every row in them
