"""outbox tables, schema version 2: the idempotency record in outbox_keys, intents
moved on handoff instead of kept as tombstones."""

from alembic import op

import outbox.alembic

revision = "outbox_0002"
down_revision = "outbox_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    outbox.alembic.upgrade(op, to=2)


def downgrade() -> None:
    pass  # outbox migrations only go forward; the first revision's downgrade drops all
