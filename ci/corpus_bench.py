"""The corpus (ci/corpus/, 40+ architectures built in code) on ``cpu``, timed against onnxruntime.

Protocol (the one of ci/real_models.py): for each model, each runtime runs in its own process, the
processes alternating ``--rounds`` times, onnxruntime with the same thread count
(``intra_op_num_threads = --threads``, ``inter_op_num_threads = 1``) as rammer's vEUs; each process times
``--seconds`` of runs after two warm-up runs and reports the median; the best median per side is kept.
Before the timed rounds one more process compiles the model cold (an empty compile cache), checks its
outputs against onnxruntime and lists the nodes it leaves to numpy; every timed rammer process then
creates its session from that warm compile cache, and that creation time is reported too.  "Cold"
means rammer's compile cache is empty; numba's kernel cache is as earlier runs left it, so the first
model to use a kernel after an install or a kernel edit also pays for compiling it (minutes for the
convolution kernels on the 2-core machine; ci/compile_times.py flags such runs).

A model that fails (build, compile error, mismatch, timeout) is a row with the reason; the run goes on.

    python ci/corpus_bench.py --threads 2 --rounds 1 --json corpus.json          # the whole corpus, full size
    python ci/corpus_bench.py --threads 1 --clock cpu --json corpus.json        # loaded machine: CPU time, 1 thread
    python ci/corpus_bench.py --family cnn,rnn --size ci                          # some families, CI size
    python ci/corpus_bench.py --check --size ci                                   # correctness only: cpu and reference

``--check`` compiles every model on ``cpu`` and ``reference`` and compares each with onnxruntime
(float models: max |got - ort| / max(1, |ort|) <= 1e-3 elementwise; quantized models: within 8 steps of
an 8-bit quantization of the output's range, the rounding onnxruntime's own int8 kernels differ by;
on a CPU without VNNI, where onnxruntime's uint8 x int8 sums saturate, the oracle is onnxruntime on
the same model with its int8 weights shifted to uint8, which it computes exactly: ci/ort_oracle.py;
class labels of traditional-ML models: at most 0.5% of rows may differ, at float32 threshold ties), and
lists the numpy-fallback nodes of each compile.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402  (ci/corpus, beside this script)
import ort_oracle  # noqa: E402  (beside this script)

FLOAT_TOLERANCE = 1e-3
QUANT_STEPS = 8
LABEL_MISMATCH = 0.005


# -- correctness -----------------------------------------------------------------------------------------
def ort_session(data: bytes, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def compare(entry: corpus.Entry, got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> tuple[bool, str]:
    """Whether rammer's outputs match onnxruntime's for this entry's family, and the worst error seen."""
    worst = []
    for name, w in want.items():
        if name not in got:
            return False, f"output {name} missing"
        g = np.asarray(got[name])
        w = np.asarray(w)
        if g.shape != w.shape:
            return False, f"output {name} has shape {g.shape}, onnxruntime {w.shape}"
        if w.size == 0:
            continue
        if not np.issubdtype(w.dtype, np.floating):
            share = float(np.mean(g != w))
            worst.append(f"{name}: {share:.2%} differ")
            if share > (LABEL_MISMATCH if entry.family == "traditional-ml" else 0.0):
                return False, "; ".join(worst)
            continue
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        if not np.array_equal(np.isnan(g64), np.isnan(w64)):
            return False, f"{name}: NaN where onnxruntime has none (or the reverse)"
        g64, w64 = np.nan_to_num(g64), np.nan_to_num(w64)
        if entry.family == "quantized":
            step = max(float(np.ptp(w64)), 1e-12) / 255.0
            err = float(np.max(np.abs(g64 - w64))) / step
            worst.append(f"{name}: {err:.2f} steps")
            if err > QUANT_STEPS:
                return False, "; ".join(worst)
        elif entry.family == "traditional-ml":
            err = float(np.max(np.abs(g64 - w64)))
            worst.append(f"{name}: {err:.1e} abs")
            # probabilities of rows whose label differs at a threshold tie differ wholesale: count rows
            bad_rows = np.mean(np.any(np.abs(g64 - w64).reshape(len(w64), -1) > 1e-4, axis=1))
            if bad_rows > LABEL_MISMATCH:
                return False, "; ".join(worst)
        else:
            err = float(np.max(np.abs(g64 - w64) / np.maximum(1.0, np.abs(w64))))
            worst.append(f"{name}: {err:.1e} rel")
            if err > FLOAT_TOLERANCE:
                return False, "; ".join(worst)
    return True, "; ".join(worst)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {(text[0] if text else '')[:400]}"


