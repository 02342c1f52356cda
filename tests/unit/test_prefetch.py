"""The adaptive prefetch rule: deep for quick handlers, one per slot for slow ones."""

from __future__ import annotations

import pytest

from outbox.queue.prefetch import _WEIGHT, FAST_WAIT_S, MAX_ADAPTIVE, STALL_FACTOR, START, Prefetch


def test_quick_handlers_grow_the_prefetch_to_its_ceiling() -> None:
    p = Prefetch(cap=1)
    assert p.value == START
    for _ in range(5):
        p.observe(0.000_01)
    assert p.value == MAX_ADAPTIVE


def test_slow_handlers_shrink_it_to_one_job_a_slot() -> None:
    p = Prefetch(cap=4)
    for _ in range(5):
        p.observe(0.000_05)
    for _ in range(40):
        p.observe(2.0)
    assert p.value == 4
    assert p.stall_after_s() > 2.0  # stalls are judged against the usual run time


def test_the_buffer_holds_about_one_wait_budget_of_work() -> None:
    p = Prefetch(cap=2)
    for _ in range(60):
        p.observe(0.001)  # 2 slots finish 40 jobs in one 20 ms budget
    assert p.value == int(2 * FAST_WAIT_S / 0.001)


def test_a_stall_drops_it_to_one_job_a_slot_until_run_times_say_otherwise() -> None:
    p = Prefetch(cap=3)
    p.observe(0.000_1)
    assert p.value == MAX_ADAPTIVE
    assert p.stall_after_s() == STALL_FACTOR * FAST_WAIT_S
    p.stalled()
    assert p.value == 3
    p.observe(0.000_1)
    assert p.value == MAX_ADAPTIVE


def test_a_fixed_prefetch_never_moves() -> None:
    p = Prefetch(cap=2, fixed=7)
    p.observe(0.000_01)
    p.observe(10.0)
    p.stalled()
    assert (p.value, p.adaptive) == (7, False)


@pytest.mark.parametrize("cap", [1, 3, 64, MAX_ADAPTIVE, MAX_ADAPTIVE + 100])
def test_observe_follows_the_rule_as_written_with_min_and_max(cap: int) -> None:
    """``observe`` spells its bounds as comparisons (it runs for every job); the values
    are the rule's: max(cap, min(MAX_ADAPTIVE, cap * max(run, FAST_WAIT_S) / max(run, 1e-6)))."""
    p = Prefetch(cap=cap)
    run_s: float | None = None
    times = [0.0, 1e-9, 1e-6, 2e-6, 1e-5, 4e-4, 0.001, FAST_WAIT_S, 0.021, 0.5, 3.0, 0.0, 1e-7]
    for ran_s in times + times[::-1]:
        p.observe(ran_s)
        run_s = ran_s if run_s is None else run_s + _WEIGHT * (ran_s - run_s)
        fits = int(cap * max(run_s, FAST_WAIT_S) / max(run_s, 1e-6))
        assert (p.run_s, p.value) == (run_s, max(cap, min(MAX_ADAPTIVE, fits)))
