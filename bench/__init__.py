"""Benchmark harness for outbox: our figures beside raw SQL and the Python peers, one run.

Run ``python -m bench [--backend postgresql|sqlite|mariadb] [--quick] [--only SCENARIO]``.
Absolute numbers drift on shared machines; ratios measured in the same run, with the
cases of a scenario interleaved round by round, are what the targets are stated in.
Each scenario first runs an uncounted warm-up round; a target is met only when the
ratio of every measured round is on the right side of its bound (borderline otherwise).
Nothing here is imported by the test suite, and nothing here is a timed assertion.

This package's ``__init__`` imports nothing: ``bench.child`` and the oban-py peer run
under a separate Python 3.12 environment that has no ``outbox`` installed.
"""
