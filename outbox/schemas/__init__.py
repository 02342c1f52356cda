"""The schema as data: the tables (``tables.py``), the numbered migrations
(``<dialect>/migrations/NNNN_*.sql``) and the named statements (``<dialect>/*.sql``,
``common/*.sql``). Only ``outbox.db`` reads them; the runner is ``outbox.db.migrate``."""
