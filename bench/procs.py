"""The parent side: start measured children, release them together, merge their windows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 300.0


@dataclass
class Spec:
    """One child: ``target`` is ``module:func`` run by ``bench.child`` with ``kwargs``."""

    target: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    python: str = sys.executable


@dataclass
class Outcome:
    elapsed_s: float
    results: list[dict[str, Any]]

    def total(self, key: str = "count") -> float:
        return float(sum(r.get(key, 0) for r in self.results))


class ChildFailed(RuntimeError):
    pass


def _start(spec: Spec) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [spec.python, "-m", "bench.child", spec.target, json.dumps(spec.kwargs)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )


def _await_ready(proc: subprocess.Popen[str], spec: Spec) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.strip() == "READY":
            return
        if not line and proc.poll() is not None:
            break
    _fail(proc, spec, "never became ready")


def _fail(proc: subprocess.Popen[str], spec: Spec, what: str) -> None:
    proc.kill()
    _, err = proc.communicate()
    tail = "\n".join((err or "").strip().splitlines()[-15:])
    raise ChildFailed(f"{spec.target} {what}:\n{tail}")


def run(specs: list[Spec], timeout_s: float = 900.0) -> Outcome:
    """Start every child, wait until all are prepared, send GO to all, collect results."""
    procs = [_start(s) for s in specs]
    try:
        for p, s in zip(procs, specs, strict=True):
            _await_ready(p, s)
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        results = [_collect(p, s, timeout_s) for p, s in zip(procs, specs, strict=True)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    t0 = min(r["t0"] for r in results)
    t1 = max(r["t1"] for r in results)
    return Outcome(elapsed_s=t1 - t0, results=results)


def _collect(proc: subprocess.Popen[str], spec: Spec, timeout_s: float) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _fail(proc, spec, f"ran longer than {timeout_s:.0f} s")
        raise
    for line in reversed(out.splitlines()):
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    tail = "\n".join(err.strip().splitlines()[-15:])
    raise ChildFailed(f"{spec.target} exited {proc.returncode} without a result:\n{tail}")


def run_one(target: str, python: str = sys.executable, **kwargs: Any) -> Outcome:
    return run([Spec(target, kwargs, python)])
