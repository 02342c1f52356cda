"""outbox tables, the contract step: drop what only code of schema version 1 needed
(the compatibility trigger, the unique index on outbox_messages.key_digest).

Like ``outbox migrate``, ``outbox.alembic.upgrade`` holds this step back while code of
schema version 1 evidently still writes to the database (``upgrade`` then returns
without it and logs why); the next ``alembic upgrade`` after that code is gone applies
it. The version number is looked up by the migration's description, so this revision
stays right when releases are renumbered.
"""

from alembic import op

import outbox.alembic
from outbox.db.migrate import CONTRACT, version_of

revision = "outbox_0012"
down_revision = "outbox_0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    outbox.alembic.upgrade(op, to=version_of(CONTRACT))


def downgrade() -> None:
    pass  # outbox migrations only go forward; the first revision's downgrade drops all
