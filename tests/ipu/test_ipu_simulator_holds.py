"""The simulator's check that a tile holds what its rTasks read (backends/ipu/simulator.py).

A read is held when its parts -- the tile's written slices and the boxes it received -- cover it.
Parts of distinct slices are disjoint, so their volumes add up; received boxes of one slice can
overlap (overlapping reads), and then only marking the elements is exact: a sum of volumes alone
would pass a read with a hole in it."""

from __future__ import annotations

import numpy as np

from rammer.backends.ipu.simulator import ChipMemory, TensorState


def _memory_with_one_tensor(length: int, slices: list[tuple[int, int, int]]) -> ChipMemory:
    """A chip holding one 1-D tensor 'x' cut into ``slices`` (lo, hi, owner), all written in superstep 0."""
    memory = ChipMemory.__new__(ChipMemory)
    memory.tensors, memory.received, memory._received_by_tile = {}, {}, {}
    st = TensorState.__new__(TensorState)
    st.name, st.shape, st.dtype, st.value, st._by_tile = "x", (length,), np.dtype(np.float32), None, None
    st.boxes = np.array([[[lo, hi]] for lo, hi, _ in slices], dtype=np.int64)
    st.owners = np.array([owner for _, _, owner in slices], dtype=np.int64)
    st.loaded = np.zeros(len(slices), dtype=bool)
    st.written = np.zeros(len(slices), dtype=np.int64)
    memory.tensors["x"] = st
    return memory


def _receive(memory: ChipMemory, tile: int, boxes: list[tuple[int, int]], sources: list[int]) -> None:
    memory.receive("x", np.full(len(boxes), tile), np.array([[[lo, hi]] for lo, hi in boxes]), np.array(sources))


def test_owned_and_received_parts_of_distinct_slices_add_up() -> None:
    memory = _memory_with_one_tensor(8, [(0, 4, 0), (4, 8, 1)])
    _receive(memory, 0, [(4, 6)], [1])
    assert memory.holds("x", 0, [(0, 6)], 1)
    assert not memory.holds("x", 0, [(0, 7)], 1)
    assert memory.holds("x", 1, [(4, 8)], 1) and not memory.holds("x", 1, [(3, 8)], 1)
    assert memory.holds("x", 2, [(5, 5)], 1)  # an empty box reads nothing
    assert memory.holds("x", 0, [(0, 2)], 0)  # written in superstep 0: held from superstep 0 ...
    memory.tensors["x"].written[:] = 1
    assert not memory.holds("x", 0, [(0, 2)], 0)  # ... not before its writer's superstep


def test_overlapping_received_boxes_of_one_slice_are_not_counted_twice() -> None:
    memory = _memory_with_one_tensor(8, [(0, 4, 0), (4, 8, 1)])
    # Tile 2 received [0, 2) and [1, 3) of slice 0 (two overlapping reads) and [4, 5) of slice 1: 5
    # elements by volume, 4 distinct.  A read of [0, 4) has volume 4 = 2 + 2 but misses element 3.
    _receive(memory, 2, [(0, 2), (1, 3), (4, 5), (1, 3)], [0, 0, 1, 0])
    assert not memory.holds("x", 2, [(0, 4)], 1)
    assert memory.holds("x", 2, [(0, 3)], 1)
    assert memory.holds("x", 2, [(1, 3)], 1) and not memory.holds("x", 2, [(2, 5)], 1)
    assert memory.first_not_held("x", 2, [[(0, 3)], [(4, 5)], [(3, 5)], [(0, 1)]], 1) == 2
    memory.end_superstep()
    assert not memory.holds("x", 2, [(0, 1)], 2)  # received boxes live for their superstep only
