"""The cpu backend at two commits, each side in its own processes, alternating: is a refactor speed-neutral?

    git worktree add /tmp/before <commit>
    python -m venv --system-site-packages /tmp/vb && /tmp/vb/bin/pip install --no-deps -e /tmp/before
    python ci/bench_before_after.py --before-python /tmp/vb/bin/python --rounds 4 --torch

The driver runs a worker process per side and round, alternating sides (before, after, after, before, ...),
so both sides see the same phases of a shared machine.  A worker compiles every model for ``cpu`` (each side
with its own program cache; compiled once per side, then cache hits), checks it against ``reference``, then
times it alternating run by run with an onnxruntime session of the same thread count in the same process,
each run starting on idle cores (``rammer.bench.quiet``, the ``rammer bench`` protocol).  The onnxruntime
column is the yardstick of that process's machine phase: the table gives each side's median ms, the ratio
after/before of the medians, and after/before of the cpu/onnxruntime ratios.

The worker uses only the public API (``rammer.compile``, ``rammer.zoo``), so one worker file serves both
commits.  The torch.onnx exports (``--torch``) are exported once by the driver and read by both sides.

It also times the compile of one model (``--compile-model``, default lstm-tc) cold (both numba's kernel cache
and the program cache empty) and cached (a fresh process, both caches warm), per side, alternating.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def worker(models: list[str], repeat: int, threads: int) -> dict:
    """Runs inside a side's process: {model: {"cpu": [s...], "onnxruntime": [s...]}}."""
    import warnings

    warnings.simplefilter("ignore")
    import numpy as np
    import onnx
    import onnxruntime as ort

    import rammer
    import rammer.zoo
    from rammer.bench.quiet import wait_until_idle

    out = {}
    for name in models:
        proto = onnx.load(name) if name.endswith(".onnx") else rammer.zoo.build(name)
        cpu = rammer.compile(proto, backend="cpu", veus=threads)
        ref = rammer.compile(proto, backend="reference")
        feeds = cpu.random_feeds(0)
        want, got = ref(feeds), cpu(feeds)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=f"{name} {k}")
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
        runners = {"cpu": lambda: cpu(feeds), "onnxruntime": lambda: sess.run(None, feeds)}
        for fn in runners.values():
            fn()
        times: dict[str, list[float]] = {k: [] for k in runners}
        order = list(runners)
        for r in range(repeat):
            for k in order[r % 2:] + order[:r % 2]:
                wait_until_idle()
                t = time.perf_counter()
                runners[k]()
                times[k].append(time.perf_counter() - t)
        out[name] = times
    return out


def medians(workers: list[dict], model: str) -> dict[str, float]:
    """{runtime: median seconds} of ``model`` over every timed run of ``workers`` (one side's worker results)."""
    return {k: statistics.median(x for run in workers for x in run[model][k]) for k in ("cpu", "onnxruntime")}


def _run_side(python: str, env: dict, args: list[str]) -> dict:
    proc = subprocess.run([python, os.path.abspath(__file__), "--worker", *args], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"worker failed ({python}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _compile_seconds(python: str, env: dict, model: str) -> float:
    code = ("import time, rammer, rammer.zoo; p = rammer.zoo.build(%r); t = time.perf_counter(); "
            "rammer.compile(p, backend='cpu'); print(time.perf_counter() - t)" % model)
    proc = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"compile failed ({python}):\n{proc.stderr[-4000:]}")
    return float(proc.stdout.strip().splitlines()[-1])


