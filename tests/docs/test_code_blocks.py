"""Every code block of the site and the README, run as printed, or a reason why it cannot be.

``HOW`` has one row per block, keyed by its page and its first line. The row says one of:

- ``RUN``: run here, as printed, by ``test_the_page_runs_as_printed``. A page's ``RUN``
  blocks run in page order in one fresh temporary folder (the current directory, and on
  ``sys.path``), so a later block sees what an earlier one made:

  - a Python block whose first line names a file (``# shop_jobs.py``,
    ``# myapp/jobs.py``) is written to that file, as the reader would save it, for a
    later command or import to use; any other Python block is executed, all of a page's
    in one namespace;
  - a shell block runs in ``bash -euo pipefail``, with this checkout's ``outbox`` and
    ``python`` first on ``PATH`` and no ``OUTBOX_*`` variable but what ``GIVEN`` sets;
  - a block that raises or exits non-zero fails the test.

  ``GIVEN[page]`` (optional) supplies what the page's prose says exists and the page
  does not show: names (``engine``, ``registry``), environment variables, and a test
  database for each example URL the page prints (``postgresql://app@db/app`` becomes a
  migrated SQLite file: the only change made to a block's text). ``CHECKS[page]``
  (optional) then checks what the blocks did (what a worker printed, what a database
  holds).
- ``test:PATH::NAME``: that test reads the block from the page and runs it as printed
  (for a page that needs more than a folder: a PostgreSQL database, a Django project,
  an OpenTelemetry provider).
- ``include:PATH``: a ``--8<--`` snippet of a file shipped in the repository, tested
  there.
- ``why(REASON)``: cannot run here, and the reason says why (it needs a host we do not
  start, it runs until stopped, it is a fragment whose names come from the reader's
  code, it installs packages). It is still compiled (Python) or parsed (shell: every
  ``outbox`` command by the real command tree, every ``pip install`` naming an extra of
  this distribution, any other line covered in ``OTHER_LINES``).

A new page's blocks: add one row per block, ``RUN`` unless one of the reasons above
applies; a ``GIVEN`` entry if its prose supplies names; a ``CHECKS`` entry if what it
shows (a printed line, a row) can be checked. A block without a row, or a row whose block
is gone, fails ``test_every_block_has_exactly_one_way_it_is_exercised``. Blocks in
``text`` (output, diagrams, ``--help``) are not code. Keep a page's run to a few
seconds; a page that cannot be is given a ``test:`` of its own, marked ``slow``.
"""

# ruff: noqa: E501  (HOW is keyed by the exact first line of each block)

from __future__ import annotations

import os
import re
import runpy
import shlex
import sqlite3
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, text

from outbox import Database, Registry, paused_queues
from outbox.cli import main
from outbox.db.migrate import migrate
from tests.docs.pages import DOCS, ROOT, Block, blocks_of, site_pages

RUN = "run"
T = "test:"


def why(reason: str) -> str:
    """A block that cannot run here, and the reason."""
    assert len(reason) >= 20, "say why the block cannot run"
    return f"why: {reason}"


FOREVER = why("runs until stopped (a long-running process); its command line is parsed")
HOSTS = why("names hosts we do not start (nats1..3, pgbouncer, db); its command lines are parsed")
INSTALL = why("installs packages: tests/docs/test_install.py runs the tutorial's install in a fresh venv (slow)")
DASHBOARD = why("talks to a running dashboard; tests/dashboard/test_http.py makes these requests")
DJANGO = why("a fragment of a Django project (Order, a request): the page's first section is run whole by tests/django/test_docs.py")
FRAGMENT = why("a fragment: its names (conn, invoice_id, and record, Job, push imported) come from the reader's code")

