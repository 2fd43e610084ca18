"""A process that gets a model from the compile cache compiles no numba code: the kernel entries and
the driver load from numba's disk cache, with no specialisation left to compile at session creation
or on the first runs (a type, a literal or a cache key that differed between processes would show
here as numba compiler passes in the second process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.time_limits import scaled_limit

#: Run in a fresh process: listens to numba's compiler events, then gets the model and runs it.
_CHILD = textwrap.dedent("""
    import json, sys
    from numba.core import event

    passes, compiles = [], []

    class Passes(event.Listener):
        def on_start(self, ev):
            passes.append(str(ev.data.get("name") if isinstance(ev.data, dict) else ev.data))

        def on_end(self, ev):
            pass

    class Compiles(event.Listener):
        def on_start(self, ev):
            compiles.append(f"{ev.data.get('dispatcher')} {ev.data.get('args')}")

        def on_end(self, ev):
            pass

    event.register("numba:run_pass", Passes())
    event.register("numba:compile", Compiles())

    import numpy as np
    import rammer

    path, cache = sys.argv[1], sys.argv[2]
    model = rammer.compile(path, backend="cpu", cache_dir=cache)
    at_session = len(passes)
    x = np.random.default_rng(3).standard_normal((4, 32)).astype(np.float32)
    first = model({"x": x})["y"]
    again = model({"x": x})["y"]
    print(json.dumps({"status": model.executable.cache_status, "session_passes": at_session,
                      "run_passes": len(passes) - at_session, "compiles": compiles[:10],
                      "y": first.tolist(), "same": bool((first == again).all())}))
""")


def _mlp(path: str) -> None:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((32, 64)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((64, 16)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"),
             helper.make_node("Add", ["m1", "b1"], ["a1"], name="add1"),
             helper.make_node("Relu", ["a1"], ["r1"], name="relu1"),
             helper.make_node("MatMul", ["r1", "w2"], ["m2"], name="mm2"),
             helper.make_node("Softmax", ["m2"], ["y"], name="softmax", axis=-1)]
    g = helper.make_graph(nodes, "warm-hit", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], [w1, b1, w2])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_a_second_process_hitting_the_cache_compiles_no_numba_code(tmp_path):
    path, cache = str(tmp_path / "m.onnx"), str(tmp_path / "cache")
    _mlp(path)
    # This process compiles the model (and whatever kernels numba's cache lacks) and runs it once,
    # so that the driver's launch is in numba's cache too.
    model = rammer.compile(path, backend="cpu", cache_dir=cache)
    assert model.executable.cache_status == "miss"
    x = np.random.default_rng(3).standard_normal((4, 32)).astype(np.float32)
    want = model({"x": x})["y"]

    env = dict(os.environ)
    env.pop("RAMMER_CACHE_DIR", None)
    done = subprocess.run([sys.executable, "-c", _CHILD, path, cache], capture_output=True, text=True, env=env,
                          timeout=scaled_limit(300))
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["status"] == "hit"
    assert got["session_passes"] == 0, f"numba compiled at session creation: {got['compiles']}"
    assert got["run_passes"] == 0, f"numba compiled on the first runs: {got['compiles']}"
    assert got["compiles"] == []
    assert got["same"]
    np.testing.assert_allclose(np.array(got["y"], dtype=np.float32), want, rtol=1e-6, atol=1e-7)
