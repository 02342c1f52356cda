"""Every code block of the site and the README, each exercised as shipped.

``HOW`` names, for each block (by page and first line), how it is exercised:

- ``test:PATH::NAME``: that test runs the block as written (it must exist);
- ``exec``: run here, with the names the surrounding text supplies (``STUBS``) and the
  page's example database (``postgresql://app@db/app``) a migrated SQLite file, and what it
  declared or wrote checked (``CHECKS``);
- ``fragment``: a Python excerpt whose names come from the text around it; compiled here,
  and what it calls is covered by the conformance tests;
- ``commands``: a shell block: every ``outbox`` command is parsed by the real command tree
  (an option or a command that does not exist fails), every ``pip install`` names an
  extra of this distribution, and any other line must be covered in ``OTHER_LINES``;
- ``include:PATH``: a snippet of a file shipped in the repository, tested where named.

A new block without a row here, or a row whose block is gone, fails the first test.
Blocks in ``text`` (output, diagrams, ``--help``) are not code.
"""

# ruff: noqa: E501  (HOW is keyed by the exact first line of each block)

from __future__ import annotations

import re
import shlex
import tomllib
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text

from outbox import Database, Job, Registry, record
from outbox.cli import main
from outbox.db.migrate import migrate
from tests.docs.pages import DOCS, ROOT, Block, blocks_of, site_pages