HOW: dict[tuple[str, str], str] = {
    ("README.md", "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/outbox demo"):
        T + "tests/docs/test_readme.py::test_its_first_two_commands_install_and_demo_then_run_the_whole_suite_as_ci_does",
    ("README.md", "./scripts/test.sh"):
        T + "tests/docs/test_readme.py::test_its_first_two_commands_install_and_demo_then_run_the_whole_suite_as_ci_does",
    ("README.md", "# shop_jobs.py"): RUN,
    ("README.md", "# shop.py"): RUN,
    ("README.md", "export OUTBOX_DATABASE_URL=sqlite:///shop.db"): RUN,
    ("README.md", "import sqlite3"): RUN,
    ("how-to/workflows.md", "from outbox import Job, Workflow, record"):
        T + "tests/docs/test_workflow_page.py::test_the_order_workflow_records_and_ship_reads_its_dependencies_results",
    ("how-to/workflows.md", "from outbox import Registry"):
        T + "tests/docs/test_workflow_page.py::test_the_order_workflow_records_and_ship_reads_its_dependencies_results",
    ("how-to/workflows.md", 'wf = Workflow("report:2026-12")'):
        T + "tests/docs/test_workflow_page.py::test_the_fan_out_and_fan_in_example_runs_merge_once_after_every_part",
    ("how-to/workflows.md", 'wf = Workflow("file:7:publish")'):
        T + "tests/docs/test_workflow_page.py::test_the_clean_up_node_runs_after_a_failure_and_sees_what_failed",
    ("how-to/workflows.md", "$ outbox workflow show 01a2328b-77a0-7652-8493-6c276bb14772"):
        T + "tests/docs/test_workflow_page.py::test_workflow_show_prints_what_the_page_shows",
    ("how-to/tracing.md", "pip install -e '../outbox[tracing]'    # today, from a checkout (see the tutorial)"): INSTALL,
    ("how-to/tracing.md", "# myapp/telemetry.py"):
        T + "tests/docs/test_tracing_page.py::test_the_set_up_puts_every_attempt_under_the_request_that_recorded_it",
    ("how-to/tracing.md", "from opentelemetry import trace"):
        T + "tests/docs/test_tracing_page.py::test_the_set_up_puts_every_attempt_under_the_request_that_recorded_it",
    ("how-to/tracing.md", "# myapp/jobs.py"):
        T + "tests/docs/test_tracing_page.py::test_the_set_up_puts_every_attempt_under_the_request_that_recorded_it",
    ("how-to/tracing.md", "outbox worker default --app myapp.jobs:registry"): FOREVER,
    ("how-to/tracing.md", "# tests/test_tracing.py"):
        T + "tests/docs/test_tracing_page.py::test_the_testing_example_is_a_test_that_passes",
    ("how-to/ordering.md", "from outbox import Job, record"):
        T + "tests/docs/test_ordering_page.py::test_one_keys_jobs_run_one_at_a_time_in_commit_order",
    ("how-to/ordering.md", '@registry.job("orders.sync", max_attempts=5, dead_letter_holds_key=True)'):
        T + "tests/docs/test_ordering_page.py::test_a_held_key_shows_in_status_and_queue_retry_runs_the_dead_letter_first",
    ("how-to/ordering.md", "from outbox.contrib.django import ordered"):
        T + "tests/django/test_ordering.py::test_the_pages_ordered_block_gives_its_enqueues_the_key",
    ("how-to/alembic.md", "# migrations/versions/outbox_0001_schema_v1.py"): RUN,
    ("how-to/dashboard.md", "pip install -e '.[dashboard]'                      # (.[dev] includes it)"):
        why("installs, then starts dashboards that run until stopped; tests/dashboard/ runs them"),
    ("how-to/dashboard.md", 'curl -H "Authorization: Bearer $OUTBOX_DASHBOARD_TOKEN" -d id=MESSAGE_ID \\'): DASHBOARD,
    ("how-to/dashboard.md", "from starlette.routing import Mount"): RUN,
    ("how-to/deploy.md", '--8<-- "ops/k8s/worker-deployment.yaml"'):
        "include:tests/docs/test_code_blocks.py::test_every_k8s_manifest_runs_a_real_command",
    ("how-to/deploy.md", '--8<-- "ops/k8s/prune-cronjob.yaml"'):
        "include:tests/docs/test_code_blocks.py::test_every_k8s_manifest_runs_a_real_command",
    ("how-to/jetstream.md", "outbox relay --watch --target nats://nats1:4222,nats2:4222,nats3:4222 --replicas 3"): HOSTS,
    ("how-to/jetstream.md", "outbox worker billing --app myapp.jobs:registry --broker nats://nats1:4222 \\"): HOSTS,
    ("how-to/django.md", "from django.db import transaction"): DJANGO,
    ("how-to/django.md", "OUTBOX = {"): RUN,
    ("how-to/django.md", "from outbox.contrib.django import idempotent"): DJANGO,
    ("how-to/django.md", "from django.test import TestCase"): DJANGO,
    ("how-to/redis.md", "pip install 'outbox-relay[redis]'"): INSTALL,
    ("how-to/redis.md", "outbox queue stats --broker redis://cache1:6379/0            # ready, reserved, delayed, dead letters"):
        why("names a Redis host we do not start (cache1): tests/redis/test_queue_jobs_cancel.py "
            "and test_queue_control_redis.py run every one of these commands"),
    ("how-to/encryption.md", 'export OUTBOX_ENCRYPTION_KEYS="2026-12:NEWKEYBASE64=,2026-06:OLDKEYBASE64="'):
        why("a placeholder key (OLDKEYBASE64): the keyring's format and refusals run in "
            "tests/unit/test_sealing.py"),
    ("how-to/encryption.md", "from outbox import sealing"): FRAGMENT,
    ("how-to/encryption.md", "outbox keys status          # rows per key id and table, plaintext included"):
        why("needs a database with sealed rows: tests/conformance/test_encryption_cli.py runs "
            "both commands"),
    ("how-to/typed-jobs.md", "import dataclasses"):
        why("a fragment (conn, registry of the reader's app): tests/conformance/test_typed_jobs.py "
            "records and runs the same kinds of type"),
    ("how-to/typed-jobs.md", "outbox schema mail.welcome --app myapp.jobs:registry"):
        why("names the reader's app (myapp.jobs): tests/conformance/test_typed_jobs.py runs "
            "outbox schema"),
    ("how-to/typed-jobs.md", "def upgrade(data: dict, version: int) -> dict:"): FRAGMENT,
    ("how-to/periodic-jobs.md", "from outbox import Registry"):
        T + "tests/docs/test_page_examples.py::test_the_periodic_jobs_example_declares_and_runs",
    ("how-to/periodic-jobs.md", "outbox scheduler --app myapp.jobs:registry      # as many as you like; each tick once"):
        FOREVER,
    ("how-to/periodic-jobs.md", "from outbox import Event, emit"):
        T + "tests/docs/test_page_examples.py::test_the_events_example_records_one_intent_per_listener",
    ("how-to/pgbouncer.md", "engine = create_engine("): RUN,
    ("how-to/queue-control.md", 'record(conn, f"invoice:{invoice_id}:pdf", Job("invoices.render", {"id": invoice_id}, priority=0))'):
        FRAGMENT,
    ("how-to/queue-control.md", "outbox queue pause mail        # maintenance on the mail provider"): RUN,
    ("how-to/queue-control.md", "from outbox import Database, pause_queue, paused_queues, resume_queue"): RUN,
    ("how-to/queue-control.md", '@registry.job("exports.build")'): RUN,
    ("how-to/queue-control.md", "from outbox import Snooze"): RUN,
    ("how-to/queue-control.md", '@registry.job("sync.account", concurrency=2, concurrency_key=lambda payload: payload["account_id"])'):
        T + "tests/acceptance/test_cli_limits.py::test_the_docs_example_registers_its_limits",
    ("how-to/queue-control.md", "outbox worker default mail --app myapp.jobs:registry --queue-concurrency mail=5"):
        FOREVER,
    ("how-to/record.md", "from sqlalchemy import create_engine, update"): RUN,
    ("how-to/record.md", "from outbox.errors import RetryTransaction"): RUN,
    ("how-to/roles.md", '--8<-- "ops/sql/postgresql-grants.sql"'): "include:tests/ops/test_grants.py",
    ("how-to/run-jobs.md", "# myapp/jobs.py"): RUN,
    ("how-to/run-jobs.md", "outbox relay --watch                                   # committed intents -> queue"):
        FOREVER,
    ("how-to/run-jobs.md", "from outbox import Database, Relay, RelayConfig, Worker, WorkerConfig"):
        why("a worker.run() that returns only when stopped, on the registry of the page's myapp/jobs.py (whose handlers call the reader's search service)"),
    ("how-to/run-jobs.md", "outbox init            # writes ./jobs.py (or: outbox init myapp/jobs.py); never overwrites"):
        RUN,
    ("how-to/testing.md", "# pytest.ini"):
        T + "tests/docs/test_page_examples.py::test_the_testing_example_is_the_sample_apps_suite",
    ("how-to/testing.md", "def test_the_welcome_email_is_written_when_the_jobs_run(session, outbox):"):
        T + "tests/docs/test_page_examples.py::test_the_testing_example_is_the_sample_apps_suite",
    ("tutorial.md", "python3 -m venv .venv && .venv/bin/pip install -e '../outbox[postgres]'"):
        T + "tests/docs/test_install.py::test_the_tutorials_install_works_in_a_fresh_venv",
}
# The Django page's first section: its test runs these in order in a fresh project.
for first in (
    "$ pip install 'outbox-relay[django]'",
    'INSTALLED_APPS += ["outbox.contrib.django", "shop"]',
    "try:",
    "$ python manage.py migrate",
):
    HOW[("how-to/django.md", first)] = (
        T + "tests/django/test_docs.py::test_the_page_goes_from_pip_install_to_a_task_result"
    )
