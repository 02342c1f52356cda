"""The errors `outbox` raises.

One root, so an application can catch everything of ours in one place::

    OutboxError
     ├── InvalidKey            (also ValueError)  the idempotency key breaks a rule
     ├── InvalidJob            (also ValueError)  name, queue, payload or limits break a rule
     ├── IdempotencyConflict                      the key was used for another job
     ├── NoActiveTransaction                      the write would commit on its own, or the
     │                                            connection is closed
     ├── RetryTransaction                         the database refused the caller's transaction
     │                                            (deadlock, serialisation failure, lock
     │                                            timeout, SQLite BUSY): roll back, run it again
     ├── UnsupportedConnection                    record() was given something it cannot write on
     ├── ConfigurationError                       a database URL or setting we cannot use
     │    └── MissingExtra                        the URL's driver is not installed
     │                                            (``extra``: the extra to install)
     ├── DatabaseError                            a database operation failed (driver error kept
     │    │                                       as __cause__)
     │    ├── TablesMissing                       the outbox tables are not there: migrate
     │    └── ReadOnlyDatabase                    the database refuses to write (a read-only
     │                                            file, server or transaction, or no grant)
     ├── PermanentFailure                         raised by a handler: dead-letter at once
     ├── Snooze                                   raised by a handler: run again later,
     │                                            no attempt spent
     ├── InvalidMessageId      (also ValueError)  text given as a message id is not a UUID
     ├── MessageNotFound                          no intent, job or dead letter has that id
     ├── RetryRefused                             ``outbox retry``: the intent is not quarantined,
     │                                            or it still does not verify
     ├── MissingKey                               a sealed payload's key is not in the keyring
     ├── TamperedPayload                          a sealed payload fails its authentication tag
     └── BrokerError                              NATS JetStream unreachable or a stream unusable
          │                                       (``transient``: waiting may help)
          └── TargetRefused                       a stream at its limits refused messages;
                                                  they stay pending

Input errors are ``ValueError`` too; state errors are not. Messages name what is wrong and
never repeat a payload. A translated error keeps the driver's exception as ``__cause__``,
and code that tells errors apart reads their codes and attributes, never their text.
"""

from __future__ import annotations


class OutboxError(Exception):
    """Root of every error raised by outbox."""


class InvalidKey(OutboxError, ValueError):
    """The idempotency key is not 1-200 bytes of printable ASCII, or uses a reserved prefix."""


class InvalidJob(OutboxError, ValueError):
    """The job's name, queue, payload or limits break a rule."""


class IdempotencyConflict(OutboxError):
    """The key was already recorded for a different job.

    The caller should let its business transaction roll back.
    """

    def __init__(self, message_id: str) -> None:
        self.message_id = message_id
        super().__init__(
            f"the key is already recorded (message {message_id}) with a different job; "
            "roll the transaction back"
        )


class NoActiveTransaction(OutboxError):
    """The connection would commit the write on its own, or it is closed."""


class RetryTransaction(OutboxError):
    """The database refused the caller's transaction: deadlock, serialisation failure,
    lock wait timeout or SQLite BUSY.

    After a deadlock or serialisation failure the database has already rolled the
    transaction back; after a lock wait timeout or BUSY it is still open. Either way: roll
    it back and run all of it again.
    """


class UnsupportedConnection(OutboxError, TypeError):
    """record() was given an object that is not a supported connection."""


class ConfigurationError(OutboxError):
    """A database URL or setting that outbox cannot use."""


class MissingExtra(ConfigurationError):
    """The database driver a URL needs is not installed (or cannot be imported).

    ``extra`` is the install extra that brings it (``"postgres"``, ``"mysql"``); the
    message says ``pip install 'outbox-relay[<extra>]'``.
    """

    def __init__(self, message: str, *, extra: str) -> None:
        super().__init__(message)
        self.extra = extra


class PermanentFailure(OutboxError):
    """Raised by a job handler: the job cannot succeed, dead-letter it without retrying."""


