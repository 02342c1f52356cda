from outbox import Job, record
from outbox.db.connection import Connection


def test_commit_keeps_the_intent(app_conn, conn: Connection) -> None:
    mid = record(app_conn, "note:1", Job("notes.index", {"note_id": 1}, queue="search"))
    app_conn.commit()
    rows = conn.execute_sql("SELECT message_id, state, queue FROM outbox_messages")
    assert rows == [(mid, "pending", "search")]
