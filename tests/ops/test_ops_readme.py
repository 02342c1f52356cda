"""ops/README.md's walkthrough, command by command: none of them untested.

Every line of the README's ``sh`` blocks must match one row of ``HOW``. A row either
runs the command here, in order, in a sandbox (``/etc``, ``/opt``, ``/var`` become
folders of the test's own; the database is a fresh PostgreSQL one; the fixed ports become
free ones), or names the test that runs what the command does where it cannot run here
(``systemctl``, roles that are server-wide, ``promtool``). ``systemctl enable --now``
starts each installed unit's ``ExecStart`` with its ``EnvironmentFile``, as systemd would;
installing the cron files runs each entry's command, as cron would.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from outbox.db.connection import Database
from tests.fixtures.databases import backend_of
from tests.fixtures.gaps import Gap, skip_unless
from tests.fixtures.ports import free_port
from tests.fixtures.workers import ROOT

README = ROOT / "ops" / "README.md"
VENV_BIN = Path(sys.executable).parent
RUN = "run here"
EXPORT = "set in the environment of the commands after it"
START_UNITS = "each installed unit's ExecStart started with its EnvironmentFile"
RUN_CRON = "each installed cron entry's command run as cron would"

# (pattern of the command, how it is exercised: one of the four above, or "path::test")
HOW: list[tuple[str, str]] = [
    (r"python3 -m venv /opt/outbox/\.venv", RUN),
    (
        r"/opt/outbox/\.venv/bin/pip install 'outbox-relay\[postgres,metrics\]'",
        "tests/ops/test_ops_readme.py::test_the_extras_the_walkthrough_installs_exist",
    ),
    (r"export OUTBOX_DATABASE_URL=.*", EXPORT),
    (r"/opt/outbox/\.venv/bin/outbox migrate", RUN),
    (
        r"psql -v ON_ERROR_STOP=1 -d shop -f ops/sql/postgresql-grants\.sql",
        "tests/ops/test_grants.py::test_role_runs_its_part",
    ),
    (
        r"psql -v ON_ERROR_STOP=1 -d shop -c \"CREATE ROLE \w+ LOGIN INHERIT PASSWORD .*",
        "tests/ops/test_grants.py::test_every_role_has_a_login_that_inherits",
    ),
    (r"install -d -m 0750 /etc/outbox", RUN),
    (r"printf .* > /etc/outbox/env", RUN),
    (r"install -m 0644 ops/systemd/\S+ ops/systemd/\S+ /etc/systemd/system/", RUN),
    (r"systemctl daemon-reload", "tests/unit/test_ops_commands.py::test_ops_command_lines_parse"),
    (r"systemctl enable --now outbox-relay\.service outbox-worker@default\.service", START_UNITS),
    (r"/opt/outbox/\.venv/bin/outbox status", RUN),
    (r"curl -fsS http://127\.0\.0\.1:\d+/\w+", RUN),
    (r"install -D -m 0644 ops/prometheus/alerts\.yml /etc/prometheus/rules/outbox\.yml", RUN),
    (r"install -m 0755 ops/prometheus/textfile\.sh /opt/outbox/textfile\.sh", RUN),
    (
        r"promtool check rules /etc/prometheus/rules/outbox\.yml",
        "tests/ops/test_alerts.py::test_alert_rules_parse_and_name_only_exported_metrics",
    ),
    (r"install -m 0644 ops/cron/outbox-prune ops/cron/outbox-health /etc/cron\.d/", RUN_CRON),
]


def commands() -> list[str]:
    """Every command line of the README's ``sh`` blocks, in order."""
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    lines = [ln.strip() for block in blocks for ln in block.splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]


def how(command: str) -> str:
    found = [h for pattern, h in HOW if re.fullmatch(pattern, command)]
    assert len(found) == 1, f"ops/README.md command not covered exactly once: {command}"
    return found[0]


def test_every_command_in_the_walkthrough_is_exercised() -> None:
    cmds = commands()
    assert len(cmds) >= 15, cmds  # the walkthrough is there and was read
    for command in cmds:
        way = how(command)
        if "::" in way:
            path, name = way.split("::")
            tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
            tests = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
            assert name in tests, f"{command}: {way} does not exist"
    used = {h for c in cmds for p, h in HOW if re.fullmatch(p, c)}
    assert used == {h for _, h in HOW}, "a row of HOW matches no command any more"


