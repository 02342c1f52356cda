"""Workflows with real worker processes racing, on every backend: a diamond and a
100-wide fan-out/fan-in run by three workers at once, a failing middle node with and
without on_failure="run", a retry of the failed node, and a worker SIGKILLed mid-node.

The ledger (``tests.reliability.workflow_app``) proves that no node started before its
dependencies succeeded (each start checks its dependencies' results, and starts after
the end of each dependency's last run), and that every node ran at most once per
attempt."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from outbox import Job, Relay, Workflow, record
from outbox.db.connection import Database
from outbox.queue.admin import retry
from outbox.workflows import WorkflowState, get
from tests.fixtures.databases import backend_of
from tests.fixtures.fault_harness import WORKER_READY
from tests.fixtures.processes import wait_until
from tests.fixtures.workers import ROOT
from tests.reliability import rows

APP = "tests.reliability.workflow_app:registry"


def _worker(url: str, ledger: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "WF_LEDGER": str(ledger), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "outbox", "--database-url", url, "--log-format", "json",
            "worker", "default", "--app", APP, "--sleep", "0.05", *args]
    return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_started(proc: subprocess.Popen[str]) -> None:
    """Read the worker's log until it says it started (its first claim comes next)."""
    assert proc.stderr is not None
    for line in proc.stderr:
        if WORKER_READY in line:
            return
    raise AssertionError(f"the worker exited before it started (exit {proc.wait()})")


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()


def _node(wf: Workflow, name: str, after: list[Any], **extra: Any) -> Any:
    names = [a.name for a in after]
    payload = {"name": name, "after": names, **extra}
    return wf.add(Job("wf.node", payload), name=name, after=after,
                  on_failure="run" if extra.get("cleanup") else "stop")


def _record(database: Database, key: str, wf: Workflow) -> str:
    with database.connect() as c:
        wf_id: str = c.transact(lambda t: record(t.raw, key, wf), operation="test")
    with Relay(database) as relay:
        relay.run_once()
    return wf_id


def _finished(database: Database, wf_id: str) -> WorkflowState | None:
    shown = get(database, wf_id)
    if shown is None or shown.state == "running":
        return None
    return shown


def _ledger(folder: Path) -> list[tuple[str, str, int, float, str]]:
    out = []
    for f in folder.glob("*.log"):
        for line in f.read_text(encoding="utf-8").splitlines():
            event, name, attempt, at, verdict = line.split()
            out.append((event, name, int(attempt), float(at), verdict))
    return out


def _check(ledger: list[tuple[str, str, int, float, str]], wf: Workflow) -> None:
    """No node started early; at most one start per (node, attempt); each start after
    the end of every dependency's successful run."""
    assert [row for row in ledger if row[4] != "ok"] == []
    starts = Counter((n, a) for e, n, a, _, _ in ledger if e == "start")
    assert [k for k, c in starts.items() if c > 1] == []
    ended = {n: t for e, n, _, t, _ in ledger if e == "end"}
    mine = set(wf.nodes)
    for e, name, _, at, _ in ledger:
        if e != "start" or name not in mine:
            continue
        for dep in wf.dependencies(name):
            if dep in ended:
                assert at > ended[dep], (name, dep)


def test_a_diamond_and_a_hundred_wide_fan_in_race_across_three_workers(
    database: Database, db_url: str, tmp_path: Path
) -> None:
    wf = Workflow("race")
    a = _node(wf, "a", [])
    b, c = _node(wf, "b", [a]), _node(wf, "c", [a])
    d = _node(wf, "d", [b, c])
    middle = [_node(wf, f"m{i}", [d]) for i in range(100)]
    _node(wf, "join", middle)
    wf_id = _record(database, "race:1", wf)
    workers = [_worker(db_url, tmp_path, "--concurrency", "4") for _ in range(3)]
    try:
        shown = None
        wait_until(lambda: _finished(database, wf_id), 180, "the workflow to finish")
        shown = _finished(database, wf_id)
    finally:
        _stop(workers)
    assert shown is not None and shown.state == "succeeded", shown
    ledger = _ledger(tmp_path)
    _check(ledger, wf)
    starts = Counter(n for e, n, _, _, _ in ledger if e == "start")
    assert set(starts) == set(wf.nodes) and set(starts.values()) == {1}
    assert len({n.node_id for n in shown.nodes}) == 105


