"""The (stride, kernel size) pairs of the square windows the generated direct-sweep kernels of
:mod:`.ukernel_window` cover.  Plain data in a module of its own: the graph passes choose by it
(which depthwise QDQ convs go int8), and a session created from a cached native image imports the
passes but must not import numba, which :mod:`.ukernel_window` does."""

from __future__ import annotations

SHAPES: tuple[tuple[int, int], ...] = ((1, 3), (1, 5), (2, 2), (2, 3), (2, 5))
