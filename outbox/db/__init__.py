"""The database seam: everything that talks to a database goes through here.

Contract
--------
- ``Database(url)`` parses a URL (SQLite, PostgreSQL via psycopg 3, MariaDB/MySQL via
  PyMySQL) and opens our own ``Connection`` objects: autocommit outside
  ``transaction()``, with one retry policy (``transact``/``atomic``/``read``) that
  retries only confirmed deadlocks, serialisation failures and SQLite BUSY.
- ``conn.driver`` is the dialect's ``Driver``. ``driver.py`` is the interface alone (a
  ``Protocol``), ``shared.py`` the implementation the dialects share; ``sqlite.py``,
  ``postgresql.py`` and ``mysql.py`` each hold all that their dialect does differently:
  connecting, BEGIN/COMMIT/ROLLBACK, binding parameters (their ``Backend``) and the
  operations they override. ``drivers.py`` is the one factory that picks a backend, by
  URL scheme or dialect; nothing else branches on the dialect. Operations are named
  noun-verb (``job_claim``, ``outbox_handoff``, ``dead_requeue``), take small frozen
  params (``rows.py``) and return typed rows. Each is one short transaction unless its
  name ends in ``_in_tx``. ``tests/conformance/test_driver_ops.py`` calls every one of
  them on every backend.
- Imports run one way: ``dialect``/``rows``/``errors``/``sql`` → ``driver`` →
  ``limits``/``shared`` → the dialect modules → ``drivers`` → ``connection`` →
  ``listen``/``migrate``/``plans``.
- ``caller.py`` is the half that runs on the *caller's* connection (``record()``,
  ``push()``), sync or async, through ``adapters.py``.
- Capabilities live on the ``Dialect`` (``supports_returning``, ``supports_listen``, …);
  code asks a capability, not a name.
- Driver errors are translated in one place (``errors.py``): ``DatabaseError`` carries
  the operation and the driver's SQLSTATE / error number; on the caller's connection a
  retryable error becomes ``RetryTransaction``.
- SQL text lives only in ``outbox/schemas/`` (named statements, per dialect, loaded by
  ``sql.py``) and in this package. ``listen.py`` is the one LISTEN/NOTIFY helper;
  ``migrate.py`` runs the numbered migrations of ``outbox/schemas/<dialect>/migrations``;
  ``plans.py`` lists the hot statements with the index each must use and reads their
  query plans (the plan tests and ``python -m bench --only plans``).
"""

from outbox.db.connection import Connection, Database
from outbox.db.driver import Driver

__all__ = ["Connection", "Database", "Driver"]
