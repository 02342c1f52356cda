"""A relay with a JetStream target refuses a workflow's nodes in one line: nothing is
published, every row of the batch stays pending (workflows run on the SQL queue only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from outbox import Job, Workflow, record
from outbox.db.connection import Database
from outbox.db.migrate import migrate
from outbox.errors import ConfigurationError
from tests.fixtures.databases import raw_connect, sqlite_url
from tests.nats import support


def test_the_jetstream_relay_refuses_a_workflow_node_and_publishes_nothing(
    tmp_path: Path, nats_url: str
) -> None:
    url = sqlite_url(tmp_path)
    db = Database(url)
    with db.connect() as c:
        migrate(c)
    queue = support.queue_name()
    wf = Workflow("refused")
    a = wf.add(Job("t.ok", {"n": 1}, queue=queue), name="a")
    wf.add(Job("t.ok", {"n": 2}, queue=queue), name="b", after=[a])
    conn = raw_connect(url)
    try:
        with conn:
            wf_id = record(conn, "wf:refused", wf)
    finally:
        conn.close()
    with support.relay(db, nats_url) as relay, pytest.raises(ConfigurationError) as caught:
        relay.run_once()
    message = str(caught.value)
    assert "\n" not in message and "workflows run on the SQL queue only" in message
    assert wf_id not in message  # it names the node's intent, not payloads
    assert support.outbox_rows(url) == (1, 1)  # still pending; the workflow's key row
