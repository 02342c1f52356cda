"""outbox tables: the index of a key's waiting jobs becomes a partial index of the
waiting rows only (``outbox_jobs_ordering`` → ``outbox_jobs_ordering_waiting``, on
PostgreSQL and SQLite; MariaDB keeps its index)."""

from alembic import op

import outbox.alembic
from outbox.db.migrate import version_of

revision = "outbox_0015"
down_revision = "outbox_0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    outbox.alembic.upgrade(op, to=version_of("ordering waiting index"))


def downgrade() -> None:
    pass  # outbox migrations only go forward; the first revision's downgrade drops all
