"""outbox tables: ordering keys (the ordering_key columns, outbox_ordering_keys and the
partial indexes that find a key's jobs). The version number is looked up by the
migration's description, so this revision stays right when releases are renumbered.
"""

from alembic import op

import outbox.alembic
from outbox.db.migrate import version_of

revision = "outbox_0010"
down_revision = "outbox_0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    outbox.alembic.upgrade(op, to=version_of("ordering keys"))


def downgrade() -> None:
    pass  # outbox migrations only go forward; the first revision's downgrade drops all
