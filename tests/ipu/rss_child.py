"""Child process of test_ipu_memory: compiles one model on the ipu backend, runs it through the
simulator, checks it against reference and prints one JSON line with its peak RSS and the model's
bytes (weights, largest live activations)."""

from __future__ import annotations

import json
import resource
import sys

import numpy as np


def wide_model(size: int = 112):
    """Two wide elementwise layers and a 1x1 conv: thousands of rTasks in one superstep."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    shape = [1, 64, size, size]
    w = numpy_helper.from_array((rng.standard_normal((64, 64, 1, 1)) * 0.1).astype(np.float32), "w")
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w"], ["c"]), helper.make_node("Add", ["c", "a"], ["y"])]
    g = helper.make_graph(nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def nasnet_issue_model():
    """Issue 39's NASNet-style cell model as described there (64 input channels at 28x28, up to 320
    channels inside): a normal cell (F=32, 192 channels), another, then a reduction cell (F=80, 320
    channels at 14x14), 66 convs -- the issue's own model is not in the repository (it had 54)."""
    from rammer.zoo.builder import GraphBuilder
    from rammer.zoo.nasnet import NORMAL_CELL, REDUCTION_CELL, Feature, _NASNetBuilder

    b = GraphBuilder("nasnet-issue39", 0)
    nas = _NASNetBuilder(b)
    x = Feature(b.input("x", (1, 64, 28, 28)), 64, 28)
    states = [x, x]
    for spec, filters, stride in ((NORMAL_CELL, 32, 1), (NORMAL_CELL, 32, 1), (REDUCTION_CELL, 80, 2)):
        states.append(nas.cell(spec, states[-2], states[-1], filters, stride, f"cell{len(states) - 2}"))
    last = states[-1]
    b.output(last.name, (1, last.channels, last.size, last.size))
    return b.model("NASNet-style cells of issue 39: 64 channels at 28x28 in, 320 channels at 14x14 out")


MODELS = {"wide": wide_model, "nasnet-issue39": nasnet_issue_model}


def _peak_rss_mb() -> float:
    """This process's peak RSS.  VmHWM belongs to the process's own address space (a new one at exec);
    ru_maxrss is not: Linux keeps it across exec, so a child started by a large test process would
    report the parent's size at fork time."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main(name: str) -> None:
    import rammer
    import rammer.plugins

    if "ipu" not in rammer.plugins.backends():
        import rammer.backends.ipu as ipu

        rammer.plugins.register_plugin(ipu, "rammer-ipu-rss")
    from rammer import zoo

    model = MODELS[name]() if name in MODELS else zoo.build(name)
    compiled = rammer.compile(model, backend="ipu")
    compile_peak_mb = _peak_rss_mb()  # the lowering's share of the peak, apart from the simulator's
    exe = compiled.executable
    rng = np.random.default_rng(0)
    feeds = {t.name: rng.standard_normal(t.shape).astype(np.dtype(t.dtype)) for t in compiled.graph.inputs}
    got = compiled.run(feeds)
    peak_mb = _peak_rss_mb()
    want = rammer.compile(model, backend="reference").run(feeds)
    err = max(float(np.max(np.abs(got[k] - want[k]) / (np.abs(want[k]) + 1e-6), initial=0.0)) for k in want)
    graph, program = exe.graph, exe.program
    from rammer.backends.ipu.simulator import model_bytes

    weights, live = model_bytes(program, graph)
    per_step = np.bincount([t.superstep for t in program.tasks],
                           weights=[len(t.rtasks) for t in program.tasks], minlength=1)
    print(json.dumps({"model": name, "peak_rss_mb": peak_mb, "compile_peak_rss_mb": compile_peak_mb,
                      "weights_mb": weights / 2**20,
                      "live_activations_mb": live / 2**20, "max_rel_err": err,
                      "rtasks": exe.schedule.num_rtasks, "max_rtasks_per_superstep": int(per_step.max()),
                      "supersteps": program.num_supersteps}))


if __name__ == "__main__":
    main(sys.argv[1])
