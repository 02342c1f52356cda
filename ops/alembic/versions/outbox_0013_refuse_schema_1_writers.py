"""outbox tables, the guard after the contract step: on MariaDB a CHECK refuses the
intents code of schema version 1 writes (without ``keyed``), so such code started by
mistake fails loudly instead of recording a key twice. Held back with the contract step
while that code evidently still writes. Looked up by description, as the contract
step's revision is."""

from alembic import op

import outbox.alembic
from outbox.db.migrate import SCHEMA_1_GUARD, version_of

revision = "outbox_0013"
down_revision = "outbox_0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    outbox.alembic.upgrade(op, to=version_of(SCHEMA_1_GUARD))


def downgrade() -> None:
    pass  # outbox migrations only go forward; the first revision's downgrade drops all
