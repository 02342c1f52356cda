"""outbox tables: drop the columns of the workflow and ordering-key tables that nothing
reads (``outbox_workflow_nodes.deps_total``, ``outbox_workflows.key_digest`` and
``.fingerprint``, ``outbox_ordering_keys.created_at``)."""

from alembic import op

import outbox.alembic
from outbox.db.migrate import version_of

revision = "outbox_0014"
down_revision = "outbox_0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    outbox.alembic.upgrade(op, to=version_of("drop unread columns"))


def downgrade() -> None:
    pass  # outbox migrations only go forward; the first revision's downgrade drops all
