"""The dashboard's dead letters page lists the ordering keys dead letters block
(``dead_letter_holds_key``), with the dead letter to retry or forget; the queue and job
pages show a job waiting for its key's turn."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import uvicorn

from outbox import Job, push
from outbox.dashboard import create_app
from outbox.db.connection import Database
from outbox.db.migrate import migrate
from outbox.db.rows import Failure, JobClaim, JobDeadLetter
from tests.dashboard.client import HTML, bearer, get
from tests.dashboard.conftest import TOKEN
from tests.fixtures.databases import raw_connect
from tests.fixtures.ports import free_port


def test_dead_letters_page_lists_the_keys_they_block(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'ordering.db'}"
    with Database(db_url).connect() as conn:
        migrate(conn)
        app_conn = raw_connect(db_url)
        held = push(app_conn, Job("o.run", {"n": 0}, ordering_key="order:1"))
        waiting = push(app_conn, Job("o.run", {"n": 1}, ordering_key="order:1"))
        app_conn.commit()
        app_conn.close()
        (job,) = conn.driver.job_claim(JobClaim("default", 10, "w1", 30_000))
        failure = Failure("Boom", "boom", "")
        assert conn.driver.job_dead_letter(JobDeadLetter("w1", job, failure, hold_key=True))
    server = uvicorn.Server(uvicorn.Config(create_app(db_url, token=TOKEN), host="127.0.0.1",
                                           port=free_port(), log_level="warning"))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        url = f"http://127.0.0.1:{server.config.port}/dead-letters"
        page = get(url, headers={**HTML, **bearer(TOKEN)})
        assert page.status == 200
        assert "Blocked ordering keys" in page.body and held in page.body
        assert "1 jobs wait on 1 keys" in page.body
        # A job waiting for its key's turn is listed with its own due time, not the
        # shifted one (past the year 9999: the pages answered 400).
        base = f"http://127.0.0.1:{server.config.port}"
        for path in ("/queues/default?state=delayed", f"/jobs/{waiting}"):
            shown = get(base + path, headers={**HTML, **bearer(TOKEN)})
            assert shown.status == 200, (path, shown.body[:300])
            assert waiting in shown.body and "waiting" in shown.body
    finally:
        server.should_exit = True
        thread.join(30)