def check_one(entry: corpus.Entry, size: str, backend: str, threads: int = 2, cache_dir: str | None = None,
              built: corpus.Built | None = None, want: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """Compile ``entry`` on ``backend`` (a cold compile: no compile cache) and compare with onnxruntime.

    Returns ``{"status": "ok" | "mismatch" | "compile-error" | "run-error" | "build-error", "detail",
    "fallbacks": ["op node", ...], "compile_s"}``; never raises for the model's own failures."""
    import logging

    import rammer
    from rammer.diagnostics import fallbacks_of

    logging.getLogger("rammer").setLevel(logging.ERROR)  # fallbacks are reported in the row instead
    try:
        built = built or corpus.build(entry, size, cache_dir or corpus.DEFAULT_CACHE)
        if want is None:
            want = ort_oracle.expected_outputs(built.onnx, built.feeds, threads)
    except Exception as exc:
        return {"status": "build-error", "detail": _short(exc), "fallbacks": []}
    shapes = {k: v.shape for k, v in built.feeds.items()}
    options: dict[str, Any] = {"veus": threads, "cache": False} if backend == "cpu" else {}
    start = time.perf_counter()
    try:
        model = rammer.compile(built.onnx, backend=backend, input_shapes=shapes, **options)
    except Exception as exc:
        return {"status": "compile-error", "detail": _short(exc), "fallbacks": []}
    compile_s = time.perf_counter() - start
    fallbacks = [f"{f.get('op')} {f.get('node')}" + (f" ({f.get('reason')})" if f.get("reason") else "")
                 for f in fallbacks_of(model.executable)]
    try:
        got = model.run(built.feeds)
    except Exception as exc:
        return {"status": "run-error", "detail": _short(exc), "fallbacks": fallbacks, "compile_s": compile_s}
    ok, detail = compare(entry, got, want)
    return {"status": "ok" if ok else "mismatch", "detail": detail, "fallbacks": fallbacks, "compile_s": compile_s}


# -- one timed side, in its own process -------------------------------------------------------------------
def _time(call: Callable[[], Any], seconds: float, clock: str = "wall", max_iters: int = 200) -> float:
    """Median milliseconds of one call. ``clock="cpu"`` reads the process's CPU time per call: on a loaded
    machine it counts only the work of this process (with one thread, what the run costs), where wall
    time also counts the time the scheduler gave other processes. With more threads it adds up every
    thread's time, spinning included, so it is not a latency there."""
    timer = time.process_time if clock == "cpu" else time.perf_counter
    for _ in range(2):
        call()
    samples: list[float] = []
    stop = time.perf_counter() + seconds
    while (len(samples) < 3 or time.perf_counter() < stop) and len(samples) < max_iters:
        t = timer()
        call()
        samples.append(timer() - t)
    return float(np.median(samples)) * 1e3


def _session_clock(args: argparse.Namespace) -> Callable[[], float]:
    """Session creation and cold compiles are timed with the same clock as the runs."""
    return time.process_time if args.clock == "cpu" else time.perf_counter


def side(role: str, entry: corpus.Entry, args: argparse.Namespace) -> dict[str, Any]:
    """``cold``: compile into the empty compile cache, check, list fallbacks; ``cpu``: session from the
    warm cache, then time; ``ort``: onnxruntime session, then time."""
    built = corpus.build(entry, args.size, args.corpus_dir)
    clock = _session_clock(args)
    if role == "ort":
        start = clock()
        sess = ort_session(built.onnx, args.threads)
        session_s = clock() - start
        return {"session_s": session_s, "ms": _time(lambda: sess.run(None, built.feeds), args.seconds, args.clock)}
    import logging

    import rammer

    logging.getLogger("rammer").setLevel(logging.ERROR)
    if role == "cold":
        return _cold(entry, built, args)
    shapes = {k: v.shape for k, v in built.feeds.items()}
    start = clock()
    # no ``veus``: the process's NUMBA_NUM_THREADS (= --threads) caps the vEUs and the cost model
    # picks how many pay, as for a user who names no count (onnxruntime's threads are a cap too)
    model = rammer.compile(built.onnx, backend="cpu", input_shapes=shapes, cache_dir=args.compile_cache)
    session_s = clock() - start
    return {"session_s": session_s, "ms": _time(lambda: model.run(built.feeds), args.seconds, args.clock)}


def _cold(entry: corpus.Entry, built: corpus.Built, args: argparse.Namespace) -> dict[str, Any]:
    import rammer
    from rammer.diagnostics import fallbacks_of

    clock = _session_clock(args)
    want = ort_oracle.expected_outputs(built.onnx, built.feeds, args.threads)
    shapes = {k: v.shape for k, v in built.feeds.items()}
    start = clock()
    try:
        model = rammer.compile(built.onnx, backend="cpu", input_shapes=shapes, cache_dir=args.compile_cache)
    except Exception as exc:
        return {"status": "compile-error", "detail": _short(exc), "fallbacks": []}
    compile_s = clock() - start
    fallbacks = [f"{f.get('op')} {f.get('node')}" for f in fallbacks_of(model.executable)]
    try:
        got = model.run(built.feeds)
    except Exception as exc:
        return {"status": "run-error", "detail": _short(exc), "fallbacks": fallbacks, "compile_s": compile_s}
    ok, detail = compare(entry, got, want)
    return {"status": "ok" if ok else "mismatch", "detail": detail, "fallbacks": fallbacks, "compile_s": compile_s}


# -- the driver ------------------------------------------------------------------------------------------
def _run_side(role: str, entry: corpus.Entry, args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.setdefault("NUMBA_NUM_THREADS", str(args.threads))
    # as a user's installation runs: with Python's bytecode cache (without it every process compiles
    # rammer's sources again, about a second of each "session warm" here)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    cmd = [sys.executable, os.path.abspath(__file__), "--one", role, entry.name, "--threads", str(args.threads),
           "--seconds", str(args.seconds), "--size", args.size, "--corpus-dir", args.corpus_dir,
           "--compile-cache", args.compile_cache, "--clock", args.clock]
    if args.check:
        cmd.append("--check")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "detail": f"{role} process ran past {args.timeout:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}, no output"])[-1]
    return {"status": "crash" if role != "ort" else "ort-error", "detail": f"{role} process: {tail[:300]}"}