# The tutorial runs on PostgreSQL, in order, in its own test (the default suite).
for first in (
    "export OUTBOX_DATABASE_URL=postgresql://app@127.0.0.1:5432/app",
    "outbox init jobs.py",
    "# record_welcome.py",
    "python record_welcome.py",
    "outbox relay",
):
    HOW[("tutorial.md", first)] = T + "tests/docs/test_tutorial.py::test_the_tutorial_runs_as_written"

# Shell lines other than `outbox ...` and `pip install ...`, and what exercises each.
OTHER_LINES: dict[str, str] = {
    r"curl .*/dead-letters/retry\s*(#.*)?": "tests/dashboard/test_http.py",
    r"curl http://127\.0\.0\.1:8642/api/status\s*(#.*)?": "tests/dashboard/test_http.py",
}
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
SHELL = ("bash", "sh")


def _all_blocks() -> list[Block]:
    pages = ["README.md", *(str(p.relative_to(DOCS)) for p in site_pages())]
    return [b for page in pages for b in blocks_of(page) if b.lang not in ("text", "")]


BLOCKS = _all_blocks()
RUN_PAGES = sorted({b.page for b in BLOCKS if HOW.get((b.page, b.first)) == RUN})


def _how(block: Block) -> str:
    return HOW[(block.page, block.first)]


