"""How long it takes to get a runnable model: rammer from its compile cache, from a saved .rammer
file and compiling cold, against onnxruntime's InferenceSession.

Every measurement runs in a fresh process of its own, the kinds alternating round by round (the
machine's load drifts; alternating spreads it over all kinds).  A child times the call that makes
the session (``rammer.compile``, ``rammer.InferenceSession``, ``rammer.load_compiled``,
``onnxruntime.InferenceSession``), the first in the process ("fresh process": it includes what the
first call of a process pays, e.g. loading the backends' plugins and numba's start-up) and, for all but the cold compile, the same
call again ("warm process"); importing the package is timed apart.

Models: a ~100 MB MLP made here (6 MatMuls of 1024x4096 fp32 weights), and zoo models.  With
``--before SRC`` (a checkout of an earlier rammer: its ``core/`` and ``backends/``) the rammer kinds
run on that source too, in the same rounds, for before/after ratios.

    python ci/session_creation.py                      # mlp100, alexnet, nasnet; 5 rounds
    python ci/session_creation.py --models mlp100 --rounds 3 --before /tmp/rammer-before
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

KINDS = ("hit", "session", "file", "cold", "ort")
LABELS = {"hit": "rammer.compile, cache hit", "session": "rammer.InferenceSession, cache hit",
          "file": "rammer.load_compiled(.rammer)", "cold": "rammer.compile, cold cache", "ort": "onnxruntime"}


# -- the child: one measurement -------------------------------------------------------------------------

def _use_source(src: str | None) -> None:
    """Import ``rammer`` from ``src`` (its core/ and backends/) instead of the installed one."""
    if not src:
        return
    import importlib.abc
    import importlib.util

    roots = {"rammer": os.path.join(src, "core"), "rammer.backends": os.path.join(src, "backends")}

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name in roots:
                return importlib.util.spec_from_file_location(
                    name, os.path.join(roots[name], "__init__.py"), submodule_search_locations=[roots[name]])
            return None

    sys.meta_path.insert(0, Finder())


def child(kind: str, model: str, cache: str, saved: str, shapes_json: str = "") -> dict:
    # a corpus model's input shapes (its dynamic dimensions bound), as ci/corpus_bench.py gives them
    shapes = {k: tuple(v) for k, v in json.loads(shapes_json).items()} if shapes_json else None
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    if kind == "ort":
        import onnxruntime as ort

        def make():
            return ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    else:
        import rammer

        if kind == "file":
            def make():
                return rammer.load_compiled(saved)
        elif kind == "session":
            def make():
                return rammer.InferenceSession(model, providers=["cpu"], cache_dir=cache)
        else:
            def make():
                where = tempfile.mkdtemp(prefix="cold-", dir=cache) if kind == "cold" else cache
                return rammer.compile(model, backend="cpu", cache_dir=where, input_shapes=shapes)
    t1, c1 = time.perf_counter(), time.process_time()
    first = make()
    t2, c2 = time.perf_counter(), time.process_time()
    out = {"import_s": t1 - t0, "first_s": t2 - t1, "first_cpu_s": c2 - c1, "load": load,
           "numba_loaded": "numba" in sys.modules,
           "image": getattr(getattr(first, "executable", None), "image", None) is not None}
    status = getattr(getattr(first, "executable", None), "cache_status", None)
    if kind == "session":
        status = getattr(first.compiled.executable, "cache_status", None)
    out["status"] = status
    if kind != "cold":
        del first
        t3 = time.perf_counter()
        make()
        out["second_s"] = time.perf_counter() - t3
    return out


def prepare(model: str, cache: str, saved: str, shapes_json: str = "") -> dict:
    import rammer

    shapes = {k: tuple(v) for k, v in json.loads(shapes_json).items()} if shapes_json else None
    m = rammer.compile(model, backend="cpu", cache_dir=cache, input_shapes=shapes)
    m.save(saved)
    return {"status": m.executable.cache_status, "rammer_bytes": os.path.getsize(saved)}


# -- the parent --------------------------------------------------------------------------------------

def make_mlp(path: str, width: int = 1024, hidden: int = 4096, pairs: int = 3, batch: int = 8) -> None:
    """A ~100 MB MLP: ``pairs`` x (width->hidden, hidden->width) MatMul + bias + Relu, random fp32."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "x"
    dims = [(width, hidden), (hidden, width)] * pairs
    for i, (a, b) in enumerate(dims):
        w = (rng.standard_normal((a, b), dtype=np.float32) / np.sqrt(a)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(np.zeros(b, np.float32), f"b{i}")]
        out = f"r{i}" if i < len(dims) - 1 else "y"
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"add{i}"),
                  helper.make_node("Relu", [f"a{i}"], [out], name=f"relu{i}")]
        x = out
    g = helper.make_graph(nodes, "mlp100", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, width])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, width])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def _run(args: list[str], src: str | None, timeout: float = 1800) -> dict:
    env = dict(os.environ)
    env.pop("RAMMER_CACHE_DIR", None)
    # as a user's installation runs: with Python's bytecode cache (without it every process compiles
    # rammer's sources again, about a second here)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if src:
        env["SESSION_CREATION_SRC"] = src
    done = subprocess.run([sys.executable, os.path.abspath(__file__), *args], capture_output=True, text=True,
                          timeout=timeout, env=env)
    if done.returncode != 0:
        raise SystemExit(f"child {args} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="mlp100,alexnet,nasnet",
                    help="mlp100, zoo model names and/or corpus:NAME (ci/corpus, full size, its input shapes)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    ap.add_argument("--before", default=None, help="source tree of an earlier rammer (core/, backends/)")
    ap.add_argument("--work", default=None, help="folder for models and caches (default: a temporary one)")
    ap.add_argument("--json", default=None, help="also write every measurement here")
    args = ap.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        ap.error(f"unknown --kinds {', '.join(unknown)}; choose from {', '.join(KINDS)}")
    work = args.work or tempfile.mkdtemp(prefix="session-creation-")
    variants = [("after", None)] + ([("before", os.path.abspath(args.before))] if args.before else [])
    models = {}
    shapes: dict[str, str] = {}
    for name in [m for m in args.models.split(",") if m]:
        if name.startswith("corpus:"):
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import corpus
            import numpy as np

            entry = corpus.ENTRIES[name[len("corpus:"):]]
            corpus.build(entry, "full", corpus.DEFAULT_CACHE)  # built once, if not already
            base = os.path.join(corpus.DEFAULT_CACHE, f"{entry.name}-full-{entry.cache_key('full')}")
            name = entry.name
            models[name] = base + ".onnx"
            with np.load(base + ".npz") as z:
                shapes[name] = json.dumps({k: list(z[k].shape) for k in z.files})
            continue
        path = os.path.join(work, f"{name}.onnx")
        if not os.path.exists(path):
            if name == "mlp100":
                make_mlp(path)
            else:
                import onnx

                import rammer.zoo

                onnx.save(rammer.zoo.build(name), path)
        models[name] = path
    # The model files must be older than the digest memo's racy window before the warm runs.
    time.sleep(max(0.0, 2.5 - (time.time() - max(os.path.getmtime(p) for p in models.values()))))
    sizes = {}
    for name, path in models.items():
        for variant, src in variants:
            cache = os.path.join(work, f"cache-{variant}")
            os.makedirs(cache, exist_ok=True)
            saved = os.path.join(work, f"{name}-{variant}.rammer")
            info = _run(["--prepare", path, cache, saved, shapes.get(name, "")], src)
            sizes[(name, variant)] = info["rammer_bytes"]
            print(f"prepared {name} ({variant}): {info['status']}, .rammer {info['rammer_bytes'] / 1e6:.1f} MB",
                  flush=True)
    results: dict[tuple, list[dict]] = {}
    for r in range(args.rounds):
        for name, path in models.items():
            for kind in kinds:
                for variant, src in (variants if kind != "ort" else variants[:1]):
                    cache = os.path.join(work, f"cache-{variant}")
                    saved = os.path.join(work, f"{name}-{variant}.rammer")
                    out = _run(["--child", kind, path, cache, saved, shapes.get(name, "")], src)
                    results.setdefault((name, kind, variant), []).append(out)
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({" ".join(k): v for k, v in results.items()}, f, indent=1)
    print()
    print(f"session creation, medians of {args.rounds} fresh processes per cell (seconds); "
          f"'fresh': the first call in a process, 'warm': the same call again")
    header = f"{'model':<16} {'MB':>6}  {'kind':<36} {'variant':<7} {'import':>7} {'fresh':>7} {'fresh cpu':>9} " \
             f"{'imp+fresh':>9} {'warm':>7} {'fresh/ort':>9} {'warm/ort':>8} {'load':>9} numba"
    print(header)
    print("-" * len(header))
    for name, path in models.items():
        mb = os.path.getsize(path) / 1e6
        ort = results.get((name, "ort", "after"), [])
        ort_first, ort_second = _median([x["first_s"] for x in ort]), _median([x["second_s"] for x in ort])
        for kind in kinds:
            for variant, _ in (variants if kind != "ort" else variants[:1]):
                rows = results.get((name, kind, variant), [])
                first = _median([x["first_s"] for x in rows])
                second = _median([x["second_s"] for x in rows if "second_s" in x])
                imp = _median([x["import_s"] for x in rows])
                cpu = _median([x["first_cpu_s"] for x in rows if "first_cpu_s" in x])
                both = _median([x["import_s"] + x["first_s"] for x in rows])
                loads = [x["load"] for x in rows if "load" in x] or [float("nan")]
                numba = "yes" if any(x.get("numba_loaded") for x in rows) else "no"
                print(f"{name:<16} {mb:>6.1f}  {LABELS[kind]:<36} {variant:<7} {imp:>7.3f} {first:>7.3f} {cpu:>9.3f} "
                      f"{both:>9.3f} {second:>7.3f} {first / ort_first:>9.1f} {second / ort_second:>8.1f} "
                      f"{min(loads):>4.1f}-{max(loads):<4.1f} {numba}")
        for variant, _ in variants:
            print(f"{name:<16} .rammer file ({variant}): {sizes[(name, variant)] / 1e6:.1f} MB "
                  f"({sizes[(name, variant)] / os.path.getsize(path):.2f}x the .onnx)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("--child", "--prepare"):
        _use_source(os.environ.get("SESSION_CREATION_SRC"))
        result = child(*sys.argv[2:7]) if sys.argv[1] == "--child" else prepare(*sys.argv[2:6])
        print(json.dumps(result))
        sys.exit(0)
    sys.exit(main())
