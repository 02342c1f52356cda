"""A throwaway PostgreSQL 15 cluster on a free loopback port, for restart tests.

Restarting the shared server on 5432 would break every other test running on the
machine, so the restart tests get a cluster of their own: ``initdb`` into a temporary
directory, ``pg_ctl start`` on a free port, ``pg_ctl restart`` when a test asks, and
``pg_ctl stop`` in teardown however the test ended. PostgreSQL refuses to run as root,
so as root every command runs as the ``postgres`` OS user in a directory it owns.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.fixtures.ports import free_port

BIN = Path(os.environ.get("OUTBOX_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
OS_USER = "postgres"


def available() -> bool:
    """True when the PostgreSQL binaries exist (and, as root, the ``postgres`` user)."""
    if not (BIN / "initdb").exists() or not (BIN / "pg_ctl").exists():
        return False
    if os.geteuid() != 0:
        return True
    try:
        pwd.getpwnam(OS_USER)
    except KeyError:
        return False
    return True



class PgCluster:
    """One private cluster: ``start()``, ``restart()``, ``stop()``, ``url()``."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="outbox-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()
        if os.geteuid() == 0:
            info = pwd.getpwnam(OS_USER)
            os.chown(self.root, info.pw_uid, info.pw_gid)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def _run(self, tool: str, *args: str) -> None:
        argv = [str(BIN / tool), *args]
        if os.geteuid() == 0:
            argv = ["runuser", "-u", OS_USER, "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr.strip()}")

    def _options(self) -> str:
        # fsync off: the data is thrown away; the restart semantics do not depend on it.
        return (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c full_page_writes=off -c max_connections=60"
        )

    def start(self) -> None:
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            "60",
            "-o",
            self._options(),
            "start",
        )

    def restart(self, mode: str = "fast") -> None:
        """Stop (``fast`` ends sessions cleanly, ``immediate`` is a crash) and start again."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")
        self.start()

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "60", "stop")

    def destroy(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"