class Snooze(OutboxError):
    """Raised by a job handler: put the job back for ``seconds`` without spending an
    attempt (``ctx.attempt`` is the same when it runs again).

    Not a failure: nothing is logged as an error and no dead letter is written, until the
    cap (``outbox.queue.control.MAX_SNOOZES`` per job): the snooze past it dead-letters
    the job with exception class ``SnoozeLimit``. ``seconds`` runs from 0 to
    ``MAX_SNOOZE_SECONDS`` (a bad value is a failed attempt, ``InvalidJob``).
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"snooze for {seconds} s")


class DatabaseError(OutboxError):
    """A database operation failed for a reason that is not safe to retry here.

    ``operation`` names what we were doing (``"claim"``, ``"relay batch"``, ...) and
    ``code`` is the driver's most specific code (PostgreSQL's SQLSTATE, MariaDB's error
    number, SQLite's error name) or ``None``. The driver's exception is kept as
    ``__cause__``; its text is not repeated, since it can quote row values.
    """

    def __init__(
        self, message: str, *, operation: str | None = None, code: str | int | None = None
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.code = code


class TablesMissing(DatabaseError):
    """The outbox tables are not in this database: it was never migrated, or the URL
    names another database. ``outbox migrate`` creates them (a framework's own
    migrations do too: its integration says which command)."""


class ReadOnlyDatabase(DatabaseError):
    """The database refuses to write: a read-only SQLite file (``SQLITE_READONLY``), a
    read-only PostgreSQL server or transaction (``default_transaction_read_only``, a hot
    standby: SQLSTATE 25006), MariaDB's ``read_only`` or a ``READ ONLY`` transaction
    (1290, 1792), or a user without the privilege (SQLSTATE 42501, MariaDB 1142/1143).

    Waiting does not fix it, so the long-running commands (worker, ``relay --watch``)
    end on it, in one line and exit 1, instead of retrying for ever.
    """


class InvalidMessageId(OutboxError, ValueError):
    """The text given is not a message id (a UUID in its canonical form)."""


class MessageNotFound(OutboxError):
    """Nothing with this message id: no outbox intent, queued job or dead letter, as asked."""


class RetryRefused(OutboxError):
    """The intent cannot go back to pending: it is not quarantined, or it does not verify."""


class BrokerError(OutboxError):
    """NATS JetStream could not be reached or used: no server answered, or a stream is
    missing or set up otherwise than required. The message names the stream and the
    setting, never a credential.

    ``transient`` is True when waiting may help (no server answered, a publish timed
    out, a stream is full): a watching relay backs off and tries again. A stream that is
    missing or set up wrongly is not transient: waiting does not fix it.
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class TargetRefused(BrokerError):
    """A stream refused messages because it is at its limits (``max_msgs`` or
    ``max_bytes`` with discard new). Nothing was lost: the refused intents stay pending.

    ``handed_off`` counts the intents of the same batch the broker did accept.
    """

    def __init__(self, message: str, *, stream: str, limit: str, handed_off: int = 0) -> None:
        super().__init__(message, transient=True)
        self.stream = stream
        self.limit = limit
        self.handed_off = handed_off


class MissingKey(OutboxError):
    """A payload is sealed under an encryption key that is not in this process's keyring
    (or no keyring is configured). Nothing is lost: the job is dead-lettered with this
    class, and ``outbox queue retry`` runs it once the key is back. ``key_id`` names
    the key (never the key itself)."""

    def __init__(self, key_id: str) -> None:
        self.key_id = key_id
        super().__init__(
            f"the payload is encrypted under key {key_id!r}, which is not in the keyring"
        )


class TamperedPayload(OutboxError):
    """A sealed payload failed its authentication tag (or is not a well-formed
    envelope): it was changed after it was written. The job is dead-lettered with this
    class, never run."""

    def __init__(self, key_id: str) -> None:
        self.key_id = key_id
        super().__init__(f"the payload sealed under key {key_id!r} fails authentication")
