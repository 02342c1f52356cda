"""workflow: a 1,000-node fan-out/fan-in, and the latency from a dependency's ack to its
dependent's start.

The graph is one root, 998 nodes after it, one join after all of them, recorded with
``record(conn, key, Workflow(...))``; the relay hands the root off and two worker
processes (``outbox worker``, concurrency 8 each, the machine has 2 cores) run it. Wall
time runs from the recording's commit to the join's acknowledgement. Dependents are made
due in their dependency's acknowledgement transaction, so no sweep interval adds to it.

Latency: each node's start (the handler's first act, ``bench.w_workflow``) minus the
acknowledgement of its last dependency (``finished_at``, the database's clock in the
ack's transaction; same machine). In the fan-out the 998 middle nodes start in queue
order behind one another, so their figure is mostly waiting for a free slot; the clean
figure is a chain of 50 nodes (each one after the previous), which the ``chain`` rows
report, and the join's own latency (the fan-in: its last dependency's ack to its start).

Recording (issue 41): ``record(conn, key, Workflow(...))`` of a fan-out/fan-in of 1,000
nodes (1,997 edges) in one transaction, beside ``record_many`` of 1,000 intents in one
transaction, same connection kind, same backend, interleaved: target <= 2x. The same at
10,000 nodes against 10,000 intents (ten ``record_many`` calls, one transaction): the
figure that decides whether the node limit (``outbox.workflows.MAX_NODES``) can rise. A
sample is the median of ``TXNS`` transactions; the graph and the items are built before
the clock starts (both calls validate and normalise inside it).

Show at 1M rows: the tables seeded as the plan checks seed them
(``outbox.db.plans.seed``, 1,000,000 intents, jobs and workflow nodes), then one real
1,000-node workflow recorded, relayed and shown: ``outbox.workflows.get`` in-process, and
``outbox workflow show ID`` as a user runs it (a new interpreter: its start-up and import
included). Target: the command under 1 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import servers
from bench.plan import Ctx, Plan
from bench.procs import ROOT
from bench.w_workflow import NODE

NAME = "workflow"
WORKERS = 2
CONCURRENCY = 8
TXNS = 5
SHOW_ROWS = 1_000_000


def _workers(url: str, sink: Path) -> list[subprocess.Popen[bytes]]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), BENCH_WORKFLOW_FILE=str(sink))
    argv = [sys.executable, "-m", "outbox", "--database-url", url, "--log-level", "warning",
            "worker", "default", "--app", "bench.w_workflow:APP",
            "--concurrency", str(CONCURRENCY), "--sleep", "0.05"]
    return [subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL) for _ in range(WORKERS)]


def _build(kind: str, size: int) -> Any:
    from outbox import Job, Workflow

    wf = Workflow(f"bench:{kind}")
    if kind == "fan":
        root = wf.add(Job(NODE, {"n": "root"}), name="root")
        middle = [wf.add(Job(NODE, {"n": f"m{i}"}), name=f"m{i}", after=[root])
                  for i in range(size - 2)]
        wf.add(Job(NODE, {"n": "join"}), name="join", after=middle)
    else:
        prev = wf.add(Job(NODE, {"n": "c0"}), name="c0")
        for i in range(1, size):
            prev = wf.add(Job(NODE, {"n": f"c{i}"}), name=f"c{i}", after=[prev])
    return wf


def _record_ms(url: str, nodes: int) -> dict[str, float]:
    """Median ms of ``TXNS`` transactions each recording a fan workflow of ``nodes``
    nodes, and of as many each recording ``nodes`` intents with ``record_many``."""
    import statistics

    from outbox import Job, record, record_many
    from outbox.db.connection import Database
    from outbox.workflows import graph

    graph.MAX_NODES = max(graph.MAX_NODES, nodes)  # 10,000: measured before it is allowed
    tag = next(_TAG)
    flows = [_build("fan", nodes) for _ in range(TXNS)]
    batches = [[(f"bench:many:{tag}:{t}:{i}", Job(NODE, {"n": f"m{i}"})) for i in range(nodes)]
               for t in range(TXNS)]
    wf_ms, many_ms = [], []
    with Database(url).connect() as c:
        for t in range(TXNS):
            began = time.perf_counter()
            c.transact(lambda x, t=t: record(x.raw, f"bench:wf:{tag}:{t}", flows[t]),
                       operation="bench")
            wf_ms.append((time.perf_counter() - began) * 1000)
            items = batches[t]
            began = time.perf_counter()
            c.transact(lambda x, items=items: [record_many(x.raw, items[i:i + 1_000])
                                               for i in range(0, len(items), 1_000)],
                       operation="bench")
            many_ms.append((time.perf_counter() - began) * 1000)
    return {"workflow": statistics.median(wf_ms), "record_many": statistics.median(many_ms)}


_TAG = iter(range(1, 1_000_000))


class _Shown:
    """A database seeded with ``SHOW_ROWS`` rows per big table (``outbox.db.plans.seed``)
    and two real workflows recorded and relayed in it, of 1,000 and 10,000 nodes: made
    at the first sample (the warm-up), shown by every sample."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.url = ""
        self.ids: dict[int, str] = {}
        self.off_index = 0.0

    def ready(self) -> tuple[str, dict[int, str]]:
        if not self.ids:
            from outbox import Relay, record
            from outbox.db import plans
            from outbox.db.connection import Database
            from outbox.db.migrate import migrate
            from outbox.workflows import graph

            graph.MAX_NODES = max(graph.MAX_NODES, 10_000)
            self.url = servers.fresh(self.backend, "outbox_bench_workflow_show")
            with Database(self.url).connect() as c:
                migrate(c)
                plans.seed(c, SHOW_ROWS)
                for n in (1_000, 10_000):
                    wf = _build("fan", n)
                    self.ids[n] = c.transact(lambda t, wf=wf, n=n: record(t.raw, f"show:{n}", wf),
                                             operation="bench")
            with Relay(Database(self.url)) as relay:
                relay.run_once()
            with Database(self.url).connect() as c:
                self.off_index = _plans_off_index(c)
        return self.url, self.ids