def test_every_block_has_exactly_one_way_it_is_exercised() -> None:
    seen = [(b.page, b.first) for b in BLOCKS]
    assert len(seen) >= 30  # the pages were read
    assert sorted(set(seen)) == sorted(seen), "two blocks start alike: make them distinct"
    assert sorted(set(seen) - set(HOW)) == [], "blocks without a row in HOW"
    assert sorted(set(HOW) - set(seen)) == [], "rows of HOW whose block is gone"
    assert set(GIVEN) | set(CHECKS) <= set(RUN_PAGES), "GIVEN or CHECKS for a page with nothing to run"


def _named_test_exists(ref: str) -> bool:
    path, name = ref.split("::")
    return re.search(rf"^def {re.escape(name)}\(", (ROOT / path).read_text(), re.M) is not None


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.page}:{b.first[:40]}" for b in BLOCKS])
def test_the_block_is_exercised(block: Block) -> None:
    """What is not run here is at least well formed: the named test exists, the snippet's
    file is shipped, the Python compiles, the shell lines parse."""
    how = _how(block)
    if how.startswith(T):
        assert _named_test_exists(how[len(T) :]), how
        test_file = (ROOT / how[len(T) :].split("::")[0]).read_text(encoding="utf-8")
        assert Path(block.page).name in test_file, f"{how} does not read {block.page}"
    elif how.startswith("include:"):
        snippet = re.fullmatch(r'--8<-- "([^"]+)"\n', block.body)
        assert snippet is not None and (ROOT / snippet[1]).is_file(), block.body
        target = how[len("include:") :]
        assert _named_test_exists(target) if "::" in target else (ROOT / target).is_file()
    elif block.lang == "python":
        assert how == RUN or how.startswith("why: "), how
        compile(block.body, f"{block.page}:{block.first}", "exec")
    else:
        assert how == RUN or how.startswith("why: "), how
        assert block.lang in SHELL, f"{block.page}: a {block.lang} block cannot be {how}"
        for line in _shell_lines(block.body):
            _check_shell_line(line)


