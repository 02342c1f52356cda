"""Dashboards for the tests: one seeded database per backend and two real
``outbox dashboard`` processes on it, started once per test session.

``site`` is parametrised over the backends. Its ``write`` server runs with a token,
``--show-payloads`` and the seed's registry (``--app``, for the Schedules page); its
``readonly`` server runs without a token. PostgreSQL and MariaDB
are reached with a password in the URL (trust auth ignores it on PostgreSQL; MariaDB gets
a user of its own), so the tests can check that no answer ever contains it.

``browser`` is Debian's Chromium driven by Playwright (``scripts/services.sh`` installs
it), also started once per session. Screenshots go to ``$OUTBOX_TEST_SCREENSHOTS``
(default: the pytest temporary folder).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from outbox.db.connection import Database
from outbox.db.migrate import migrate
from tests.dashboard import seed
from tests.fixtures import databases as backends
from tests.fixtures.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "dash-token-" + secrets.token_hex(12)
CHROMIUM = os.environ.get("OUTBOX_TEST_CHROMIUM", "/usr/bin/chromium")



@dataclass
class Server:
    """One ``outbox dashboard`` process."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def start_server(
    db_url: str, log: Path, *args: str, token: str | None = None, wait_path: str = "/api/status"
) -> Server:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "OUTBOX_DASHBOARD_TOKEN"}
    if token:
        env["OUTBOX_DASHBOARD_TOKEN"] = token
    with log.open("wb") as out:  # the child keeps its own handle
        process = subprocess.Popen(
            [sys.executable, "-m", "outbox", "--database-url", db_url, "dashboard",
             "--bind", f"127.0.0.1:{port}", "--refresh", "1", *args],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )
    server = Server(f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"dashboard exited: {log.read_text()}")
        try:
            with urllib.request.urlopen(server.url + wait_path, timeout=5):
                return server
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"dashboard did not answer in 60 s: {log.read_text()}")


@dataclass
class Site:
    backend: str
    db_url: str
    secrets: list[str]  # text no answer may contain
    write: Server
    readonly: Server
    seeded: dict[str, Any] = field(default_factory=dict)

    def database(self) -> Database:
        return Database(self.db_url)


def _with_password(backend: str, url: str) -> tuple[str, list[str]]:
    """The URL the dashboard gets, and the secrets in it (MariaDB: a user dropped with
    the database's tests)."""
    password = "pw-" + secrets.token_hex(8)
    if backend == "postgresql":
        u = make_url(url).set(password=password)
        return u.render_as_string(hide_password=False), [password]
    if backend == "mysql":
        u = make_url(url)
        user = "dash_" + secrets.token_hex(3)
        admin = backends.raw_connect(url)
        with admin.cursor() as cur:
            cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'")
            cur.execute(f"GRANT ALL ON `{u.database}`.* TO '{user}'@'%'")
        admin.close()
        return u.set(username=user, password=password).render_as_string(hide_password=False), [
            password
        ]
    return url, [make_url(url).database or ""]


@pytest.fixture(scope="session", params=backends.BACKENDS)
def site(
    request: pytest.FixtureRequest,
    _servers: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Site]:
    backend = str(request.param)
    folder = tmp_path_factory.mktemp(f"dash-{backend}")
    plain = backends.sqlite_url(folder) if backend == "sqlite" else _servers[backend].new_url()
    with Database(plain).connect() as conn:
        migrate(conn)
    seeded = seed.seed_site(plain)
    url, hidden = _with_password(backend, plain)
    write = start_server(url, folder / "write.log", "--show-payloads",
                         "--app", "tests.dashboard.seed:registry", token=TOKEN)
    readonly = start_server(url, folder / "readonly.log")
    yield Site(backend, plain, [*hidden, url], write, readonly, seeded)
    write.stop()
    readonly.stop()
    if backend == "mysql":
        admin = backends.raw_connect(plain)
        with admin.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{make_url(url).username}'@'%'")
        admin.close()
    if backend != "sqlite":
        _servers[backend].drop_url(plain)


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wanted = os.environ.get("OUTBOX_TEST_SCREENSHOTS")
    folder = Path(wanted) if wanted else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium for the browser tests (one module, so once per run). Not for the whole
    session: Playwright's sync API keeps an event loop running in the thread while it is
    open, and every later test in that process that calls ``asyncio.run`` would fail."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        raise RuntimeError(f"no Chromium at {CHROMIUM}: run ./scripts/services.sh to install it")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context (no cookies) per test, confirming every dialog."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.on("dialog", lambda dialog: dialog.accept())
    yield tab
    context.close()
