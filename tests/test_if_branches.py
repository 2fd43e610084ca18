"""An If on a run-time condition whose one branch is invalid at the compiled shapes."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_model
from onnx import TensorProto, helper

import rammer
from rammer.errors import OpExecutionError, ShapeError


def _model(bad_else: bool = True, bad_then: bool = False):
    """y = If(c, then: x + 1, else: Reshape(x, [7, -1]) + 1) for x[2, 4] (8 elements: not a multiple of 7)."""
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    seven = helper.make_tensor("seven", TensorProto.INT64, [2], [7, -1] if bad_else else [2, 4])
    bad_shape = helper.make_tensor("bad_shape", TensorProto.INT64, [2], [3, -1] if bad_then else [2, 4])
    then_g = helper.make_graph(
        [helper.make_node("Reshape", ["x", "bad_shape"], ["t0"], name="then_reshape"),
         helper.make_node("Add", ["t0", "one"], ["t1"], name="then_add")],
        "then", [], [helper.make_tensor_value_info("t1", TensorProto.FLOAT, None)], initializer=[bad_shape])
    else_g = helper.make_graph(
        [helper.make_node("Reshape", ["x", "seven"], ["e0"], name="else_reshape"),
         helper.make_node("Sub", ["e0", "one"], ["e1"], name="else_sub")],
        "else", [], [helper.make_tensor_value_info("e1", TensorProto.FLOAT, None)], initializer=[seven])
    nodes = [helper.make_node("If", ["c"], ["y"], name="choose", then_branch=then_g, else_branch=else_g)]
    return make_model(nodes, [("x", TensorProto.FLOAT, [2, 4]), ("c", TensorProto.BOOL, [])],
                      [("y", TensorProto.FLOAT, [2, 4])], [one])


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_valid_branch_runs_and_invalid_one_fails_at_run_time(backend):
    model = rammer.compile(_model(), backend=backend)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(model({"x": x, "c": np.array(True)})["y"], x + 1)
    with pytest.raises(OpExecutionError, match="choose.*else-branch was taken.*recompile"):
        model({"x": x, "c": np.array(False)})


def test_both_branches_invalid_is_a_compile_error():
    with pytest.raises(ShapeError):
        rammer.load(_model(bad_else=True, bad_then=True))
