"""On a terminal, log lines and the progress bar never break each other.

``outbox relay`` draws a progress bar on stderr when it is a terminal, and logs each
batch (and each quarantined intent) to the same stderr. Run in a real pseudo-terminal,
its output is replayed the way a terminal shows it (``\\r`` returns to the line's start,
``ESC[K`` erases to its end): no line on the screen may hold both the bar and an event,
and every event line must be whole, one line each.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

from outbox.db.connection import Database
from outbox.db.migrate import migrate
from tests.fixtures.relays import record_many
from tests.fixtures.workers import ROOT

ANSI_COLOUR = re.compile(r"\x1b\[[0-9;?]*[a-zA-JL-Z]")  # every CSI but ESC[K


def screen_lines(raw: str) -> list[str]:
    """What each line of ``raw`` leaves on a terminal's screen."""
    out = []
    for line in ANSI_COLOUR.sub("", raw).replace("\r\n", "\n").split("\n"):
        shown = ""
        for part in line.split("\r"):
            erased = part.startswith("\x1b[K")
            shown = part[3:] if erased else part + shown[len(part) :]
        out.append(shown)
    return out


def _run_in_terminal(argv: list[str]) -> str:
    main, child = pty.openpty()
    proc = subprocess.Popen(
        argv, stdin=child, stdout=child, stderr=child, cwd=ROOT, env={**os.environ}
    )
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    assert proc.wait(timeout=120) == 0
    return b"".join(chunks).decode("utf-8", "replace")


def test_log_lines_never_break_the_relay_progress_bar(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    with Database(url).connect() as conn:
        migrate(conn)
    record_many(url, [f"bar-{i}" for i in range(1200)])
    with Database(url).connect() as conn:  # a few intents that will be quarantined
        conn.execute_sql("UPDATE outbox_messages SET fingerprint = 'x' WHERE id % 300 = 0")
    argv = [sys.executable, "-m", "outbox", "--database-url", url, "--log-format", "console"]
    raw = _run_in_terminal([*argv, "relay", "--batch-size", "100"])
    lines = screen_lines(raw)
    events = [ln for ln in lines if "relay.batch" in ln or "relay.quarantined" in ln]
    bars = [ln for ln in lines if ln.lstrip().startswith("relaying")]
    assert len([e for e in events if "relay.quarantined" in e]) == 4, raw
    assert len(events) >= 12 and bars, raw
    mixed = [
        ln for ln in lines if "relaying" in ln and ("relay.batch" in ln or "quarantined" in ln)
    ]
    assert mixed == [], mixed


def test_screen_replay_sees_a_bar_broken_by_a_log_line() -> None:
    """The replay is not blind: a log line written after a bar, without clearing it,
    shares the bar's screen line."""
    raw = "\rrelaying  [####------]   40%2026-11-30 [info] relay.batch size=100\n"
    assert screen_lines(raw)[0].startswith("relaying") and "relay.batch" in screen_lines(raw)[0]
    cleared = "\rrelaying  [####------]   40%\r\x1b[K2026-11-30 [info] relay.batch\n"
    assert screen_lines(cleared)[0] == "2026-11-30 [info] relay.batch"