def _plans_off_index(conn: Any) -> float:
    """How many of the workflow statements of ``outbox.db.plans.HOT`` leave their index
    at this size (the plan check of tests/integration/test_hot_plans.py, at 1M rows);
    each miss is printed."""
    from outbox.db import plans

    misses = 0
    for hot in plans.HOT:
        if hot.statement.startswith("workflow_") and conn.dialect.name in hot.dialects:
            why = plans.check(plans.explain(conn, hot.statement, hot.params), hot,
                              conn.dialect.name)
            if why is not None:
                print(f"  plan at {SHOW_ROWS:,} rows: {hot.statement} on {hot.table}: {why}")
                misses += 1
    return float(misses)


def _show(shown: _Shown) -> dict[str, float]:
    """``get()`` in this process, then ``outbox workflow show ID`` in a new one (ms), for
    the 1,000-node workflow and (``_10k``) the 10,000-node one; beside them
    ``outbox --help``, the part of the command no database is in (on a loaded 2-core
    machine, seconds of waiting for a core)."""
    from outbox.db.connection import Database
    from outbox.workflows import get

    url, ids = shown.ready()
    began = time.perf_counter()  # the floor: a new interpreter, outbox's CLI imported
    subprocess.run([sys.executable, "-m", "outbox", "--help"], cwd=ROOT, capture_output=True,
                   check=True)
    out: dict[str, float] = {"cli_help_ms": (time.perf_counter() - began) * 1000,
                             "plans_off_index": shown.off_index}
    for n, wf_id in ids.items():
        suffix = "" if n == 1_000 else "_10k"
        began = time.perf_counter()
        found = get(Database(url), wf_id)
        out["get_ms" + suffix] = (time.perf_counter() - began) * 1000
        assert found is not None and len(found.nodes) == n
        argv = [sys.executable, "-m", "outbox", "--database-url", url, "workflow", "show", wf_id]
        began = time.perf_counter()
        printed = subprocess.run(argv, cwd=ROOT, capture_output=True, check=True, text=True)
        out["cli_ms" + suffix] = (time.perf_counter() - began) * 1000
        assert printed.stdout.count("\n") >= n + 1, printed.stdout[:200]
    return out


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _run(url: str, kind: str, size: int, seq: int) -> dict[str, float]:
    from outbox import Relay, record
    from outbox.db.connection import Database
    from outbox.workflows import get

    database = Database(url)
    with tempfile.TemporaryDirectory() as tmp:
        sink = Path(tmp) / "starts.log"
        sink.touch()
        procs = _workers(url, sink)
        try:
            time.sleep(1.0)  # the workers are up and idle: their start is not measured
            wf = _build(kind, size)
            began = time.time()
            with database.connect() as c:
                wf_id = c.transact(lambda t: record(t.raw, f"bench:{kind}:{seq}", wf),
                                   operation="bench")
            with Relay(database) as relay:
                relay.run_once()
            deadline = time.monotonic() + 600
            shown = get(database, wf_id)
            while shown is not None and shown.state == "running":
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the {kind} workflow did not finish in 600 s")
                time.sleep(0.05)
                shown = get(database, wf_id)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(30)
        assert shown is not None and shown.state == "succeeded", shown and shown.state
        starts = {}
        for line in sink.read_text().splitlines():
            name, at = line.split()
            starts[name] = float(at)
    acked = {n.name: n.finished_at.timestamp() for n in shown.nodes if n.finished_at}
    lat = {n.name: (starts[n.name] - max(acked[d] for d in n.after)) * 1000
           for n in shown.nodes if n.after}
    last = max(acked.values())
    out = {"wall_s": last - began}
    values = list(lat.values())
    out["p50_ms"], out["p99_ms"] = _pct(values, 0.5), _pct(values, 0.99)
    if kind == "fan":
        out["join_ms"] = lat["join"]
    return out


