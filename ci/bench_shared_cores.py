"""How much a busy neighbour slows each runtime: rammer's cpu backend vs onnxruntime.

For every model, each runtime runs in its own process (processes alternate), first on quiet cores, then
with an unrelated busy process spinning on core 0 for the whole measurement; the figure is each runtime's
slowdown (busy median / quiet median).  A static schedule stalls at every barrier when one of its cores is
taken; the cpu backend answers with adaptive launches (a 1-vEU lane while the whole program is slowed,
backends/cpu/adaptive.py), reported here as "adaptive"; "static" turns them off.

    python ci/bench_shared_cores.py --models nasnet-small,resnext-small,lstm-tc-small --runs 300 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SPIN = "import os\nos.sched_setaffinity(0, {0})\nwhile True:\n    pass\n"


def _measure(runtime: str, model: str, runs: int, busy: bool) -> float:
    import numpy as np

    import rammer
    import rammer.zoo

    proto = rammer.zoo.build(model)
    if runtime in ("cpu", "cpu-static"):
        m = rammer.compile(proto, backend="cpu")
        m.executable.adaptive = runtime == "cpu"
        feeds = m.random_feeds(0)
        call = m.run
    else:
        import onnxruntime as ort

        sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        feeds = rammer.compile(proto, backend="reference").random_feeds(0)

        def call(f):
            return sess.run(None, f)
    for _ in range(max(20, runs // 10)):
        call(feeds)
    spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if busy else None
    try:
        if spinner:
            time.sleep(0.2)
            for _ in range(max(40, runs // 5)):  # let an adaptive runtime notice
                call(feeds)
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            call(feeds)
            times.append(time.perf_counter() - t)
    finally:
        if spinner:
            spinner.kill()
            spinner.wait()
    del np
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="nasnet-small,lstm-tc-small")
    ap.add_argument("--runtimes", default="cpu,cpu-static,onnxruntime")
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--one", nargs=3, metavar=("RUNTIME", "MODEL", "BUSY"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(_measure(args.one[0], args.one[1], args.runs, args.one[2] == "1")))
        return 0
    res: dict = {}
    for _ in range(args.rounds):
        for model in args.models.split(","):
            for busy in ("0", "1"):
                for rt in args.runtimes.split(","):
                    out = subprocess.run([sys.executable, __file__, "--one", rt, model, busy, "--runs", str(args.runs)],
                                         capture_output=True, text=True, env=dict(os.environ))
                    if out.returncode:
                        print(out.stderr[-2000:], file=sys.stderr)
                        return 1
                    res.setdefault((model, rt, busy), []).append(float(out.stdout.strip().splitlines()[-1]))
    print("| model | runtime | quiet | one core busy | slowdown |")
    print("|---|---|---:|---:|---:|")
    for model in args.models.split(","):
        for rt in args.runtimes.split(","):
            q, b = min(res[(model, rt, "0")]), min(res[(model, rt, "1")])
            print(f"| {model} | {rt} | {q * 1e6:.0f} us | {b * 1e6:.0f} us | {b / q:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
