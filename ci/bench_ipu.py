"""Simulated IPU figures for the zoo models on a Graphcore preset (default GC200).

    python ci/bench_ipu.py [--models alexnet,resnext] [--vdevice gc200] [--budget 300] [--json out.json]

For each model: the wavefront schedule lowered with merged supersteps, the
wavefront schedule with Rammer/NNFusion's one wave per compute set, and the
op-by-op schedule (one op per compute set).  Figures come from the ipu
backend's cost model (see docs/ipu.md), not from an IPU: latency, supersteps,
exchange bytes, tile and vEU utilisation, peak tile SRAM; or the does-not-fit
error.  Lowering only (no numpy execution), so full-size models are practical.

    python ci/bench_ipu.py --corpus [--models nasnet-small,torch:bert,corpus:bert,real:squeezenet]
                           [--size ci] [--budget 600] [--json out.json]

The corpus table: each small zoo model, each torch export of tests/torch_models.py
(TorchScript exporter), each model of the 52-model corpus (``corpus:NAME``, ci/corpus, at
``--size``: ``ci`` by default) and each model of ci/real_models.py (``real:NAME``, published
sizes) compiled on ``ipu`` (GC200, wavefront, merged), run through the simulator and checked
against ``reference`` (max relative error), its simulated latency (cost model, not a
measurement) next to the ``cpu`` backend's measured latency (median of ``--runs`` runs after
one warm-up, in this process; ``--cpu-veus`` sets its worker count) -- or the placement error.
``--budget`` bounds each model's
ipu compile + simulation (not the export of the model) and, separately, its cpu compile + timing
(seconds); a model over it is listed as such.  ``--skip-run`` only places the models (no simulation, no cpu timing).

Each model runs in its own child process (``--in-process`` turns this off): a model that crashes
the interpreter, exhausts memory or hangs past ``--budget`` is a row of the table, not the end of
the run, and every row reports its own process's peak RSS and the load average when it started.
A model other than a zoo one is exported (built) by a process of its own before its child
measures it (``--export``): issue 39's bound is on the ipu's memory, and torch's import for a
torch export (200-300 MB) is not the ipu's; the child reads the exported file and feeds.
A row whose outputs differ from ``reference`` by more than ``MISMATCH_TOLERANCE`` is marked
``MISMATCH``; a ``RammerError`` from the compile is a refusal, any other exception (or an
error while simulating a model that placed, such as ``BSPOrderError``) a crash.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time

import rammer
import rammer.plugins
from rammer import zoo
from rammer.errors import RammerError
from rammer.frontend import load
from rammer.schedule import build_problem, get_policy

#: Max relative error (tests/test_torch_exports.py's measure) above which a row is a mismatch.
MISMATCH_TOLERANCE = 1e-4
#: Seconds a child may take beyond its two budgets (ipu, cpu): the export of the model and start-up.
CHILD_SLACK_S = 300

CONFIGS = (("wavefront", "merged"), ("wavefront", "compute-set"), ("op-by-op", "compute-set"))


def _backend():
    if "ipu" not in rammer.plugins.backends():
        import rammer.backends.ipu as ipu

        rammer.plugins.register_plugin(ipu, "rammer-ipu-bench")
    return rammer.plugins.get_backend("ipu")


def _alarm(signum, frame):  # noqa: ARG001
    raise TimeoutError


def bench_model(name: str, vdevice: str, budget_s: int) -> list[dict]:
    from rammer.backends.ipu.codegen import lower

    backend = _backend()
    rows = []
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(budget_s)
    try:
        graph = load(zoo.build(name))
        graph = backend.prepare_graph(graph).graph
        problem = build_problem(graph, backend.vdevice(vdevice), backend)
        schedules = {}
        for policy, mode in CONFIGS:
            t0 = time.perf_counter()
            row = {"model": name, "policy": policy, "mode": mode}
            try:
                if policy not in schedules:
                    schedules[policy] = get_policy(policy).schedule(problem)
                r = lower(schedules[policy], graph, mode).report()
                row.update({k: r[k] for k in ("latency_us", "supersteps", "exchange_bytes", "tile_utilisation",
                                              "veu_utilisation", "tile_peak_bytes", "compute_us", "exchange_us",
                                              "sync_us")})
            except RammerError as exc:
                row["error"] = str(exc)
            row["lower_s"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
    except TimeoutError:
        rows.append({"model": name, "error": f"over the {budget_s} s budget of this script"})
    finally:
        signal.alarm(0)
    return rows


def table(rows: list[dict]) -> str:
    out = ["| model | schedule | supersteps | simulated latency (us) | exchange (MB) | tile util. | vEU util. "
           "| peak tile SRAM (KiB) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cfg = f"{r.get('policy', '-')} / {r.get('mode', '-')}"
        if "error" in r:
            out.append(f"| {r['model']} | {cfg} | - | - | - | - | - | {r['error'][:160]} |")
        else:
            out.append(f"| {r['model']} | {cfg} | {r['supersteps']} | {r['latency_us']:.1f} | "
                       f"{r['exchange_bytes'] / 1e6:.2f} | {r['tile_utilisation']:.3f} | {r['veu_utilisation']:.4f} | "
                       f"{r['tile_peak_bytes'] / 1024:.0f} |")
    return "\n".join(out)


def _ci_folder_on_path() -> None:
    here = str(__import__("pathlib").Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)


def _tests_folder_on_path() -> None:
    """tests/ on sys.path, for tests/torch_models.py (the torch:NAME models)."""
    tests = str(__import__("pathlib").Path(__file__).resolve().parents[1] / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)


def _corpus_names() -> list[str]:
    names = [e.name for e in zoo.list_models() if e.name.endswith("-small")]
    try:
        _tests_folder_on_path()
        import torch_models

        names += [f"torch:{n}" for n in torch_models.CASES]
    except ImportError:  # torch absent: the zoo only
        pass
    _ci_folder_on_path()
    try:
        import corpus

        names += [f"corpus:{n}" for n in corpus.ENTRIES]
    except ImportError:
        pass
    import real_models

    names += [f"real:{m.name}" for m in real_models.MODELS]
    return names


def _corpus_model(name: str, folder: str, size: str = "ci"):
    """(model or path, feeds) of one corpus entry."""
    import numpy as np

    if name.startswith("corpus:"):
        _ci_folder_on_path()
        import corpus

        built = corpus.build(corpus.ENTRIES[name[7:]], size)
        path = f"{folder}/{name[7:]}.onnx"
        with open(path, "wb") as f:
            f.write(built.onnx)
        return path, dict(built.feeds)
    if name.startswith("real:"):
        _ci_folder_on_path()
        import real_models

        entry = next(m for m in real_models.MODELS if m.name == name[5:])
        data = real_models.model_bytes(entry)
        path = f"{folder}/{entry.name}.onnx"
        with open(path, "wb") as f:
            f.write(data)
        return path, real_models.feeds_for(entry, data)
    if name.startswith("torch:"):
        import warnings

        _tests_folder_on_path()  # (a --models list does not go through _corpus_names)
        import torch_models

        path = f"{folder}/{name[6:]}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            feeds = torch_models.export_torchscript(name[6:], path)
        return path, feeds
    model = zoo.build(name)
    graph = load(model)
    rng = np.random.default_rng(0)
    return model, {t.name: rng.standard_normal(t.shape).astype(np.dtype(t.dtype)) for t in graph.inputs}


def _exported(name: str, folder: str, size: str = "ci"):
    """(path, feeds) of a non-zoo entry, exported by a process of its own (``--export``), so the
    exporter's memory (torch's import) is not counted in the measuring process's peak RSS."""
    import numpy as np

    if not name.startswith(("corpus:", "real:", "torch:")):
        return _corpus_model(name, folder, size)
    prefix = os.path.join(folder, name.replace(":", "_"))
    cmd = [sys.executable, os.path.abspath(__file__), "--export", name, "--to", prefix, "--size", size]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise RuntimeError(f"exporting {name} failed ({done.returncode}): {last}")
    with open(prefix + ".feeds.json", encoding="utf-8") as f:
        names = json.load(f)
    with np.load(prefix + ".feeds.npz") as arrays:
        feeds = {n: arrays[f"arr_{i}"] for i, n in enumerate(names)}
    return prefix + ".onnx", feeds