# -- RUN: a page's blocks, in order, in a fresh folder ------------------------------------


@dataclass
class Given:
    """What a page's prose supplies: names its blocks use without defining them,
    environment variables for its shell blocks, and the test URL for each example URL
    the page prints."""

    names: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    urls: dict[str, str] = field(default_factory=dict)


@dataclass
class Ran:
    """What a page's run left, for its ``CHECKS`` entry."""

    folder: Path
    names: dict[str, Any]
    outputs: list[str]  # each shell block's stdout and stderr, in order
    env: dict[str, str]


@pytest.fixture
def page_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path


@pytest.mark.parametrize("page", RUN_PAGES)
def test_the_page_runs_as_printed(page: str, page_folder: Path) -> None:
    given = GIVEN.get(page, lambda _: Given())(page_folder)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env.update(given.env)
    ran = Ran(page_folder, {"__name__": "__main__", **given.names}, [], env)
    try:
        for block in (b for b in blocks_of(page) if HOW.get((b.page, b.first)) == RUN):
            body = block.body
            for printed, used in given.urls.items():
                body = body.replace(printed, used)
            where = f"{page}: the block starting {block.first!r}"
            if block.lang == "python" and (file := _file_named(block)):
                (page_folder / file).parent.mkdir(parents=True, exist_ok=True)
                (page_folder / file).write_text(body, encoding="utf-8")
            elif block.lang == "python":
                exec(compile(body, where, "exec"), ran.names)
            else:
                assert block.lang in SHELL, where
                done = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=page_folder,
                                      env=env, capture_output=True, text=True, timeout=90,
                                      check=False)
                assert done.returncode == 0, (where, done.stdout[-3000:], done.stderr[-3000:])
                ran.outputs.append(done.stdout + done.stderr)
        if page in CHECKS:
            CHECKS[page](ran)
    finally:
        for value in ran.names.values():
            if hasattr(value, "dispose") and hasattr(value, "dialect"):  # an Engine
                value.dispose()


def _file_named(block: Block) -> str | None:
    """``shop_jobs.py`` for a Python block whose first line is ``# shop_jobs.py``."""
    named = re.fullmatch(r"# ([\w./-]+\.py)", block.first)
    return named[1] if named else None


# -- GIVEN: what the prose supplies --------------------------------------------------------


EXAMPLE_URL = "postgresql://app@db/app"


def _migrated(folder: Path) -> str:
    url = f"sqlite:///{folder / 'app.db'}"
    with Database(url).connect() as conn:
        migrate(conn)
    return url


def _queue_control(folder: Path) -> Given:
    """A migrated database the page's commands and its ``Database(...)`` use, its
    ``engine``, and the ``registry`` of the reader's jobs module."""
    url = _migrated(folder)
    return Given(names={"engine": create_engine(url), "registry": Registry()},
                 env={"OUTBOX_DATABASE_URL": url}, urls={EXAMPLE_URL: url})