def measure(entry: corpus.Entry, args: argparse.Namespace) -> dict[str, Any]:
    row: dict[str, Any] = {"name": entry.name, "family": entry.family, "kind": entry.kind, "batch": entry.batch}
    if args.check:
        for backend in ("cpu", "reference"):
            r = _run_side(f"check-{backend}", entry, args)
            row[backend] = r
        row["status"] = "ok" if all(row[b].get("status") == "ok" for b in ("cpu", "reference")) else \
            next(row[b]["status"] for b in ("cpu", "reference") if row[b].get("status") != "ok")
        row["fallbacks"] = row["cpu"].get("fallbacks", [])
        return row
    cold = _run_side("cold", entry, args)
    row.update({"status": cold.get("status"), "detail": cold.get("detail", ""), "fallbacks": cold.get("fallbacks", []),
                "compile_cold_s": cold.get("compile_s")})
    if row["status"] not in ("ok", "mismatch"):
        return row
    best: dict[str, dict] = {}
    for _ in range(args.rounds):
        for role in ("cpu", "ort"):
            r = _run_side(role, entry, args)
            if "ms" in r and ("ms" not in best.get(role, {}) or r["ms"] < best[role]["ms"]):
                best[role] = r
            elif role not in best:
                best[role] = r
    if "ms" not in best["cpu"]:
        row.update(status=best["cpu"].get("status", "run-error"), detail=best["cpu"].get("detail", ""))
    row.update({"cpu_ms": best["cpu"].get("ms"), "session_warm_s": best["cpu"].get("session_s"),
                "ort_ms": best["ort"].get("ms"), "ort_session_s": best["ort"].get("session_s")})
    if row["cpu_ms"] and row["ort_ms"]:
        row["ratio"] = row["cpu_ms"] / row["ort_ms"]
    return row


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _f(v: Any, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, (int, float)) else ""


