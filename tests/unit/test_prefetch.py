"""The adaptive prefetch rule: deep for quick handlers, one per slot for slow ones."""

from __future__ import annotations

from outbox.queue.prefetch import FAST_WAIT_S, MAX_ADAPTIVE, STALL_FACTOR, START, Prefetch


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
