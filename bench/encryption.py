"""Encryption at rest and typed jobs, each against its comparator in the same run.

    python -m bench.encryption [--backend sqlite|postgresql] [--jobs 2000]
        [--drain-jobs 20000] [--rounds 7] [--folder DIR]

Three sides, each sample a fresh process (``bench/w_encryption.py``) on tables emptied
first, in interleaved rounds whose order rotates (a warm-up round is not counted):

- ``off``: this tree, no keyring (encryption off);
- ``on``: this tree, a keyring of one key (every payload sealed on record, opened per job);
- ``base``: this tree's ``outbox`` copied, with the typed-jobs commit's hook in
  ``outbox/job.py`` and ``outbox/queue/execute.py`` taken out again (``git apply -R`` of
  that commit's diff of those files), no keyring. ``off`` against ``base`` is what the
  typed-jobs code costs an untyped job; nothing else differs between the two.

``normalise()`` of an untyped job alone (best of 7 repeats, no database): where the
typed-jobs hook sits, so ``off`` against ``base`` there is its cost without SQL's noise.
Two measures end to end: ``record()`` in its own transaction (µs a transaction, BEGIN ... COMMIT on
a DB-API connection), and one worker with default settings draining pushed no-op jobs
(jobs/s); each also as the process's CPU µs a transaction / a job (``*_cpu``), steadier
than wall time on a loaded machine. Ratios are of medians; the spread is the min..max of
the per-round ratios.
Targets (issue 42): record txn on/off <= 1.05, drain on/off >= 0.90; off/base within
+-3% on both. On SQLite each side is a database file in ``--folder`` (default: the temp
folder); the header names the folder and its file system, since a tmpfs there (no disk
writes, no fsync) measures a different case from a file on disk.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import servers

ROOT = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).with_name("w_encryption.py")
TYPED_COMMIT = "3a51e74"  # "Typed jobs (outbox/typed.py) ...": the hook's only commit
HOOK_FILES = ("outbox/job.py", "outbox/queue/execute.py")  # their paths in that commit
# Moved since (outbox/job/ became a package): the diff is rewritten to today's names.
MOVED = {
    "a/outbox/job.py": "a/outbox/job/__init__.py",
    "b/outbox/job.py": "b/outbox/job/__init__.py",
    "outbox.typed": "outbox.job.typed",
    "outbox.sealing": "outbox.job.sealing",
}
SIDES = ("off", "on", "base")
MEASURES = ("record", "drain", "normalise")
UNITS = {
    "record": "us/txn",
    "drain": "jobs/s",
    "normalise": "us/call",
    "record_cpu": "cpu us/txn",
    "drain_cpu": "cpu us/job",
}
TARGETS = {  # (measure, numerator, denominator, bound, higher_is_better)
    "record txn, on/off": ("record", "on", "off", 1.05, False),
    "drain, on/off": ("drain", "on", "off", 0.90, True),
    "record txn, off/base": ("record", "off", "base", 1.03, False),
    "drain, off/base": ("drain", "off", "base", 0.97, True),
    # CPU per unit of work: lower is better; drain's bound is the jobs/s bound inverted
    "record cpu, on/off": ("record_cpu", "on", "off", 1.05, False),
    "drain cpu/job, on/off": ("drain_cpu", "on", "off", 1 / 0.90, False),
    "record cpu, off/base": ("record_cpu", "off", "base", 1.03, False),
    "drain cpu/job, off/base": ("drain_cpu", "off", "base", 1.03, False),
    # normalise() alone, best of 7 repeats: where the hook is, without SQL's noise
    "normalise, off/base": ("normalise", "off", "base", 1.03, False),
}


def base_tree(folder: Path) -> Path:
    """This tree's ``outbox`` with the typed-jobs hook reverted, under ``folder``."""
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "outbox", folder / "outbox", ignore=skip)
    diff = subprocess.run(
        ["git", "-C", str(ROOT), "show", "--format=", TYPED_COMMIT, "--", *HOOK_FILES],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    for was, now in MOVED.items():
        diff = diff.replace(was, now)
    subprocess.run(["git", "apply", "-R"], cwd=folder, input=diff, text=True, check=True)
    return folder


def _sample(
    measure: str, side: str, url: str, jobs: int, tag: str, base: Path
) -> tuple[float, float]:
    tree = base if side == "base" else ROOT
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": ""}
    env.pop("OUTBOX_ENCRYPTION_KEYS", None)
    env.pop("OUTBOX_ENCRYPTION_KEYRING", None)
    child = "off" if side == "base" else side
    out = subprocess.run(
        [sys.executable, str(CHILD), measure, child, url, str(jobs), tag],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if out.returncode != 0:
        raise SystemExit(f"{measure}/{side} failed:\n{out.stdout}{out.stderr}")
    wall, cpu = out.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def _databases(backend: str, folder: Path) -> dict[str, str]:
    """One migrated database per side (SQLite: a file in ``folder``)."""
    from outbox.db.connection import Database
    from outbox.db.migrate import migrate

    urls = {}
    for side in SIDES:
        if backend == "sqlite":
            url = f"sqlite:///{folder / side}.db"
        else:
            url = servers.fresh("postgresql", f"bench_enc_{side}")
        with Database(url).connect() as c:
            migrate(c)
        urls[side] = url
    return urls


def run(
    backend: str, jobs: dict[str, int], rounds: int, folder: str | None
) -> dict[str, dict[str, list[float]]]:
    samples: dict[str, dict[str, list[float]]] = {m: {s: [] for s in SIDES} for m in UNITS}
    cases = [(m, s) for m in MEASURES for s in SIDES]
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        base = base_tree(Path(tmp) / "base")
        urls = _databases(backend, Path(tmp))
        try:
            for r in range(-1, rounds):  # round -1: warm-up, not counted
                shift = (r + 1) % len(cases)
                for measure, side in cases[shift:] + cases[:shift]:
                    value, cpu = _sample(measure, side, urls[side], jobs[measure], f"r{r}", base)
                    if r >= 0:
                        samples[measure][side].append(value)
                        if f"{measure}_cpu" in samples:
                            samples[f"{measure}_cpu"][side].append(cpu)
                    print(f"  round {r + 1}/{rounds} {measure:<6} {side:<4} {value:>10.1f}"
                          f"  cpu {cpu:>8.1f} us", flush=True)  # fmt: skip
                if r >= 1:  # the table so far: a run stopped early still reports
                    report(samples)
        finally:
            servers.drop_all()
    return samples


def report(samples: dict[str, dict[str, list[float]]]) -> None:
    print(f"\n{'measure':<12}{'unit':<12}" + "".join(f"{s:>10}" for s in SIDES))
    for m, unit in UNITS.items():
        medians = "".join(f"{statistics.median(samples[m][s]):>10.1f}" for s in SIDES)
        print(f"{m:<12}{unit:<12}{medians}")
    print(f"\n{'ratio':<25}{'median':>8}{'spread':>16}  target   verdict", flush=True)
    for name, (m, top, bottom, bound, higher) in TARGETS.items():
        a, b = samples[m][top], samples[m][bottom]
        ratio = statistics.median(a) / statistics.median(b)
        per_round = [x / y for x, y in zip(a, b, strict=True)]
        lo, hi = min(per_round), max(per_round)
        sign = ">=" if higher else "<="
        verdict = _verdict([_within(v, bound, higher) for v in (lo, hi)])
        shown = f"{bound:.3f}".rstrip("0")
        print(f"{name:<25}{ratio:>8.3f}{f'{lo:.3f}..{hi:.3f}':>16}  {sign} {shown:<6} {verdict}")


def _within(value: float, bound: float, higher: bool) -> bool:
    return value >= bound if higher else value <= bound


def _verdict(ends: list[bool]) -> str:
    """As bench.core says it: met when the whole spread is within, missed when none is."""
    return "met" if all(ends) else "missed" if not any(ends) else "borderline"


def file_system(folder: str) -> str:
    """The file system type ``folder`` is on (``ext4``, ``tmpfs``...), from /proc/mounts:
    the longest mount point above it; ``unknown`` where there is no /proc/mounts."""
    path, best, kind = os.path.realpath(folder), "", "unknown"
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                fields = line.split()
                point = fields[1]
                inside = path == point or path.startswith(point.rstrip("/") + "/")
                if inside and len(point) > len(best):
                    best, kind = point, fields[2]
    except OSError:
        pass
    return kind


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--jobs", type=int, default=2000, help="record() transactions a sample")
    parser.add_argument("--drain-jobs", type=int, default=20000, help="jobs drained a sample")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--folder", help="where SQLite's files go (default: the temp folder)")
    args = parser.parse_args()
    began = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()
    jobs = {"record": args.jobs, "drain": args.drain_jobs, "normalise": 20000}
    samples = run(args.backend, jobs, args.rounds, args.folder)
    end_load = os.getloadavg()
    folder = args.folder or tempfile.gettempdir()
    where = f" (files in {folder}, {file_system(folder)})" if args.backend == "sqlite" else ""
    print(f"\n{args.backend}{where}, {args.jobs} record() / {args.drain_jobs} drained a sample,"
          f" {args.rounds} rounds (medians), default settings; started {began},"
          f" load {load[0]:.1f} -> {end_load[0]:.1f}")  # fmt: skip
    report(samples)


if __name__ == "__main__":
    main()