def export_to(name: str, prefix: str, size: str = "ci") -> None:
    """Write ``name``'s model to ``prefix.onnx`` and its feeds to ``prefix.feeds.npz`` / ``.feeds.json``."""
    import numpy as np

    with tempfile.TemporaryDirectory() as folder:
        model, feeds = _corpus_model(name, folder, size)
        if isinstance(model, str):
            with open(model, "rb") as f:
                data = f.read()
        else:
            data = model.SerializeToString()
    with open(prefix + ".onnx", "wb") as f:
        f.write(data)
    np.savez(prefix + ".feeds.npz", *feeds.values())
    with open(prefix + ".feeds.json", "w", encoding="utf-8") as f:
        json.dump(list(feeds), f)


def _max_rel_err(got: dict, want: dict) -> float:
    """max |got - want| / max(1, |want|) over the outputs (tests/test_torch_exports.py's measure)."""
    import numpy as np

    errs = [0.0]
    for k in want:
        a, b = np.asarray(got[k]), np.asarray(want[k])
        if a.dtype == bool or b.dtype == bool or not np.issubdtype(b.dtype, np.number):
            errs.append(0.0 if np.array_equal(a, b) else float("inf"))
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        both_nan = np.isnan(a64) & np.isnan(b64)
        diff = np.where(both_nan, 0.0, np.abs(a64 - b64) / np.maximum(1.0, np.abs(b64)))
        errs.append(float(np.max(np.nan_to_num(diff, nan=np.inf), initial=0.0)))
    return max(errs)


