"""The least-live op order of core/memory/order.py (the mcu's layer order)."""

from __future__ import annotations

from rammer.memory import ArenaOp, greedy_order, least_live_order, live_bytes


def _two_branches():
    # 0 is the input; branch A: 0 -> 1 (big) -> 2 (small); branch B: 0 -> 3 (big) -> 4 (small); 5 = join
    ops = [ArenaOp((0,), (1,)), ArenaOp((0,), (3,)), ArenaOp((1,), (2,)), ArenaOp((3,), (4,)), ArenaOp((2, 4), (5,))]
    sizes = {0: 10, 1: 100, 2: 1, 3: 100, 4: 1, 5: 1}
    return ops, sizes


def test_greedy_finishes_a_branch_before_starting_the_next_and_lowers_the_peak():
    ops, sizes = _two_branches()
    original = list(range(len(ops)))
    greedy = greedy_order(ops, sizes, {0})
    assert greedy == [0, 2, 1, 3, 4]
    assert live_bytes(ops, original, sizes, {0}, {5})[0] == 210  # both big tensors live at once
    assert live_bytes(ops, greedy, sizes, {0}, {5})[0] == 111
    assert least_live_order(ops, sizes, {0}, {5}) == greedy


def test_the_given_order_is_kept_when_greedy_is_no_better():
    ops = [ArenaOp((0,), (1,)), ArenaOp((1,), (2,))]
    sizes = {0: 4, 1: 4, 2: 4}
    assert least_live_order(ops, sizes, {0}, {2}) == [0, 1]
