"""The CPU backend against onnxruntime, with the same thread count.

    python ci/bench_cpu.py [--models lstm-tc,seq2seq,...] [--torch] [--rounds 8] [--threads 2]

For each model it compiles the ``cpu`` backend (wavefront policy), the same
backend with the op-by-op policy (``cpu-op-by-op``), both with ``--threads``
vEUs, and ``reference``, and an onnxruntime session with
``intra_op_num_threads = --threads``; checks every output against
``reference``; then times them two ways:

* **alternating**: one run of each in turn, the order rotated every round,
  ``--rounds x 5`` rounds, each run starting once the process is idle again
  (the protocol of ``rammer bench``; ``--no-settle`` runs them back to back);
* **blocks**: five runs of one, then five of the next, ``--rounds`` times (each
  block, too, starting once the process is idle);
* ``reference`` is timed apart (three runs), since numpy's BLAS threads spin
  after each call too;

and prints the medians (and minimums) in milliseconds, the cpu/onnxruntime
ratio, and the single-vEU work per kernel family from the profiler.
onnxruntime's workers spin for ~30 ms after each run and numba's OpenMP
workers for a few ms: back to back on a 2-core machine, whoever runs next
shares a core with a spinning thread (see docs/benchmarks.md), hence the
settling (:mod:`rammer.bench.quiet`).
``--torch`` adds the torch.onnx exports of tests/torch_models.py.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
import warnings


def _times(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def _models(args) -> list[tuple[str, object, dict | None]]:
    import rammer.zoo

    out = [(name, rammer.zoo.build(name), None) for name in args.models.split(",") if name]
    if args.torch:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
        import onnx
        import torch_models

        folder = tempfile.mkdtemp(prefix="rammer-bench-torch-")
        for name in torch_models.CASES:
            raw, opt = os.path.join(folder, f"{name}-raw.onnx"), os.path.join(folder, f"{name}.onnx")
            feeds = torch_models.export_dynamo(name, raw, opt)
            out.append((f"torch:{name}", onnx.load(opt), feeds))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="lstm-tc,seq2seq,deepspeech2,nasnet,resnext,alexnet")
    ap.add_argument("--torch", action="store_true", help="add the torch.onnx exports (needs torch, onnxscript)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-settle", action="store_true", help="alternate back to back, without waiting for idle cores")
    ap.add_argument("--no-reference", action="store_true", help="skip timing the reference backend")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    import numpy as np
    import onnxruntime as ort

    import rammer
    from rammer.backends.cpu.compiler import compile_program
    from rammer.backends.cpu.graph_passes import prepare
    from rammer.backends.cpu.profile import by_family, profile_ops
    from rammer.backends.cpu.runtime import CpuExecutable
    from rammer.bench.quiet import wait_until_idle
    from rammer.frontend import load

    rows = []
    torch_ratios = []
    for name, proto, feeds in _models(args):
        graph = load(proto)
        # the same thread count on both sides: one vEU per onnxruntime thread
        cpu = rammer.compile(graph, backend="cpu", cache=False, veus=args.threads)
        opbyop = rammer.compile(graph, backend="cpu-op-by-op", cache=False, veus=args.threads)
        ref = rammer.compile(graph, backend="reference")
        feeds = feeds or cpu.random_feeds(0)
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
        want = ref(feeds)
        for label, model in (("cpu", cpu), ("cpu-op-by-op", opbyop)):
            got = model(feeds)
            for k in want:
                np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=f"{name} {label} {k}")
        runners = {"cpu": lambda: cpu(feeds), "cpu-op-by-op": lambda: opbyop(feeds),
                   "onnxruntime": lambda: sess.run(None, feeds)}
        for fn in runners.values():
            fn()
        alt = {k: [] for k in runners}
        order = list(runners)
        for r in range(args.rounds * 5):
            # rotated every round, as rammer bench does: nobody always runs right after a spinning neighbour
            for k in order[r % len(order):] + order[:r % len(order)]:
                if not args.no_settle:
                    wait_until_idle()
                alt[k] += _times(runners[k], 1)
        blk = {k: [] for k in runners}
        for _ in range(args.rounds):
            for k, fn in runners.items():
                # each block starts on an idle machine too: onnxruntime's pool spins for a while
                # after its last run, which took a core from the first runs of the next block
                if not args.no_settle:
                    wait_until_idle()
                blk[k] += _times(fn, 5)
        if not args.no_reference:
            # Timed apart: numpy's OpenBLAS threads spin after each call and would
            # slow whichever runner came next in the rotation.
            alt["reference"] = _times(lambda: ref(feeds), 3)
            blk["reference"] = alt["reference"]
        prepared = prepare(graph)  # what rammer.compile(backend="cpu") compiles
        c = compile_program(prepared)
        work = by_family(profile_ops(CpuExecutable(prepared, c.program), c, feeds, repeat=3))
        med = {k: statistics.median(v) * 1e3 for k, v in alt.items()}
        bmed = {k: statistics.median(v) * 1e3 for k, v in blk.items()}
        bmin = {k: min(v) * 1e3 for k, v in blk.items()}
        rows.append((name, med, bmed, bmin, work))
        if name.startswith("torch:"):
            torch_ratios.append(med["cpu"] / med["onnxruntime"])
        print(f"{name}: alternating " + ", ".join(f"{k} {v:.2f}" for k, v in med.items())
              + " | blocks " + ", ".join(f"{k} {v:.2f}" for k, v in bmed.items()), flush=True)
    cols = [k for k in rows[0][1]]
    print()
    print("| model | " + " | ".join(f"{c} alt." for c in cols) + " | cpu / ort alt. | cpu blocks (min) | "
          "ort blocks (min) | cpu / ort blocks |")
    print("|---|" + "---:|" * (len(cols) + 4))
    for name, med, bmed, bmin, _ in rows:
        print(f"| {name} | " + " | ".join(f"{med[c]:.2f}" for c in cols)
              + f" | **{med['cpu'] / med['onnxruntime']:.2f}x** | {bmed['cpu']:.2f} ({bmin['cpu']:.2f}) | "
              f"{bmed['onnxruntime']:.2f} ({bmin['onnxruntime']:.2f}) | **{bmed['cpu'] / bmed['onnxruntime']:.2f}x** |")
    if torch_ratios:
        geo = math.exp(sum(math.log(r) for r in torch_ratios) / len(torch_ratios))
        print(f"\ntorch exports: geometric mean of cpu / onnxruntime (alternating) = {geo:.2f}x")
    print("\nsingle-vEU work by kernel family (ms):")
    for name, _, _, _, work in rows:
        print(f"  {name}: " + ", ".join(f"{f} {v['us'] / 1e3:.2f}" for f, v in work.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