def _budget_ran_out(exc: BaseException) -> bool:
    """Whether ``exc`` is this script's budget alarm, possibly wrapped by rammer (an op running
    when it fired reports ``OpExecutionError ... TimeoutError``)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, TimeoutError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "TimeoutError" in str(exc)


def corpus_row(name: str, folder: str, runs: int, size: str = "ci", budget_s: int = 0,
               skip_run: bool = False, cpu_veus: int | None = None, skip_cpu: bool = False) -> dict:
    _backend()
    row: dict = {"model": name}
    signal.signal(signal.SIGALRM, _alarm)
    try:
        t0 = time.perf_counter()
        model, feeds = _exported(name, folder, size)
        row["build_s"] = round(time.perf_counter() - t0, 1)
        # The budget bounds the ipu compile + simulation, not the export of the model (a torch
        # export of a corpus model takes 10-50 s on the loaded host).
        signal.alarm(budget_s)
        # The inputs' sizes: the traditional-ML exports leave their row count dynamic.
        shapes = {"input_shapes": {k: tuple(v.shape) for k, v in feeds.items()}}
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            ipu = rammer.compile(model, backend="ipu", **shapes)
        except RammerError as exc:
            if isinstance(exc.__cause__, TimeoutError) or "TimeoutError" in str(exc):  # the budget, re-raised
                raise TimeoutError from exc
            row["error"] = str(exc).splitlines()[0]
            return row
        row["ipu_compile_s"] = round(time.perf_counter() - t0, 1)
        row["ipu_compile_cpu_s"] = round(time.process_time() - c0, 1)
        report = ipu.executable.report()
        row.update({k: report[k] for k in ("latency_us", "supersteps", "tile_peak_bytes")})
        if skip_run:
            return row
        t0, c0 = time.perf_counter(), time.process_time()
        got = ipu.run(feeds)
        row["simulate_s"] = round(time.perf_counter() - t0, 1)
        row["simulate_cpu_s"] = round(time.process_time() - c0, 1)
        # The process's peak so far (export, ipu compile, simulation; before reference and cpu), against
        # issue 39's bound for the model: 3 x (weights + largest live activations) + 300 MB.
        row["sim_peak_rss_mb"] = _peak_rss_mb()
        from rammer.backends.ipu.simulator import model_bytes

        weights, live = model_bytes(ipu.executable.program, ipu.executable.graph)
        row["rss_bound_mb"] = 3 * (weights + live) / 2**20 + 300
        want = rammer.compile(model, backend="reference", **shapes).run(feeds)
        row["max_rel_err"] = _max_rel_err(got, want)
        del ipu, got, want
    except TimeoutError:
        row["over_budget"] = f"ipu compile + simulation over the {budget_s} s budget"
        return row
    except Exception as exc:  # noqa: BLE001 - a failure is a row of the table (after a compile that placed it: a bug)
        if _budget_ran_out(exc):  # the alarm, wrapped by the op that was running (OpExecutionError)
            row["over_budget"] = f"ipu compile + simulation over the {budget_s} s budget"
            return row
        row["crash"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return row
    finally:
        signal.alarm(0)
    if skip_cpu:
        return row
    try:
        signal.alarm(budget_s)
        cpu = rammer.compile(model, backend="cpu", **shapes, **({"veus": cpu_veus} if cpu_veus else {}))
        cpu.run(feeds)
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            cpu.run(feeds)
            times.append(time.perf_counter() - t0)
        row["cpu_us"] = sorted(times)[len(times) // 2] * 1e6
    except TimeoutError:
        row["cpu_note"] = f"cpu compile + runs over the {budget_s} s budget"
    except RammerError as exc:
        over = isinstance(exc.__cause__, TimeoutError) or "TimeoutError" in str(exc)
        row["cpu_note"] = (f"cpu compile + runs over the {budget_s} s budget" if over
                           else f"cpu: {str(exc).splitlines()[0][:120]}")
    except Exception as exc:  # noqa: BLE001
        row["cpu_note"] = f"cpu: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
    finally:
        signal.alarm(0)
    return row


def _process_figures(r: dict) -> str:
    """ipu compile s / simulate s (CPU, wall in brackets) / peak RSS MB / load average, as the table's
    last columns."""
    def fig(key: str, fmt: str) -> str:
        return format(r[key], fmt) if key in r else "-"

    def secs(key: str) -> str:  # CPU seconds (wall seconds): at a load of 4-10 the wall time says little
        cpu = r.get(key.replace("_s", "_cpu_s"))
        return fig(key, ".1f") if cpu is None else f"{cpu:.1f} ({r[key]:.1f})"
    rss = fig("peak_rss_mb", ".0f")
    if "sim_peak_rss_mb" in r:
        rss += f" ({r['sim_peak_rss_mb']:.0f} / {r['rss_bound_mb']:.0f})"
    return " | ".join((secs("ipu_compile_s"), secs("simulate_s"), rss, fig("load_avg", ".1f")))


def corpus_table(rows: list[dict]) -> str:
    out = ["| model | ipu: simulated latency (us) | cpu: measured latency (us) | supersteps | peak tile SRAM (KiB) "
           "| max rel. error vs reference | ipu compile CPU s (wall s) | simulate CPU s (wall s) "
           "| peak RSS (MB) (after the ipu simulation / issue 39's bound) | load avg |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        tail = _process_figures(r)
        if "error" in r:
            out.append(f"| {r['model']} | refused: {r['error'][:200]} | - | - | - | - | {tail} |")
        elif "crash" in r:
            out.append(f"| {r['model']} | CRASH: {r['crash'][:200]} | - | - | - | - | {tail} |")
        elif "latency_us" not in r:
            out.append(f"| {r['model']} | {r.get('over_budget', '?')} | - | - | - | - | {tail} |")
        else:
            cpu = f"{r['cpu_us']:.0f}" if "cpu_us" in r else r.get("cpu_note", "-")
            if "max_rel_err" in r:
                err = f"{r['max_rel_err']:.1e}"
                if not r["max_rel_err"] <= MISMATCH_TOLERANCE:
                    err = f"MISMATCH {err}"
            else:
                err = r.get("over_budget", "placed only (not simulated)")
            out.append(f"| {r['model']} | {r['latency_us']:.1f} (simulated) | {cpu} | {r['supersteps']} "
                       f"| {r['tile_peak_bytes'] / 1024:.0f} | {err} | {tail} |")
    return "\n".join(out)


def _peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM: its own address space; ru_maxrss survives exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child_row(name: str, args) -> dict:
    """One model's row, measured in a child process of this script."""
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "row.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--corpus", "--in-process", "--models", name,
               "--json", out, "--runs", str(args.runs), "--size", args.size, "--budget", str(args.budget)]
        if args.skip_run:
            cmd.append("--skip-run")
        if args.skip_cpu:
            cmd.append("--skip-cpu")
        if args.cpu_veus:
            cmd += ["--cpu-veus", str(args.cpu_veus)]
        limit = 2 * args.budget + CHILD_SLACK_S
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            return {"model": name, "over_budget": f"child process over {limit} s (export + both budgets), killed"}
        try:
            with open(out, encoding="utf-8") as f:
                return json.load(f)[0]
        except (OSError, ValueError, IndexError):
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
            return {"model": name, "crash": f"child process exited with {proc.returncode}: {last}"}


