"""Cold-compile and warm-session times of corpus models, before and after a change, each in a fresh process.

For each model and round, for each variant (this checkout, "after"; and with ``--before SRC``, an earlier
rammer's ``core/`` and ``backends/``, "before"), in alternation: one process compiles the model into an
empty compile cache (**cold**: numba's kernel cache as earlier runs left it, see below), then one more
process gets it from that cache (**warm**: ``rammer.compile`` of the same bytes, the first call of the
process, which includes starting the ``cpu`` backend: plugins, its modules, numba loading the cached
kernels).  The model is given as bytes with the corpus' input shapes and ``veus`` = ``--threads``, as
``ci/corpus_bench.py`` does.  Each child also counts numba's compiler passes: a cold figure with passes
includes compiling kernels numba's cache lacked (a first-ever compile), and is flagged.

    python ci/compile_times.py --models llama,resnet50 --rounds 2 --before /tmp/rammer-before

The GPU sweep of issue 40 (every full-size corpus model under 100 MiB, one fresh process per model and
backend, each row appended to a JSON-lines file as it comes, so an interrupted sweep keeps its rows):

    python ci/compile_times.py --models all --max-mib 100 --backends cuda,rocm,opencl --rounds 1 \
        --jsonl sweep.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from session_creation import _use_source  # noqa: E402 -- the same source switch as session_creation's children


def child(onnx_path: str, feeds_path: str, cache: str, threads: int, backend: str = "cpu") -> dict:
    from numba.core import event

    passes: list[str] = []

    class Passes(event.Listener):
        def on_start(self, ev):
            passes.append("pass")

        def on_end(self, ev):
            pass

    event.register("numba:run_pass", Passes())
    import numpy as np

    with open(onnx_path, "rb") as f:
        data = f.read()
    with np.load(feeds_path) as z:
        shapes = {k: z[k].shape for k in z.files}
    t0 = time.perf_counter()
    import logging

    import rammer

    logging.getLogger("rammer").setLevel(logging.ERROR)
    t1, c1 = time.perf_counter(), time.process_time()
    if backend == "cpu":
        model = rammer.compile(data, backend="cpu", input_shapes=shapes, veus=threads, cache_dir=cache)
        status = model.executable.cache_status
    else:
        rammer.compile(data, backend=backend, input_shapes=shapes, emit=os.path.join(cache, "emit"))
        status = "emitted"
    t2, c2 = time.perf_counter(), time.process_time()
    return {"import_s": t1 - t0, "compile_s": t2 - t1, "cpu_s": c2 - c1, "status": status,
            "numba_passes": len(passes)}


def _run(args: list[str], src: str | None, threads: int, timeout: float) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.setdefault("NUMBA_NUM_THREADS", str(threads))
    env.pop("RAMMER_CACHE_DIR", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as a user's installation runs
    if src:
        env["COMPILE_TIMES_SRC"] = src
    try:
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *args], capture_output=True,
                              text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"status": f"timeout ({timeout:.0f} s)"}
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1][:200] if done.stderr.strip() else done.returncode
        return {"status": f"failed: {last}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="llama,resnet50,lstm-lm,whisper-encoder")
    ap.add_argument("--size", default="full")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--backends", default="cpu", help="comma-separated: cpu, cuda, rocm, opencl")
    ap.add_argument("--before", default=None, help="source tree of an earlier rammer (core/, backends/)")
    ap.add_argument("--work", default=None, help="folder for the compile caches (default: a temporary one)")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--json", default=None)
    ap.add_argument("--jsonl", default=None, help="append each row to this JSON-lines file as it is measured")
    ap.add_argument("--max-mib", type=float, default=None,
                    help="only models whose built ONNX file is smaller than this (MiB); with --models all")
    args = ap.parse_args()
    import corpus

    work = args.work or tempfile.mkdtemp(prefix="compile-times-")
    variants = [("after", None)] + ([("before", os.path.abspath(args.before))] if args.before else [])
    paths = {}
    names = list(corpus.ENTRIES) if args.models == "all" else [m for m in args.models.split(",") if m]
    for name in names:
        entry = corpus.ENTRIES[name]
        corpus.build(entry, args.size, corpus.DEFAULT_CACHE)  # built once, if not already
        base = os.path.join(corpus.DEFAULT_CACHE, f"{name}-{args.size}-{entry.cache_key(args.size)}")
        if args.max_mib is not None and os.path.getsize(base + ".onnx") >= args.max_mib * 2 ** 20:
            print(f"skipped {name}: {os.path.getsize(base + '.onnx') / 2 ** 20:.1f} MiB", flush=True)
            continue
        paths[name] = (base + ".onnx", base + ".npz")
    backends = [b for b in args.backends.split(",") if b]
    rows: list[dict] = []
    for r in range(args.rounds):
        for name, (onnx_path, feeds_path) in paths.items():
            for backend in backends:
                for variant, src in variants:
                    cache = tempfile.mkdtemp(prefix=f"{name}-{backend}-{variant}-", dir=work)
                    for kind in ("cold", "warm") if backend == "cpu" else ("cold",):
                        load = _load()
                        out = _run([onnx_path, feeds_path, cache, str(args.threads), backend], src, args.threads,
                                   args.timeout)
                        out.update(model=name, backend=backend, variant=variant, kind=kind, round=r, load=load)
                        rows.append(out)
                        print(json.dumps(out), flush=True)
                        if args.jsonl:
                            with open(args.jsonl, "a", encoding="utf-8") as f:
                                f.write(json.dumps(out) + "\n")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    print(f"\nmedians of {args.rounds} fresh processes (seconds of rammer.compile, wall; cpu = the child's own CPU); "
          f"load = 1-minute load average at each start; * = numba compiled kernels in some run of that cell (not a "
          f"warm numba cache)")
    print(f"{'model':<18} {'backend':<7} {'kind':<5} " + " ".join(f"{v:>10} {v + ' cpu':>10}" for v, _ in variants) +
          ("  after/before (wall, cpu)" if args.before else "") + "   load")
    for name in paths:
        for backend in backends:
            for kind in ("cold", "warm") if backend == "cpu" else ("cold",):
                cells, meds = [], {}
                for variant, _ in variants:
                    got = [x for x in rows if x["model"] == name and x["backend"] == backend and x["kind"] == kind
                           and x["variant"] == variant]
                    times = [x["compile_s"] for x in got if "compile_s" in x]
                    cpus = [x["cpu_s"] for x in got if "cpu_s" in x]
                    meds[variant] = (statistics.median(times) if times else float("nan"),
                                     statistics.median(cpus) if cpus else float("nan"))
                    flag = "*" if any(x.get("numba_passes") for x in got) else " "
                    cells.append(f"{meds[variant][0]:>9.2f}{flag} {meds[variant][1]:>10.2f}")
                loads = [x["load"] for x in rows
                         if x["model"] == name and x["backend"] == backend and x["kind"] == kind]
                ratio = (f"  {meds['after'][0] / meds['before'][0]:>11.2f} {meds['after'][1] / meds['before'][1]:>6.2f}"
                         if args.before else "")
                print(f"{name:<18} {backend:<7} {kind:<5} " + " ".join(cells) + ratio +
                      f"   {min(loads):.1f}-{max(loads):.1f}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _use_source(os.environ.get("COMPILE_TIMES_SRC"))
        print(json.dumps(child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6])))
        sys.exit(0)
    sys.exit(main())