def _record(folder: Path) -> Given:
    """The reader's ``notes`` table with the note ``note_id``, the new ``title``, and the
    reader's ``order`` and ``place_order``; the page's engine URL a migrated SQLite file."""
    url = _migrated(folder)
    notes = Table("notes", MetaData(), Column("id", Integer, primary_key=True),
                  Column("title", String(100)))
    engine = create_engine(url)
    try:
        notes.create(engine)
        with engine.begin() as conn:
            conn.execute(notes.insert().values(id=7, title="draft"))
    finally:
        engine.dispose()
    return Given(names={"notes": notes, "note_id": 7, "title": "final",
                        "order": SimpleNamespace(id=7),
                        "place_order": lambda conn, order: conn.execute(text("SELECT 1"))},
                 urls={"postgresql+psycopg://app@db/app": url})


GIVEN: dict[str, Callable[[Path], Given]] = {
    "how-to/dashboard.md": lambda folder: Given(names={"database_url": _migrated(folder), "token": None}),
    "how-to/pgbouncer.md": lambda folder: Given(names={"create_engine": create_engine}),
    "how-to/queue-control.md": _queue_control,
    "how-to/record.md": _record,
}


# -- CHECKS: what the blocks did -----------------------------------------------------------


def _readme(ran: Ran) -> None:
    """The worker ran the recorded job and said so; running the script again records
    nothing new; the workflow block recorded its graph."""
    (commands,) = ran.outputs
    assert "1 handed off" in commands, commands
    assert '"event":"welcoming"' in commands and '"user_id":1' in commands, commands
    assert '"event":"worker.stopped"' in commands and '"succeeded":1,' in commands, commands
    again = subprocess.run([sys.executable, "shop.py"], cwd=ran.folder, env=ran.env,
                           capture_output=True, text=True, timeout=60, check=False)
    assert again.returncode == 0, again.stderr
    with sqlite3.connect(ran.folder / "shop.db") as db:
        users, keys, queued, dead, workflows = (
            db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("users", "outbox_keys", "outbox_jobs", "outbox_failed_jobs",
                      "outbox_workflows"))
    db.close()
    # one user, the welcome key and the workflow's; the job ran and was acknowledged
    assert (users, keys, queued, dead, workflows) == (1, 2, 0, 0, 1)


def _alembic(ran: Ran) -> None:
    """The revision, imported as Alembic imports it, upgrades and downgrades through
    ``outbox.alembic``, as the shipped revision does."""
    revision = runpy.run_path(str(ran.folder / "migrations/versions/outbox_0001_schema_v1.py"))
    assert revision["revision"] == "outbox_0001"
    assert callable(revision["upgrade"]) and callable(revision["downgrade"])
    shipped = (ROOT / "ops/alembic/versions/outbox_0001_schema_v1.py").read_text()
    for line in ("outbox.alembic.upgrade(op, to=1)", "outbox.alembic.downgrade(op)"):
        assert line in shipped


def _mount(ran: Ran) -> None:
    (route,) = ran.names["routes"]
    assert route.path == "/outbox"


def _engine(ran: Ran) -> None:
    engine = ran.names["engine"]
    assert engine.dialect.name == "postgresql" and engine.url.port == 6432


def _queue_control_check(ran: Ran) -> None:
    """The commands paused and resumed ``mail``; the last pause joined a commit; the
    page's handlers registered on the reader's registry."""
    (commands,) = ran.outputs
    assert "paused queue mail" in commands and "resumed queue mail" in commands, commands
    assert paused_queues(ran.names["db"]) == ["mail"]
    assert sorted(ran.names["registry"]) == ["exports.build", "shipments.track"]