def test_the_extras_the_walkthrough_installs_exist() -> None:
    """``pip install 'outbox-relay[postgres,metrics]'``: both extras exist, and the dev install
    every test runs in includes them (so everything below ran with what they bring)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert {"postgres", "metrics"} <= set(extras)
    assert any("postgres" in d and "metrics" in d for d in extras["dev"])


class Sandbox:
    """The walkthrough's host: its own /etc, /opt and /var, one database, free ports."""

    def __init__(self, root: Path, db_url: str) -> None:
        self.root = root
        for d in ("etc/systemd/system", "etc/cron.d", "opt", "var/log/outbox"):
            (root / d).mkdir(parents=True, exist_ok=True)
        u = make_url(db_url)
        self.urls = {
            "postgresql://outbox_migrate@db.internal/shop": db_url,
            "postgresql://relay_1:change-me@db.internal/shop": u.set(
                password="change-me"
            ).render_as_string(hide_password=False),
        }
        self.ports = {"9464": str(free_port()), "9465": str(free_port())}
        self.env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Any] = []

    def rewrite(self, text: str) -> str:
        for url, ours in self.urls.items():
            text = text.replace(url, ours)
        for port, ours in self.ports.items():
            text = text.replace(f":{port}", f":{ours}").replace(f" {port}", f" {ours}")
        text = text.replace("/opt/outbox/.venv/bin/", f"{VENV_BIN}/")
        text = text.replace("myapp.jobs:registry", "tests.ops.apps:registry")
        for top in ("/etc/", "/opt/", "/var/"):
            text = re.sub(rf"(?<![\w./]){top}", f"{self.root}{top}", text)
        return text

    def run(self, command: str, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            ["bash", "-c", self.rewrite(command)],
            cwd=ROOT,
            env=self.env if env is None else env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def export(self, command: str) -> None:
        name, _, value = command.removeprefix("export ").partition("=")
        self.env[name] = shlex.split(self.rewrite(value))[0]

    def start_units(self, command: str) -> None:
        for unit in command.split()[3:]:
            base = unit.replace("@default", "@")
            text = (self.root / "etc/systemd/system" / base).read_text()
            env = dict(self.env)
            (env_file,) = re.findall(r"^EnvironmentFile=(.*)$", text, re.M)
            for line in Path(self.rewrite(env_file)).read_text().splitlines():
                key, _, value = line.partition("=")
                env[key] = value
            (exec_start,) = re.findall(r"^ExecStart=(.*)$", text, re.M)
            line = exec_start.replace("%i", "default").replace("${OUTBOX_APP}", env["OUTBOX_APP"])
            argv = shlex.split(self.rewrite(line))
            log = open(self.root / "var/log/outbox" / f"{base}.log", "wb")  # noqa: SIM115
            self.logs.append(log)
            self.procs.append(
                subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            )
        for port in self.ports.values():
            _wait(lambda p=port: _status(p, "/readyz") == 200, f"/readyz on {port}")

    def run_cron(self, command: str) -> None:
        self.run(command)
        for name in ("outbox-prune", "outbox-health"):
            text = (self.root / "etc/cron.d" / name).read_text()
            (entry,) = [ln for ln in text.splitlines() if re.match(r"^[\d*]", ln)]
            job = entry.split(None, 6)[6]  # minute hour day month weekday user command
            # cron's environment: none of ours; the entry reads /etc/outbox/env itself
            clean = {k: v for k, v in self.env.items() if not k.startswith("OUTBOX_")}
            out = self.run(f"set -e; {job}", clean)
            assert "threshold crossed" not in out, out
        log = (self.root / "var/log/outbox/prune.log").read_text()
        assert "pruned" in log, log

    def stop(self) -> list[int]:
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        try:
            return [p.wait(timeout=60) for p in self.procs]
        finally:
            for log in self.logs:
                log.close()


def _status(port: str, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


def _wait(check: Callable[[], bool], what: str) -> None:
    for _ in range(600):
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


@pytest.mark.slow
def test_the_walkthrough_deploys_a_relay_and_a_worker(db_url: str, tmp_path: Path) -> None:
    skip_unless(backend_of(db_url), "postgresql", gap=Gap.TRUSTED_LOGIN)
    box = Sandbox(tmp_path / "host", db_url)
    ways: dict[str, Callable[[str], object]] = {
        RUN: box.run,
        EXPORT: box.export,
        START_UNITS: box.start_units,
        RUN_CRON: box.run_cron,
    }
    ran = []
    try:
        for command in commands():
            way = how(command)
            if way in ways:
                ways[way](command)
                ran.append(command)
    finally:
        codes = box.stop()
    assert codes == [0] * len(codes) == [0, 0], codes  # both units stopped cleanly on SIGTERM
    assert any(c.startswith("curl") and c.endswith("/metrics") for c in ran)
    with Database(db_url).connect() as conn:
        assert conn.execute_sql("SELECT count(*) FROM outbox_schema_version")[0][0] >= 1
    assert (box.root / "etc/prometheus/rules/outbox.yml").exists()
