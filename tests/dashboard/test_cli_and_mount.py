"""``outbox dashboard``'s checks and help as shipped, and ``create_app`` mounted inside
another Starlette app, served by uvicorn over real HTTP."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import uvicorn
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.routing import Mount

from outbox.cli import main
from outbox.dashboard import create_app
from outbox.db.connection import Database
from outbox.db.migrate import migrate
from outbox.errors import ConfigurationError
from tests.dashboard import seed
from tests.dashboard.client import HTML, bearer, get, post
from tests.dashboard.conftest import TOKEN, Site, start_server
from tests.fixtures.ports import free_port


def _cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["--database-url", "sqlite://", *args], env=env)
    return result.exit_code, result.output


def test_bad_options_are_refused_before_anything_starts() -> None:
    code, out = _cli("dashboard", "--bind", "8642")
    assert code == 2 and "'8642' is not HOST:PORT" in out
    code, out = _cli("dashboard", env={"OUTBOX_DASHBOARD_BIND": "localhost:http"})
    assert code == 2 and "'localhost:http' is not HOST:PORT" in out
    code, out = _cli("dashboard", "--refresh", "0.5")
    assert code == 2 and "--refresh" in out
    code, out = _cli("dashboard", env={"OUTBOX_DASHBOARD_TOKEN": "hunter2-secret"})
    assert code == 1 and "at least 16 printable ASCII" in out and "hunter2" not in out
    code, out = _cli("--database-url", "nosuch://x", "dashboard")  # a usage error, as everywhere
    assert code == 2 and "unsupported database URL scheme 'nosuch'" in out
    code, out = _cli("dashboard", "--app", "nosuch_module_7:registry")
    assert code == 2 and "no module named 'nosuch_module_7'" in out
    code, out = _cli("dashboard", "--app", "tests.dashboard.seed:PAYLOAD_MARKER")
    assert code == 2 and "is not an outbox.Registry" in out


def test_help_names_every_option_and_the_safety_rule() -> None:
    code, out = _cli("dashboard", "--help")
    assert code == 0
    for words in ("--bind", "127.0.0.1:8642", "--show-payloads", "--refresh", "--allowed-host",
                  "--app", "Default: none",
                  "read-only unless OUTBOX_DASHBOARD_TOKEN is set"):
        assert words in out


def test_the_server_says_how_it_runs_and_never_the_url(site: Site) -> None:
    readonly = site.readonly.log.read_text()
    write = site.write.log.read_text()
    assert f"for {site.backend}: read-only (no OUTBOX_DASHBOARD_TOKEN)" in readonly
    assert f"for {site.backend}: actions need the token" in write
    for secret in site.secrets:
        assert secret not in readonly + write
    assert TOKEN not in write


def test_create_app_checks_its_settings_where_they_are_given() -> None:
    with pytest.raises(ConfigurationError, match="at least 16"):
        create_app("sqlite://", token="short")
    with pytest.raises(ConfigurationError, match="refresh_s must be at least 1"):
        create_app("sqlite://", refresh_s=0)
    with pytest.raises(ConfigurationError, match="unsupported database URL scheme"):
        create_app("oracle://x")


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The dashboard at /ops inside another app, served by uvicorn; (base URL, db URL)."""
    db_url = f"sqlite:///{tmp_path / 'mounted.db'}"
    with Database(db_url).connect() as conn:
        migrate(conn)
    host = Starlette(routes=[Mount("/ops", app=create_app(db_url, token=TOKEN))])
    server = uvicorn.Server(uvicorn.Config(host, host="127.0.0.1", port=free_port(),
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    yield f"http://127.0.0.1:{server.config.port}/ops", db_url
    server.should_exit = True
    thread.join(30)


def test_mounted_under_a_prefix_every_link_and_redirect_stays_under_it(
    mounted: tuple[str, str],
) -> None:
    base, db_url = mounted
    page = get(base + "/", headers=HTML)
    assert page.status == 200
    assert 'href="/ops/dead-letters"' in page.body and 'src="/ops/static/dashboard.js"' in page.body
    assert get(base + "/static/dashboard.css").status == 200
    dead = seed.dead_letters(db_url, 2)
    answer = post(base + "/dead-letters/retry", form={"one": dead[0]}, headers=bearer(TOKEN))
    assert orjson.loads(answer.body)["requeued"] == 1 and seed.is_queued(db_url, dead[0])
    login = get(base + "/login", headers=HTML)
    cookie = login.header("set-cookie").split(";", 1)[0]
    csrf = login.body.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    signed = post(base + "/login", form={"token": TOKEN, "csrf": csrf},
                  headers={**HTML, "Cookie": cookie})
    assert signed.status == 303 and signed.header("location") == "/ops/"
    cookie = signed.header("set-cookie").split(";", 1)[0]
    csrf = get(base + "/dead-letters", headers={**HTML, "Cookie": cookie}).body.split(
        'name="csrf" value="', 1)[1].split('"', 1)[0]
    done = post(base + "/dead-letters/forget",
                form={"one": dead[1], "csrf": csrf, "next": "/ops/dead-letters"},
                headers={**HTML, "Cookie": cookie})
    assert done.status == 303 and done.header("location") == "/ops/dead-letters"
    assert not seed.is_dead(db_url, dead[1])


def test_an_unreachable_database_answers_503_without_naming_it(tmp_path: Path) -> None:
    # Nothing listens on port 1: the dashboard starts anyway and says the database is down.
    down = "postgresql://secret-user:secret-pass@127.0.0.1:1/secret-name"
    server = start_server(down, tmp_path / "down.log", wait_path="/static/dashboard.css")
    try:
        for path in ("/", "/api/status", "/dead-letters"):
            for headers in (HTML, {}):
                answer = get(server.url + path, headers=headers)
                assert answer.status == 503
                assert "the database did not answer" in answer.body
                for secret in ("secret-name", "secret-user", "secret-pass"):
                    assert secret not in answer.body
    finally:
        server.stop()


def test_a_mistyped_sqlite_path_or_an_unmigrated_database_stops_before_serving(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "outbx.db"
    code, out = _cli("--database-url", f"sqlite:///{missing}", "dashboard")
    assert code == 1 and f"no SQLite database at '{missing}'" in out and "outbox migrate" in out
    assert not missing.exists()
    empty = tmp_path / "empty.db"
    Database(f"sqlite:///{empty}").connect().close()
    code, out = _cli("--database-url", f"sqlite:///{empty}", "dashboard")
    assert code == 1 and "no outbox tables; run `outbox migrate` first" in out


def test_allowed_host_adds_a_name_to_answer(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'hosts.db'}"
    with Database(db_url).connect() as conn:
        migrate(conn)
    server = start_server(db_url, tmp_path / "hosts.log", "--allowed-host", "ops.internal")
    try:
        assert get(server.url + "/", headers={"Host": "ops.internal:8642"}).status == 200
        assert get(server.url + "/", headers={"Host": "other.internal"}).status == 400
    finally:
        server.stop()
