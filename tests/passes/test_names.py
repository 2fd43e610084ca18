"""Fresh names for passes that add tensors and nodes (core/passes/names.py)."""

from __future__ import annotations

from rammer.passes.names import fresh_name


def test_a_free_name_is_kept_and_a_taken_one_gets_the_next_free_suffix():
    taken = {"a", "a_2", "b"}
    assert fresh_name("c", taken) == "c"
    assert fresh_name("a", taken) == "a_3"
    assert fresh_name("a", taken) == "a_4"  # each name joins the taken set
    assert taken == {"a", "a_2", "a_3", "a_4", "b", "c"}


def test_fresh_names_give_fresh_names_answers_without_searching_from_2_again():
    import random

    from rammer.passes.names import FreshNames

    rng = random.Random(3)
    taken = {"a", "a_2", "a_5", "b_3", "c"}
    plain, remembered = set(taken), set(taken)
    namer = FreshNames(remembered)
    for _ in range(300):
        name = rng.choice(["a", "b", "c", "d"])
        if rng.random() < 0.1:  # names the namer did not make, taken in between
            extra = f"{name}_{rng.randint(2, 60)}"
            plain.add(extra)
            remembered.add(extra)
        assert namer(name) == fresh_name(name, plain)
    assert plain == remembered


def test_fresh_names_remember_where_the_search_stopped():
    class Counting(set):
        lookups = 0

        def __contains__(self, item):
            Counting.lookups += 1
            return super().__contains__(item)

    from rammer.passes.names import FreshNames

    namer = FreshNames(Counting({"x"}))
    for _ in range(1000):
        namer("x")
    assert Counting.lookups < 3000  # fresh_name: about 500,000