T = "test:"
HOW: dict[tuple[str, str], str] = {
    ("README.md", "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/outbox demo"):
        T + "tests/docs/test_readme.py::test_its_first_two_commands_install_and_demo_then_run_the_whole_suite_as_ci_does",
    ("README.md", "./scripts/test.sh"):
        T + "tests/docs/test_readme.py::test_its_first_two_commands_install_and_demo_then_run_the_whole_suite_as_ci_does",
    ("README.md", "# shop.py: run `outbox --database-url sqlite:///shop.db migrate` once first"):
        T + "tests/docs/test_readme.py::test_the_example_records_relays_and_runs_one_job",
    ("README.md", "from outbox import Job, Workflow, record"):
        T + "tests/docs/test_workflow_page.py::test_the_readmes_workflow_fans_out_and_in",
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
    ("how-to/tracing.md", "pip install 'outbox-relay[tracing]'"): "commands",
    ("how-to/tracing.md", "# myapp/telemetry.py"):
        T + "tests/docs/test_tracing_page.py::test_the_set_up_puts_every_attempt_under_the_request_that_recorded_it",
    ("how-to/tracing.md", "from opentelemetry import trace"):
        T + "tests/docs/test_tracing_page.py::test_the_set_up_puts_every_attempt_under_the_request_that_recorded_it",
    ("how-to/tracing.md", "# myapp/jobs.py"):
        T + "tests/docs/test_tracing_page.py::test_the_set_up_puts_every_attempt_under_the_request_that_recorded_it",
    ("how-to/tracing.md", "outbox worker default --app myapp.jobs:registry"): "commands",
    ("how-to/tracing.md", "# tests/test_tracing.py"):
        T + "tests/docs/test_tracing_page.py::test_the_testing_example_finds_the_attempt_under_its_request",
    ("how-to/ordering.md", "from outbox import Job, record"):
        T + "tests/docs/test_ordering_page.py::test_one_keys_jobs_run_one_at_a_time_in_commit_order",
    ("how-to/ordering.md", '@registry.job("orders.sync", max_attempts=5, dead_letter_holds_key=True)'):
        T + "tests/docs/test_ordering_page.py::test_a_held_key_shows_in_status_and_queue_retry_runs_the_dead_letter_first",
    ("how-to/ordering.md", "from outbox.contrib.django import ordered"):
        T + "tests/django/test_ordering.py::test_the_pages_ordered_block_gives_its_enqueues_the_key",
    ("how-to/alembic.md", "# migrations/versions/outbox_0001_schema_v1.py"): "exec",
    ("how-to/dashboard.md", "pip install -e '.[dashboard]'                      # (.[dev] includes it)"):
        "commands",
    ("how-to/dashboard.md", 'curl -H "Authorization: Bearer $OUTBOX_DASHBOARD_TOKEN" -d id=MESSAGE_ID \\'):
        "commands",
    ("how-to/dashboard.md", "from starlette.routing import Mount"): "exec",
    ("how-to/deploy.md", '--8<-- "ops/k8s/worker-deployment.yaml"'):
        "include:tests/docs/test_code_blocks.py::test_every_k8s_manifest_runs_a_real_command",
    ("how-to/deploy.md", '--8<-- "ops/k8s/prune-cronjob.yaml"'):
        "include:tests/docs/test_code_blocks.py::test_every_k8s_manifest_runs_a_real_command",
    ("how-to/jetstream.md", "outbox relay --watch --target nats://nats1:4222,nats2:4222,nats3:4222 --replicas 3"):
        "commands",
    ("how-to/jetstream.md", "outbox worker billing --app myapp.jobs:registry --broker nats://nats1:4222 \\"):
        "commands",
    ("how-to/redis.md", "pip install 'outbox-relay[redis]'"): "commands",
    ("how-to/django.md", "from django.db import transaction"): "fragment",
    ("how-to/django.md", "OUTBOX = {"): "exec",
    ("how-to/django.md", "from outbox.contrib.django import idempotent"): "fragment",
    ("how-to/django.md", "from django.test import TestCase"): "fragment",
    ("how-to/periodic-jobs.md", "from outbox import Registry"):
        T + "tests/docs/test_page_examples.py::test_the_periodic_jobs_example_declares_and_runs",
    ("how-to/periodic-jobs.md", "outbox scheduler --app myapp.jobs:registry      # as many as you like; each tick once"):
        "commands",
    ("how-to/periodic-jobs.md", "from outbox import Event, emit"):
        T + "tests/docs/test_page_examples.py::test_the_events_example_records_one_intent_per_listener",
    ("how-to/pgbouncer.md", "engine = create_engine("): "exec",
    ("how-to/queue-control.md", 'record(conn, f"invoice:{invoice_id}:pdf", Job("invoices.render", {"id": invoice_id}, priority=0))'):
        "fragment",
    ("how-to/queue-control.md", "outbox queue pause mail        # maintenance on the mail provider"):
        "commands",
    ("how-to/queue-control.md", "from outbox import Database, pause_queue, paused_queues, resume_queue"):
        "exec",
    ("how-to/queue-control.md", '@registry.job("exports.build")'): "exec",
    ("how-to/queue-control.md", "from outbox import Snooze"): "exec",
    ("how-to/queue-control.md", '@registry.job("sync.account", concurrency=2, concurrency_key=lambda payload: payload["account_id"])'):
        T + "tests/acceptance/test_cli_limits.py::test_the_docs_example_registers_its_limits",
    ("how-to/queue-control.md", "outbox worker default mail --app myapp.jobs:registry --queue-concurrency mail=5"):
        "commands",
    ("how-to/record.md", "from sqlalchemy import create_engine, update"): "fragment",
    ("how-to/record.md", "from outbox.errors import RetryTransaction"): "exec",
    ("how-to/roles.md", '--8<-- "ops/sql/postgresql-grants.sql"'): "include:tests/ops/test_grants.py",
    ("how-to/run-jobs.md", "# myapp/jobs.py"): "exec",
    ("how-to/run-jobs.md", "outbox relay --watch                                   # committed intents -> queue"):
        "commands",
    ("how-to/run-jobs.md", "from outbox import Database, Relay, RelayConfig, Worker, WorkerConfig"):
        "fragment",
    ("how-to/run-jobs.md", "outbox init            # writes ./jobs.py (or: outbox init myapp/jobs.py); never overwrites"):
        "commands",
    ("how-to/testing.md", "# pytest.ini"):
        T + "tests/docs/test_page_examples.py::test_the_testing_example_is_the_sample_apps_suite",
    ("how-to/testing.md", "def test_the_welcome_email_is_written_when_the_jobs_run(session, outbox):"):
        T + "tests/docs/test_page_examples.py::test_the_testing_example_is_the_sample_apps_suite",
    ("tutorial.md", "python3 -m venv .venv && .venv/bin/pip install 'outbox-relay[postgres]'"):
        T + "tests/docs/test_tutorial.py::test_the_install_step_names_this_distribution_and_an_extra_it_has",
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


def _all_blocks() -> list[Block]:
    pages = ["README.md", *(str(p.relative_to(DOCS)) for p in site_pages())]
    return [b for page in pages for b in blocks_of(page) if b.lang not in ("text", "")]


BLOCKS = _all_blocks()


def _how(block: Block) -> str:
    return HOW[(block.page, block.first)]


def test_every_block_has_exactly_one_way_it_is_exercised() -> None:
    seen = [(b.page, b.first) for b in BLOCKS]
    assert len(seen) >= 30  # the pages were read
    assert sorted(set(seen)) == sorted(seen), "two blocks start alike: make them distinct"
    assert sorted(set(seen) - set(HOW)) == [], "blocks without a row in HOW"
    assert sorted(set(HOW) - set(seen)) == [], "rows of HOW whose block is gone"


def _named_test_exists(ref: str) -> bool:
    path, name = ref.split("::")
    return re.search(rf"^def {re.escape(name)}\(", (ROOT / path).read_text(), re.M) is not None


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.page}:{b.first[:40]}" for b in BLOCKS])
def test_the_block_is_exercised(block: Block, tmp_path: Any) -> None:
    how = _how(block)
    if how.startswith(T):
        assert _named_test_exists(how[len(T) :]), how
    elif how.startswith("include:"):
        snippet = re.fullmatch(r'--8<-- "([^"]+)"\n', block.body)
        assert snippet is not None and (ROOT / snippet[1]).is_file(), block.body
        target = how[len("include:") :]
        assert _named_test_exists(target) if "::" in target else (ROOT / target).is_file()
    elif how == "fragment":
        assert block.lang == "python"
        compile(block.body, f"{block.page}:{block.first}", "exec")
    elif how == "exec":
        url = f"sqlite:///{tmp_path / 'app.db'}"
        ns = STUBS.get(block.first, lambda _: {})(url)
        body = block.body.replace(EXAMPLE_URL, url)  # the page's database is a test one
        try:
            exec(compile(body, f"{block.page}:{block.first}", "exec"), ns)
            CHECKS[block.first](ns)
        finally:
            if "engine" in ns:
                ns["engine"].dispose()
    else:
        assert how == "commands" and block.lang in ("bash", "sh"), how
        for line in _shell_lines(block.body):
            _check_shell_line(line)


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
    if words[:1] == ["outbox"]:
        result = CliRunner().invoke(main, [*words[1:], "--help"], prog_name="outbox")
        assert result.exit_code == 0, (line, result.output)
        assert result.output.startswith("Usage: outbox "), line
    elif words[:2] == ["pip", "install"]:
        (requirement,) = [w for w in words[2:] if not w.startswith("-")]
        extras = re.fullmatch(r"(?:\.|outbox-relay)\[([a-z,]+)\]", requirement)
        assert extras, line
        assert set(extras[1].split(",")) <= set(PROJECT["optional-dependencies"]), line
    else:
        covered = [t for pattern, t in OTHER_LINES.items() if re.fullmatch(pattern, line)]
        assert len(covered) == 1, f"shell line not exercised: {line}"
        assert (ROOT / covered[0]).is_file()


