"""A Concat's strided views on the GPU backends come from its shapes; they are the views the index
maps (the reference op run on element numbers) give, on every axis, with one-element and empty inputs."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from rammer.backends.gpu import lower_copy
from rammer.frontend import load


def _concat(shapes: list[tuple[int, ...]], axis: int):
    out = list(shapes[0])
    ax = axis % len(out)
    out[ax] = sum(s[ax] for s in shapes)
    names = [f"x{i}" for i in range(len(shapes))]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in zip(names, shapes)]
    graph = helper.make_graph([helper.make_node("Concat", names, ["y"], axis=axis)], "c", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
    g = load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    return g.nodes[0], g


@pytest.mark.parametrize("shapes,axis", [
    ([(2, 3, 4), (2, 5, 4)], 1), ([(2, 3, 4), (2, 3, 1), (2, 3, 7)], -1), ([(1, 3), (4, 3)], 0),
    ([(2, 1, 4), (2, 1, 4)], 1), ([(3, 0, 2), (3, 2, 2)], 1), ([(1, 1, 1), (1, 2, 1)], 1),
    ([(8, 6, 5, 5), (8, 2, 5, 5), (8, 1, 5, 5)], 1)])
def test_concat_views_from_shapes_equal_the_index_maps(shapes, axis):
    node, graph = _concat(shapes, axis)
    by_shapes = lower_copy._concat_views(node, graph)
    assert by_shapes is not None
    assert by_shapes == lower_copy._concat_views_by_index_maps(node, graph)
