"""Fresh names for passes that add tensors and nodes (core/passes/names.py)."""

from __future__ import annotations

from rammer.passes.names import fresh_name


def test_a_free_name_is_kept_and_a_taken_one_gets_the_next_free_suffix():
    taken = {"a", "a_2", "b"}
    assert fresh_name("c", taken) == "c"
    assert fresh_name("a", taken) == "a_3"
    assert fresh_name("a", taken) == "a_4"  # each name joins the taken set
    assert taken == {"a", "a_2", "a_3", "a_4", "b", "c"}