def _recorded(ran: Ran) -> None:
    """The note's update and its job committed together; the retried order's job too."""
    with ran.names["engine"].connect() as conn:
        title = conn.execute(text("SELECT title FROM notes WHERE id = 7")).scalar_one()
        keys = conn.execute(text("SELECT count(*) FROM outbox_keys")).scalar_one()
        queues = conn.execute(text("SELECT queue FROM outbox_messages ORDER BY queue")).scalars()
        assert (title, keys, list(queues)) == ("final", 2, ["default", "search"])


def _run_jobs(ran: Ran) -> None:
    """``myapp/jobs.py``, imported as ``--app myapp.jobs:registry`` imports it, registers
    both jobs; ``outbox init`` wrote ``jobs.py``."""
    jobs = runpy.run_path(str(ran.folder / "myapp/jobs.py"))
    assert sorted(jobs["registry"]) == ["billing.credit", "notes.index"]
    assert "registry = Registry()" in (ran.folder / "jobs.py").read_text(encoding="utf-8")


def _outbox_setting(ran: Ran) -> None:
    """The Django page's ``OUTBOX`` names every key the app reads, at its default."""
    from outbox.contrib.django.conf import DEFAULTS

    setting = ran.names["OUTBOX"]
    assert set(setting) == set(DEFAULTS)
    assert setting["DATABASE"] == DEFAULTS["DATABASE"]
    assert setting["ADMIN_SHOW_PAYLOADS"] == DEFAULTS["ADMIN_SHOW_PAYLOADS"]


CHECKS: dict[str, Callable[[Ran], None]] = {
    "README.md": _readme,
    "how-to/alembic.md": _alembic,
    "how-to/dashboard.md": _mount,
    "how-to/django.md": _outbox_setting,
    "how-to/pgbouncer.md": _engine,
    "how-to/queue-control.md": _queue_control_check,
    "how-to/record.md": _recorded,
    "how-to/run-jobs.md": _run_jobs,
}


# -- why: what cannot run is parsed --------------------------------------------------------


def test_every_k8s_manifest_runs_a_real_command() -> None:
    """What ``ops/k8s/`` runs parses on the real command tree (the files have no test of
    their own under ``tests/ops``)."""
    import yaml

    commands = []
    for path in sorted((ROOT / "ops" / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            commands += _container_commands(doc)
    assert len(commands) >= 4, commands  # relay, worker, prune, migrate
    for argv in commands:
        assert argv[0] == "outbox", argv
        _check_shell_line(shlex.join(argv))


def _container_commands(node: Any) -> list[list[str]]:
    if isinstance(node, dict):
        found = [node["command"] + node.get("args", [])] if "command" in node else []
        return found + [c for v in node.values() for c in _container_commands(v)]
    if isinstance(node, list):
        return [c for v in node for c in _container_commands(v)]
    return []


def _shell_lines(body: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", body)
    return [ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.startswith("#")]


def _check_shell_line(line: str) -> None:
    words = shlex.split(line, comments=True)
    while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):  # VAR=value before the command
        words = words[1:]
    if words[:1] == ["export"]:
        assert re.fullmatch(r"[A-Z_]+=\S+", " ".join(words[1:])), line
    elif words[:1] == ["python"]:
        assert len(words) == 2 and words[1].endswith(".py"), line
    elif words[:1] == ["outbox"]:
        result = CliRunner().invoke(main, [*words[1:], "--help"], prog_name="outbox")
        assert result.exit_code == 0, (line, result.output)
        assert result.output.startswith("Usage: outbox "), line
    elif words[:2] == ["pip", "install"]:
        (requirement,) = [w for w in words[2:] if not w.startswith("-")]
        extras = re.fullmatch(r"(?:\.|\.\./outbox|outbox-relay)\[([a-z,]+)\]", requirement)
        assert extras, line
        assert set(extras[1].split(",")) <= set(PROJECT["optional-dependencies"]), line
    else:
        covered = [t for pattern, t in OTHER_LINES.items() if re.fullmatch(pattern, line)]
        assert len(covered) == 1, f"shell line not exercised: {line}"
        assert (ROOT / covered[0]).is_file()