# -- exec: the names the text supplies, and what the block must have declared -----------


EXAMPLE_URL = "postgresql://app@db/app"


def _migrated(url: str) -> dict[str, Any]:
    """A migrated database at ``url`` and a SQLAlchemy engine on it, as ``engine``."""
    with Database(url).connect() as conn:
        migrate(conn)
    return {"engine": create_engine(url)}


def _order(url: str) -> dict[str, Any]:
    return {
        **_migrated(url),
        "record": record,
        "Job": Job,
        "order": SimpleNamespace(id=7),
        "place_order": lambda conn, order: conn.execute(text("SELECT 1")),
    }


STUBS: dict[str, Callable[[str], dict[str, Any]]] = {
    "from starlette.routing import Mount": lambda url: {"database_url": url, "token": None},
    "engine = create_engine(": lambda url: {"create_engine": create_engine},
    '@registry.job("exports.build")': lambda url: {"registry": Registry()},
    "from outbox import Snooze": lambda url: {"registry": Registry()},
    "from outbox import Database, pause_queue, paused_queues, resume_queue": _migrated,
    "from outbox.errors import RetryTransaction": _order,
}


def _alembic(ns: dict[str, Any]) -> None:
    assert ns["revision"] == "outbox_0001"
    shipped = (ROOT / "ops/alembic/versions/outbox_0001_schema_v1.py").read_text()
    for line in ("outbox.alembic.upgrade(op, to=1)", "outbox.alembic.downgrade(op)"):
        assert line in shipped
    assert callable(ns["upgrade"]) and callable(ns["downgrade"])


def _mount(ns: dict[str, Any]) -> None:
    (route,) = ns["routes"]
    assert route.path == "/outbox"


def _engine(ns: dict[str, Any]) -> None:
    engine = ns["engine"]
    assert engine.dialect.name == "postgresql" and engine.url.port == 6432


def _paused(ns: dict[str, Any]) -> None:
    assert ns["paused_queues"](ns["db"]) == ["mail"]  # the last pause joined a commit


def _ordered(ns: dict[str, Any]) -> None:
    with ns["engine"].connect() as conn:
        keys = conn.execute(text("SELECT count(*) FROM outbox_keys")).scalar_one()
    assert keys == 1


def _registered(*names: str) -> Callable[[dict[str, Any]], None]:
    def check(ns: dict[str, Any]) -> None:
        assert sorted(ns["registry"]) == sorted(names)

    return check


def _outbox_setting(ns: dict[str, Any]) -> None:
    """The Django page's ``OUTBOX`` names every key the app reads, at its default."""
    from outbox.contrib.django.conf import DEFAULTS

    setting = ns["OUTBOX"]
    assert set(setting) == set(DEFAULTS)
    assert setting["DATABASE"] == DEFAULTS["DATABASE"]
    assert setting["ADMIN_SHOW_PAYLOADS"] == DEFAULTS["ADMIN_SHOW_PAYLOADS"]


CHECKS: dict[str, Callable[[dict[str, Any]], None]] = {
    "OUTBOX = {": _outbox_setting,
    "# migrations/versions/outbox_0001_schema_v1.py": _alembic,
    "from starlette.routing import Mount": _mount,
    "engine = create_engine(": _engine,
    '@registry.job("exports.build")': _registered("exports.build"),
    "from outbox import Snooze": _registered("shipments.track"),
    "# myapp/jobs.py": _registered("notes.index", "billing.credit"),
    "from outbox import Database, pause_queue, paused_queues, resume_queue": _paused,
    "from outbox.errors import RetryTransaction": _ordered,
}
