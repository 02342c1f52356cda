"""outbox tables: the job results table (outbox.results)."""

from alembic import op

import outbox.alembic
from outbox.db.migrate import version_of

revision = "outbox_0007"
down_revision = "outbox_0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    outbox.alembic.upgrade(op, to=version_of("job results"))


def downgrade() -> None:
    pass  # outbox migrations only go forward; the first revision's downgrade drops all