def _export_torch(folder: str) -> list[str]:
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    import torch_models

    paths = []
    for name in torch_models.CASES:
        raw, opt = os.path.join(folder, f"{name}-raw.onnx"), os.path.join(folder, f"{name}.onnx")
        torch_models.export_dynamo(name, raw, opt)
        paths.append(opt)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before-python", required=True, help="python of an environment with the 'before' commit installed")
    ap.add_argument("--after-python", default=sys.executable, help="python of the 'after' side (default: this one)")
    ap.add_argument("--models", default="lstm-tc,seq2seq,deepspeech2,nasnet,resnext,alexnet")
    ap.add_argument("--torch", action="store_true", help="add the torch.onnx exports of tests/torch_models.py")
    ap.add_argument("--rounds", type=int, default=4, help="worker processes per side")
    ap.add_argument("--repeat", type=int, default=10, help="timed runs per model per worker")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compile-model", default="lstm-tc", help="model whose compile time is measured ('' to skip)")
    ap.add_argument("--compile-rounds", type=int, default=2)
    ap.add_argument("--before-env", action="append", default=[], metavar="NAME=VALUE",
                    help="set in the 'before' side's processes, e.g. RAMMER_PLUGINS=cpu,reference when that commit "
                         "does not have every backend this environment's entry points name")
    ap.add_argument("--json", help="write the raw figures here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.models.split(","), args.repeat, args.threads)))
        return 0
    work = tempfile.mkdtemp(prefix="rammer-before-after-")
    models = [m for m in args.models.split(",") if m]
    if args.torch:
        models += _export_torch(work)
    sides = {"before": args.before_python, "after": args.after_python}
    envs = {}
    for side in sides:
        env = dict(os.environ, RAMMER_CACHE_DIR=os.path.join(work, f"cache-{side}"))
        env.pop("NUMBA_CACHE_DIR", None)
        if side == "before":
            env.update(kv.split("=", 1) for kv in args.before_env)
        envs[side] = env
    common = ["--before-python", "-", "--models", ",".join(models), "--repeat", str(args.repeat),
              "--threads", str(args.threads)]
    runs: dict[str, list[dict]] = {s: [] for s in sides}
    for r in range(args.rounds):
        order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
        for side in order:
            t = time.perf_counter()
            runs[side].append(_run_side(sides[side], envs[side], common))
            print(f"round {r + 1}/{args.rounds} {side}: {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    print("| model | before cpu ms | after cpu ms | after / before | before cpu/ort | after cpu/ort | "
          "after / before of cpu/ort |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    table = {}
    for m in models:
        med = {s: {k: v * 1e3 for k, v in medians(runs[s], m).items()} for s in sides}
        rel = {s: med[s]["cpu"] / med[s]["onnxruntime"] for s in sides}
        ratio, rel_ratio = med["after"]["cpu"] / med["before"]["cpu"], rel["after"] / rel["before"]
        table[m] = {"median_ms": med, "after_over_before": ratio, "cpu_over_ort": rel,
                    "after_over_before_of_cpu_over_ort": rel_ratio}
        label = "torch:" + os.path.basename(m)[:-5] if m.endswith(".onnx") else m
        print(f"| {label} | {med['before']['cpu']:.2f} | {med['after']['cpu']:.2f} | {ratio:.3f} | "
              f"{rel['before']:.2f} | {rel['after']:.2f} | {rel_ratio:.3f} |")
    geo = math.exp(statistics.fmean(math.log(v["after_over_before"]) for v in table.values()))
    print(f"\ngeometric mean of after / before: {geo:.3f}", flush=True)
    compile_s: dict[str, dict[str, list[float]]] = {s: {"cold": [], "cached": []} for s in sides}
    if args.compile_model:
        for r in range(args.compile_rounds):
            for side in (["before", "after"] if r % 2 == 0 else ["after", "before"]):
                cold = dict(envs[side], NUMBA_CACHE_DIR=tempfile.mkdtemp(dir=work),
                            RAMMER_CACHE_DIR=tempfile.mkdtemp(dir=work))
                compile_s[side]["cold"].append(_compile_seconds(sides[side], cold, args.compile_model))
                compile_s[side]["cached"].append(_compile_seconds(sides[side], cold, args.compile_model))
    if args.compile_model:
        for side in sides:
            c = compile_s[side]
            print(f"{args.compile_model} compile, {side}: cold " + ", ".join(f"{x:.2f}" for x in c["cold"])
                  + " s; cached " + ", ".join(f"{x:.2f}" for x in c["cached"]) + " s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"table": table, "compile_s": compile_s, "runs": runs}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