def main() -> None:
    """``python -m bench.s_workflow BACKEND``: one smoke run of both graphs, printed."""
    backend = sys.argv[1] if len(sys.argv) > 1 else "sqlite"
    url = servers.fresh(backend, "outbox_bench_workflow")
    from outbox.db.connection import Database
    from outbox.db.migrate import migrate

    with Database(url).connect() as c:
        migrate(c)
    try:
        fan = _run(url, "fan", 1_000, 1)
        chain = _run(url, "chain", 50, 2)
    finally:
        servers.drop_all()
    print(f"{backend}: 1,000-node fan-out/fan-in: wall {fan['wall_s']:.2f} s, "
          f"join (fan-in) ack->start {fan['join_ms']:.1f} ms, all nodes ack->start "
          f"p50 {fan['p50_ms']:.1f} ms p99 {fan['p99_ms']:.1f} ms; chain of 50: "
          f"ack->start p50 {chain['p50_ms']:.1f} ms p99 {chain['p99_ms']:.1f} ms, "
          f"wall {chain['wall_s']:.2f} s ({WORKERS} workers x concurrency {CONCURRENCY})")


def plan(ctx: Ctx) -> Plan:
    from bench.core import Case, Target

    url = servers.fresh(ctx.backend, "outbox_bench_workflow")
    from outbox.db.connection import Database
    from outbox.db.migrate import migrate

    with Database(url).connect() as c:
        migrate(c)
    seq = iter(range(1, 1_000_000))

    def fan() -> dict[str, float]:
        return _run(url, "fan", 1_000, next(seq))

    def chain() -> dict[str, float]:
        r = _run(url, "chain", 50, next(seq))
        return {"p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"]}

    ms = ("ms", False)
    shown = _Shown(ctx.backend)
    # Recording leaves thousands of intents behind: a database of its own, or the fan
    # case's relay (one batch) would not reach its root.
    rec_url = servers.fresh(ctx.backend, "outbox_bench_workflow_record")
    with Database(rec_url).connect() as c:
        migrate(c)
    cases = [
        Case("record in one txn, 1,000 nodes/intents", lambda: _record_ms(rec_url, 1_000),
             unit="ms", higher_is_better=False),
        Case("record in one txn, 10,000 nodes/intents", lambda: _record_ms(rec_url, 10_000),
             unit="ms", higher_is_better=False),
        Case(f"show (1,000 nodes; _10k: 10,000), {SHOW_ROWS:,} rows a table", lambda: _show(shown),
             unit="ms", higher_is_better=False, metrics={"plans_off_index": ("statements", False)}),
        Case("1,000-node fan-out/fan-in", fan, unit="s", higher_is_better=False,
             metrics={"p50_ms": ms, "p99_ms": ms, "join_ms": ms}),
        Case("chain of 50: dependency ack -> dependent start", chain, unit="ms",
             higher_is_better=False, metrics={"p50_ms": ms, "p99_ms": ms}),
    ]
    p = Plan(cases=cases)
    for n in ("1,000", "10,000"):
        row = f"{NAME}: record in one txn, {n} nodes/intents"
        p.targets.append(Target(f"record: workflow of {n} nodes <= 2x record_many of {n}",
                                f"{row} workflow", [f"{row} record_many"], "<=", 2.0))
    shown_row = f"{NAME}: show (1,000 nodes; _10k: 10,000), {SHOW_ROWS:,} rows a table"
    p.targets.append(Target("workflow statements off their index at 1M rows: 0",
                            f"{shown_row} plans_off_index", None, "<=", 0.0))
    for suffix, n in (("", "1,000"), ("_10k", "10,000")):
        p.targets.append(Target(f"outbox workflow show, {n} nodes, 1M rows: < 1,000 ms",
                                f"{shown_row} cli_ms{suffix}", None, "<=", 1_000.0))
    p.notes.append(f"workflow: {WORKERS} worker processes x concurrency {CONCURRENCY}, "
                   f"{ctx.backend}; latency = node start - its last dependency's ack")
    p.rounds = min(ctx.rounds, 3)
    return p


if __name__ == "__main__":
    main()
