"""Worker processes after a model has run: fork-based and spawn-based pools both give right answers.

Run in a subprocess each: a regression here aborts or hangs the children (GNU
OpenMP refuses a parallel region in a forked child), which must not take
pytest down with it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from rammer.time_limits import scaled_limit

SCRIPT = textwrap.dedent('''
    import multiprocessing as mp
    import sys

    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    import rammer

    def build():
        nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
                 helper.make_node("Relu", ["m"], ["y"], name="relu")]
        w = helper.make_tensor("w", TensorProto.FLOAT, [32, 32], np.eye(32, dtype=np.float32).ravel().tolist())
        g = helper.make_graph(nodes, "forked", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 32])], initializer=[w])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        return m

    MODEL = None

    def work(i):
        global MODEL
        if MODEL is None:  # spawn: each worker compiles its own
            MODEL = rammer.compile(build(), backend="cpu", veus=2)
        x = np.full((16, 32), i - 1.5, np.float32)
        return float(MODEL({"x": x})["y"].sum())

    if __name__ == "__main__":
        MODEL = rammer.compile(build(), backend="cpu", veus=2)
        assert work(3) == 16 * 32 * 1.5  # the parent has run the model (GNU OpenMP is in use)
        with mp.get_context(sys.argv[1]).Pool(2) as pool:
            got = pool.map(work, range(4))
        assert got == [0.0, 0.0, 16 * 32 * 0.5, 16 * 32 * 1.5], got
        print("ok", got)
''')


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_pool_after_a_run(method, tmp_path):
    if method == "fork" and not hasattr(os, "fork"):
        pytest.skip("no fork() on this platform")
    script = tmp_path / "pool.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, NUMBA_NUM_THREADS="2", RAMMER_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, str(script), method], capture_output=True, text=True,
                          timeout=scaled_limit(300), env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok")
    if method == "fork":
        assert "made by fork()" in done.stderr and "spawn" in done.stderr