def tables(rows: list[dict[str, Any]], check: bool) -> str:
    out = []
    for family in corpus.FAMILIES:
        fam = [r for r in rows if r["family"] == family]
        if not fam:
            continue
        out.append(f"\n#### {family}\n")
        if check:
            out += ["| model | cpu | reference | cpu compile (s) | fallback nodes | detail |", "|---|---|---|---:|---|---|"]
            for r in fam:
                c, ref = r["cpu"], r["reference"]
                out.append(f"| {r['name']} | {c.get('status')} | {ref.get('status')} | {_f(c.get('compile_s'), '.1f')} | "
                           f"{len(r['fallbacks'])} | {(c.get('detail') or '')[:120]} |")
            continue
        out += ["| model | cpu ms | ort ms | ratio | compile cold s | session warm s | fallback nodes | status |",
                "|---|---:|---:|---:|---:|---:|---:|---|"]
        for r in fam:
            status = r["status"] if r["status"] == "ok" else f"{r['status']}: {(r.get('detail') or '')[:100]}"
            out.append(f"| {r['name']} | {_f(r.get('cpu_ms'), '.2f')} | {_f(r.get('ort_ms'), '.2f')} | "
                       f"{_f(r.get('ratio'), '.2f')} | {_f(r.get('compile_cold_s'), '.1f')} | "
                       f"{_f(r.get('session_warm_s'), '.2f')} | {len(r.get('fallbacks') or [])} | {status} |")
        ratios = [r["ratio"] for r in fam if "ratio" in r]
        if ratios:
            out.append(f"\n{family}: geomean cpu/onnxruntime {geomean(ratios):.2f}x over {len(ratios)} model(s)")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="", help="comma-separated entry names (default: all); --list shows them")
    ap.add_argument("--family", default="", help=f"comma-separated families: {', '.join(corpus.FAMILIES)}")
    ap.add_argument("--size", choices=corpus.SIZES, default="full")
    ap.add_argument("--list", action="store_true", help="list the corpus and exit")
    ap.add_argument("--check", action="store_true", help="correctness only: cpu and reference against onnxruntime")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=2.0, help="timing window per side and round")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="time each run in wall seconds (default) or in the process's CPU seconds (use with "
                         "--threads 1 on a loaded machine)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds one process may take")
    ap.add_argument("--corpus-dir", default=corpus.DEFAULT_CACHE, help="where built models are cached")
    ap.add_argument("--compile-cache", default="", help="rammer compile cache (default: a fresh temporary folder)")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--one", nargs=2, metavar=("ROLE", "MODEL"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        role, name = args.one
        entry = corpus.ENTRIES[name]
        try:
            if role.startswith("check-"):
                out = check_one(entry, args.size, role[len("check-"):], args.threads, args.corpus_dir)
            else:
                out = side(role, entry, args)
        except Exception as exc:
            traceback.print_exc()
            out = {"status": "run-error" if role != "ort" else "ort-error", "detail": _short(exc)}
        print(json.dumps(out), flush=True)
        return 0
    try:
        entries = corpus.select(args.models, args.family)
    except KeyError as exc:
        ap.error(str(exc.args[0]))
    if args.list:
        for e in entries:
            print(f"{e.name:24s} {e.family:20s} batch {e.batch:<5d} {e.kind}")
        return 0
    with tempfile.TemporaryDirectory(prefix="rammer-corpus-cache-") as tmp:
        args.compile_cache = args.compile_cache or tmp
        rows = []
        for i, entry in enumerate(entries):
            start = time.perf_counter()
            row = measure(entry, args)
            rows.append(row)
            if args.json:  # after every model: a long run stopped midway keeps what it measured
                _write_json(args, rows, {})
            extra = "" if args.check else (f" cpu {_f(row.get('cpu_ms'), '.2f')} ms, ort {_f(row.get('ort_ms'), '.2f')} ms,"
                                           f" ratio {_f(row.get('ratio'), '.2f')}")
            print(f"[{i + 1}/{len(entries)}] {entry.name}: {row['status']}{extra}, "
                  f"fallbacks {len(row.get('fallbacks') or [])} ({time.perf_counter() - start:.0f} s)"
                  + (f" - {row.get('detail') or row.get('cpu', {}).get('detail', '')}"[:300] if row["status"] != "ok" else ""),
                  flush=True)
    print(tables(rows, args.check))
    ratios = [r["ratio"] for r in rows if "ratio" in r]
    summary = {"models": len(rows), "ok": sum(r["status"] == "ok" for r in rows),
               "with_fallbacks": sum(bool(r.get("fallbacks")) for r in rows)}
    if not args.check:
        summary["geomean"] = geomean(ratios)
        summary["timed"] = len(ratios)
        print(f"\nwhole corpus: geomean cpu/onnxruntime {summary['geomean']:.2f}x over {len(ratios)} timed models "
              f"(threads={args.threads}, size={args.size}, clock={args.clock}); worst {max(ratios, default=float('nan')):.2f}x; "
              f"{summary['ok']}/{len(rows)} ok, {summary['with_fallbacks']} with numpy fallbacks")
    else:
        print(f"\n{summary['ok']}/{len(rows)} models match on cpu and reference; "
              f"{summary['with_fallbacks']} with numpy fallbacks on cpu")
    if args.json:
        _write_json(args, rows, summary)
    return 0


def _write_json(args: argparse.Namespace, rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    tmp = args.json + ".part"
    with open(tmp, "w") as f:
        json.dump({"threads": args.threads, "size": args.size, "clock": args.clock, "rounds": args.rounds, "seconds": args.seconds,
                   "summary": summary, "rows": rows}, f, indent=1)
    os.replace(tmp, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
