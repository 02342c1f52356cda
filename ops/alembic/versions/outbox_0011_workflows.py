"""outbox tables: the workflow tables (outbox.workflows)."""

from alembic import op

import outbox.alembic
from outbox.db.migrate import version_of

revision = "outbox_0011"
down_revision = "outbox_0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    outbox.alembic.upgrade(op, to=version_of("workflows"))


def downgrade() -> None:
    pass  # outbox migrations only go forward; the first revision's downgrade drops all