def main_corpus(args) -> int:
    names = args.models.split(",") if args.models else _corpus_names()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            load_avg = os.getloadavg()[0]
            if args.in_process:
                row = corpus_row(name, folder, args.runs, args.size, args.budget, args.skip_run, args.cpu_veus,
                                 args.skip_cpu)
                row["peak_rss_mb"] = _peak_rss_mb()
            else:
                row = _child_row(name, args)
            row["load_avg"] = load_avg
            rows.append(row)
            print(corpus_table([row]).splitlines()[-1], file=sys.stderr, flush=True)
            if args.json:  # after every model: a long run that is stopped keeps what it measured
                with open(args.json, "w", encoding="utf-8") as f:
                    json.dump(rows, f, indent=1)
    print(corpus_table(rows))
    return 0




def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    full = [e.name for e in zoo.list_models() if not e.name.endswith("-small")]
    ap.add_argument("--models", default=",".join(full))
    ap.add_argument("--vdevice", default="gc200")
    ap.add_argument("--budget", type=int, default=300, help="seconds per model")
    ap.add_argument("--json")
    ap.add_argument("--corpus", action="store_true", help="small zoo + torch exports: run and compare with cpu")
    ap.add_argument("--runs", type=int, default=5, help="timed cpu runs per model (--corpus)")
    ap.add_argument("--size", default="ci", choices=("ci", "full"), help="size of the corpus:NAME models (--corpus)")
    ap.add_argument("--cpu-veus", type=int, help="--corpus: the cpu backend's worker count (its default: every core)")
    ap.add_argument("--skip-run", action="store_true", help="--corpus: place only (no simulation, no cpu timing)")
    ap.add_argument("--skip-cpu", action="store_true", help="--corpus: no cpu backend column (the ipu side only)")
    ap.add_argument("--in-process", action="store_true",
                    help="--corpus: measure every model in this process (default: one child process per model)")
    ap.add_argument("--export", metavar="NAME", help="only write NAME's model and feeds to --to")
    ap.add_argument("--to", metavar="PREFIX", help="--export: PREFIX.onnx, PREFIX.feeds.npz, PREFIX.feeds.json")
    args = ap.parse_args(argv)
    if args.export:
        export_to(args.export, args.to, args.size)
        return 0
    if args.corpus:
        if args.models == ",".join(full):
            args.models = ""
        return main_corpus(args)
    rows = []
    for name in args.models.split(","):
        new = bench_model(name, args.vdevice, args.budget)
        rows.extend(new)
        print("\n".join(table(new).splitlines()[2:]), file=sys.stderr, flush=True)
    print(table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
