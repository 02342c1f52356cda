"""Throwaway ``nats-server -js`` processes for the NATS tests: one server, or a cluster
of three with routes between them, each on free loopback ports with a store directory
of its own. Tests may kill, stop and restart them; the shared server on :4222 is never
touched. They start once per test session (``tests/nats/conftest.py``).
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import nats

from tests.fixtures.ports import answers, free_port
from tests.fixtures.processes import wait_until

T = TypeVar("T")
BINARY = shutil.which("nats-server") or "/usr/sbin/nats-server"



class NatsServer:
    """One server; ``routes`` (other nodes' cluster URLs) makes it a cluster member."""

    def __init__(self, store: Path, name: str = "n0", cluster: str | None = None) -> None:
        self.store, self.name = store, name
        self.port = free_port()
        self.cluster_port = free_port() if cluster else None
        self.cluster = cluster
        self.routes: list[str] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = store / f"{name}.log"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def route(self) -> str:
        return f"nats://127.0.0.1:{self.cluster_port}"

    def start(self) -> None:
        argv = [
            BINARY,
            "-js",
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-sd",
            str(self.store / self.name),
            "-n",
            self.name,
            "-l",
            str(self.log),
        ]
        if self.cluster:
            argv += [
                "--cluster_name",
                self.cluster,
                "--cluster",
                self.route,
                "--routes",
                ",".join(self.routes),
            ]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: answers(self.port), 30, f"nats-server {self.name} to listen")

    def kill(self) -> None:
        """SIGKILL: the node vanishes as in a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()


class NatsCluster:
    """Three JetStream servers with routes to each other (a shared cluster name)."""

    def __init__(self, store: Path, size: int = 3) -> None:
        self.nodes = [NatsServer(store, f"c{i}", cluster="outbox-test") for i in range(size)]
        for node in self.nodes:
            node.routes = [n.route for n in self.nodes if n is not node]

    @property
    def url(self) -> str:
        return "nats://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def start(self) -> None:
        try:
            for node in self.nodes:
                node.start()
            wait_until(self._has_meta_leader, 60, "the cluster to elect a JetStream leader")
        except BaseException:
            self.stop()
            raise

    def _has_meta_leader(self) -> bool:
        async def probe() -> bool:
            nc = await nats.connect(
                _servers(self.url),
                connect_timeout=1,
                max_reconnect_attempts=0,
                error_cb=_silent,
                allow_reconnect=False,
            )
            try:
                info = await nc.jetstream().account_info()
                return info is not None
            except Exception:
                return False
            finally:
                await nc.close()

        try:
            return in_thread(probe)
        except Exception:
            return False

    def node_named(self, name: str) -> NatsServer:
        return next(n for n in self.nodes if n.name == name)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def _servers(url: str) -> list[str]:
    """``nats://a:1,b:2`` → ``["nats://a:1", "nats://b:2"]`` (nats-py takes a list)."""
    return [f"nats://{h}" for h in url.removeprefix("nats://").split(",")]


async def _silent(exc: Exception) -> None:
    return None


def run(url: str, fn: Callable[[Any], Awaitable[T]]) -> T:
    """Run ``fn(js)`` against ``url`` on a fresh connection (the tests' own probes)."""

    async def go() -> T:
        nc = await nats.connect(
            _servers(url), connect_timeout=2, max_reconnect_attempts=2, error_cb=_silent
        )
        try:
            return await fn(nc.jetstream())
        finally:
            await nc.close()

    return in_thread(go)


def in_thread(fn: Callable[[], Awaitable[T]]) -> T:
    """``asyncio.run(fn())`` on a thread of its own: a test that ran earlier in the same
    session may have left an event loop marked running on the main thread."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(_coro(fn))).result()


async def _coro(fn: Callable[[], Awaitable[T]]) -> T:
    return await fn()