def test_a_failing_middle_node_with_and_without_clean_up_then_its_retry(
    database: Database, db_url: str, tmp_path: Path
) -> None:
    wf = Workflow("fails")
    a = _node(wf, "a", [])
    bad = _node(wf, "bad", [a], fail=True)
    after_bad = _node(wf, "after", [bad])
    _node(wf, "last", [after_bad])
    _node(wf, "clean", [a, bad], cleanup=True)
    wf_id = _record(database, "fails:1", wf)
    workers = [_worker(db_url, tmp_path, "--concurrency", "2") for _ in range(2)]
    try:
        wait_until(lambda: _finished(database, wf_id), 180, "the workflow to finish")
        shown = _finished(database, wf_id)
        assert shown is not None
        assert {n.name: n.state for n in shown.nodes} == {
            "a": "succeeded", "bad": "dead", "after": "skipped", "last": "skipped",
            "clean": "succeeded"}
        assert shown.node("bad").attempts == 3
        ledger = _ledger(tmp_path)
        _check(ledger, wf)
        assert {n for e, n, *_ in ledger if e == "start"} == {"a", "bad", "clean"}
        first = tmp_path / "first"
        first.mkdir()
        for f in tmp_path.glob("*.log"):  # the workers reopen their file for each line
            f.rename(first / f.name)
        # The retry puts the failed branch back in play: it fails again, the branch is
        # skipped again, and nothing of it ran in between.
        with database.connect() as conn:
            assert retry(conn, shown.node("bad").node_id) == 1
        again = get(database, wf_id)
        assert again is not None
        assert {n.name: n.state for n in again.nodes if n.name in ("after", "last")} == {
            "after": "waiting", "last": "waiting"}
        wait_until(lambda: _finished(database, wf_id), 180, "the retried branch to fail")
    finally:
        _stop(workers)
    ledger = _ledger(tmp_path)
    _check(ledger, wf)
    bad_starts = Counter(a for e, n, a, _, _ in ledger if e == "start" and n == "bad")
    assert bad_starts == Counter({1: 1, 2: 1, 3: 1})  # once per attempt, attempts reset
    assert {n for e, n, *_ in ledger if e == "start"} == {"bad"}


def test_a_worker_sigkilled_mid_node_loses_nothing_and_runs_no_dependent_early(
    database: Database, db_url: str, tmp_path: Path
) -> None:
    wf = Workflow("killed")
    a = _node(wf, "a", [])
    slow = _node(wf, "slow", [a], sleep_first=30)
    quick = _node(wf, "quick", [a])
    _node(wf, "join", [slow, quick])
    wf_id = _record(database, "killed:1", wf)
    victim = _worker(db_url, tmp_path, "--concurrency", "4", "--lease", "1")
    others: list[subprocess.Popen[str]] = []
    try:
        wait_until(lambda: any(e == "start" and n == "slow" for e, n, *_ in _ledger(tmp_path)),
                   60, "the slow node to start")
        victim.send_signal(signal.SIGKILL)
        victim.communicate(timeout=30)
        time.sleep(0.2)
        shown = get(database, wf_id)
        assert shown is not None and shown.node("join").state == "waiting"
        others = [_worker(db_url, tmp_path, "--concurrency", "2", "--lease", "1")
                  for _ in range(2)]
        wait_until(lambda: _finished(database, wf_id), 120, "the workflow to finish")
        shown = _finished(database, wf_id)
    finally:
        _stop([victim, *others])
    assert shown is not None and shown.state == "succeeded"
    ledger = _ledger(tmp_path)
    _check(ledger, wf)
    slow_runs = sorted((e, a) for e, n, a, _, _ in ledger if n == "slow")
    assert slow_runs == [("end", 2), ("start", 1), ("start", 2)]  # attempt 1 died in its sleep
    join_start = next(t for e, n, _, t, _ in ledger if e == "start" and n == "join")
    slow_end = next(t for e, n, _, t, _ in ledger if e == "end" and n == "slow")
    assert join_start > slow_end
    assert shown.node("slow").attempts == 2
    rows.report(
        rows.Row(
            fault="SIGKILL a worker mid-node, workflow (1x)",
            backend=backend_of(db_url),
            traffic="a 4-node workflow (a → slow, quick → join); 1 worker killed, 2 more",
            jobs=4,  # nodes
            faults=1,
            lost=0,
            double_handoffs=None,
            extra_executions=sum(e == "start" for e, _ in slow_runs) - 1,  # the killed attempt
            extra_bound=1,
            figures={"nodes started before their dependencies": 0},
        )
    )


def test_parents_acknowledged_at_the_same_instant_make_their_join_due_exactly_once(
    database: Database, db_url: str, tmp_path: Path
) -> None:
    """Twelve parents per join, held by three workers, return at one instant: their
    acknowledgements race on the join's row; each join starts once, none is stranded."""
    workers = [_worker(db_url, tmp_path, "--concurrency", "4") for _ in range(3)]
    graphs: dict[str, Workflow] = {}
    try:
        for w in workers:  # every worker is up and claiming (a fixed sleep lost to load)
            _wait_started(w)
        for round_ in range(4):
            wf = Workflow(f"instant-{round_}")
            until = time.time() + 2.0
            parents = [_node(wf, f"r{round_}p{i}", [], until=until) for i in range(12)]
            _node(wf, f"r{round_}join", parents)
            graphs[_record(database, f"instant:{round_}", wf)] = wf
        for wf_id in graphs:
            wait_until(lambda w=wf_id: _finished(database, w), 120, "every join to run")
    finally:
        _stop(workers)
    ledger = _ledger(tmp_path)
    for wf in graphs.values():
        _check(ledger, wf)
    joins = sorted(n for e, n, *_ in ledger if e == "start" and n.endswith("join"))
    assert joins == [f"r{r}join" for r in range(4)]  # one per workflow: never two, never none
    pids = {f.stem for f in tmp_path.glob("*.log")}
    assert len(pids) >= 2  # the parents really ran in several processes
    for wf_id in graphs:
        shown = get(database, wf_id)
        assert shown is not None and shown.state == "succeeded"
