"""Which nodes the GPU backends refuse, without compiling or running anything.

    python ci/gpu_coverage.py --graphs 400 --seed 0          # the fuzzer's random graphs
    python ci/gpu_coverage.py --zoo --torch                  # zoo models and the test suite's torch exports
    python ci/gpu_coverage.py --model a.onnx b.onnx
    python ci/gpu_coverage.py --corpus                       # the corpus (ci/corpus/) at ci size
    python ci/gpu_coverage.py --corpus --models bert,opt --run opencl,emulator   # and run them
    python ci/gpu_coverage.py --real --models vad,ocr-cls --run emulator         # ci/real_models.py's, run
    python ci/gpu_coverage.py --first-run --size full --models resnet18,bert    # PoCL's first run
    python ci/gpu_coverage.py --first-run --split --size full --models swin      # its parts
    python ci/gpu_coverage.py --first-run --compile cuda,rocm --models real:vgg19,real:vad   # ci/real_models.py's

For each model: the opencl backend's passes, then every node lowered (``unsupported``); refusals are
counted by op and by the first words of the reason.  Graphs the cpu backend would not compile without
falling back are counted apart (they are not the GPU backends' to run).  With ``--run``, each corpus
model that compiles (and each ``--real`` model, on its own feeds) is also run on ``opencl`` (PoCL here)
and, for ``emulator``, compiled for ``cuda`` and run by the CuPy runner on the CUDA-semantics CPU
emulator (``backends/gpu/emulation``), both against ``reference`` on the corpus's feeds (rtol 1e-3),
one line per model and target.

``--first-run`` times, per corpus model in a fresh process (PoCL's kernel cache off, so its kernel
compiler runs as on a machine that never built the program), ``rammer.compile`` for opencl, the
first ``run`` (PoCL builds the kernel for its work-group size on the first launch) and a second
one, wall clock and the process's CPU time (the CPU time is what a loaded machine does not
inflate), with the build options chosen, and checks the outputs against ``reference``.  With
``--split``, the kernel is first launched once with an all-zero segment table (no work), so the first
run's two costs are timed apart: PoCL's work-group function (its kernel compiler) and the run itself.
A name ``real:NAME`` is a model of ``ci/real_models.py`` (its wheels, onnx's test models or a torch export,
with its feeds; ``--size`` does not apply).  ``--compile cuda,rocm`` also times ``rammer.compile`` for each
of those backends (``emit`` to a temporary folder, as ``rammer compile --emit`` does), each in a fresh
process of its own before the opencl one, as CPU seconds of that process.  ``--src TREE`` runs those
processes on an earlier rammer's ``core/`` and ``backends/`` (a worktree of main: a before/after).
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import time
from typing import Any


def _reason_key(why: str) -> str:
    why = re.sub(r"^[^:]*: no GPU rKernel for ", "", why)
    why = re.sub(r"'[^']*'", "'_'", why)
    why = re.sub(r"\d+", "N", why)
    return why[:110]


def corpus_models(size: str = "ci", names: str = "") -> list[tuple[str, object]]:
    """``(name, (onnx bytes, input shapes, feeds))`` of the corpus entries (all, or ``names``)."""
    sys.path.insert(0, "ci")
    import corpus  # type: ignore

    out: list[tuple[str, object]] = []
    for entry in corpus.select(names):
        built = corpus.build(entry, size)
        out.append((entry.name, (built.onnx, {k: v.shape for k, v in built.feeds.items()}, built.feeds)))
    return out


def model_source(name: str, size: str = "ci") -> tuple[bytes, dict, dict]:
    """``(onnx bytes, input shapes, feeds)`` of a corpus entry, or of ``real:NAME`` (ci/real_models.py)."""
    if name.startswith("real:"):
        sys.path.insert(0, "ci")
        import real_models  # type: ignore

        entry = next((m for m in real_models.MODELS if m.name == name[5:]), None)
        if entry is None:
            raise SystemExit(f"{name}: not a model of ci/real_models.py (--list there shows them)")
        data = real_models.model_bytes(entry)
        feeds = real_models.feeds_for(entry, data)
        return data, {k: v.shape for k, v in feeds.items()}, feeds
    (_, (source, shapes, feeds)), = corpus_models(size, name)  # type: ignore[misc]
    return source, shapes, feeds  # type: ignore[return-value]


def _cpu_seconds() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def compile_only(name: str, size: str, backend: str) -> str:
    """One line: ``rammer.compile`` of ``name`` for ``backend`` with ``emit`` (this process), wall and CPU s."""
    import tempfile

    import rammer

    source, shapes, _ = model_source(name, size)
    with tempfile.TemporaryDirectory() as emit:
        w0, c0 = time.perf_counter(), _cpu_seconds()
        compiled = rammer.compile(source, backend=backend, input_shapes=shapes, emit=emit)
        w1, c1 = time.perf_counter(), _cpu_seconds()
    report = getattr(compiled.executable, "report", None) or {}
    return (f"{name} {backend}: compile {w1 - w0:.1f} s (cpu {c1 - c0:.1f}); "
            f"{report.get('rtasks', '?')} rTasks, {report.get('blocks', '?')} blocks")


def _compare(got: dict, want: dict, rtol: float = 1e-3) -> tuple[bool, float]:
    """Whether every output matches (its dtype, NaN where reference has NaN), and the worst relative error."""
    import numpy as np

    worst, ok = 0.0, True
    for k, w in want.items():
        if np.asarray(got[k]).dtype != np.asarray(w).dtype:
            return False, float("nan")
        w, g = np.asarray(w, np.float64), np.asarray(got[k], np.float64)
        if g.shape != w.shape or not np.array_equal(np.isnan(g), np.isnan(w)):
            return False, float("nan")
        fin = ~np.isnan(w)
        err = np.abs(g[fin] - w[fin]) / (np.abs(w[fin]) + 1e-3) if fin.any() else np.zeros(1)
        worst = max(worst, float(err.max()) if err.size else 0.0)
        ok &= bool(np.allclose(g[fin], w[fin], rtol=rtol, atol=1e-4))
    return ok, worst


def run_model(label: str, source: bytes, feeds: dict, target: str, mode: str | None = None) -> str:
    """One line: ``label target ok|MISMATCH|FAIL ...`` for ``target`` "opencl" or "emulator"; ``mode``: the
    execution mode (None: the backend's default for its device, persistent on cuda, wave on PoCL)."""
    import rammer

    shapes = {k: tuple(getattr(v, "shape", ())) for k, v in feeds.items()}  # dynamic dims (a batch) fixed
    options = {"mode": mode} if mode else {}
    t0 = time.perf_counter()
    try:
        if target == "emulator":
            from rammer.backends.gpu.emulation.fake_cupy import make_cupy

            saved = sys.modules.get("cupy")
            sys.modules["cupy"] = make_cupy()
            try:
                compiled = rammer.compile(source, backend="cuda", input_shapes=shapes, **options)
                got = compiled.run(feeds)
            finally:
                if saved is None:
                    sys.modules.pop("cupy", None)
                else:
                    sys.modules["cupy"] = saved
        else:
            compiled = rammer.compile(source, backend=target, input_shapes=shapes, **options)
            got = compiled.run(feeds)
    except Exception as exc:  # a report line per model, never a stop
        return f"{label} {target} FAIL {type(exc).__name__}: {str(exc)[:200]}"
    seconds = time.perf_counter() - t0
    want = rammer.compile(source, backend="reference", input_shapes=shapes).run(feeds)
    ok, worst = _compare(got, want)
    return (f"{label} {target} {'ok' if ok else 'MISMATCH'} max_rel={worst:.1e} compile+run={seconds:.1f}s "
            f"mode={getattr(compiled.executable, 'report', {}).get('mode', '?')}")


def _empty_launch(executable: object) -> None:
    """Launch ``executable``'s kernel once with an all-zero ``ptab`` (no segment or row for any block:
    no work, no counter touched), so PoCL builds its work-group function, timed apart from the run."""
    import numpy as np

    ex: Any = executable
    p, cl = ex.program, ex.cl
    empty = np.zeros_like(p.tables["ptab"])
    ptab = cl.Buffer(ex.ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=empty)
    tables = [ptab if key == "ptab" else buf for key, buf in zip(p.tables, ex.tables)]
    ex.kernel(ex.queue, (p.blocks * p.block_threads,), (p.block_threads,), ex.arena, ex.counters, np.int32(0),
              *tables)
    ex.queue.finish()


def first_run(name: str, size: str, split: bool = False, once: bool = False, mode: str | None = None) -> str:
    """One line: compile, first and second run of corpus model ``name`` on opencl (this process);
    ``split``: the first run's work-group function build (an empty launch first) apart from the run;
    ``mode``: the execution mode (None: the backend's default for the device)."""
    import rammer

    cpu = _cpu_seconds
    source, shapes, feeds = model_source(name, size)
    marks = [(time.perf_counter(), cpu())]
    compiled = rammer.compile(source, backend="opencl", input_shapes=shapes, **({"mode": mode} if mode else {}))
    marks.append((time.perf_counter(), cpu()))
    if split:
        _empty_launch(compiled.executable)
        marks.append((time.perf_counter(), cpu()))
    got = compiled.run(feeds)
    marks.append((time.perf_counter(), cpu()))
    if not once:
        compiled.run(feeds)
    marks.append((time.perf_counter(), cpu()))
    want = rammer.compile(source, backend="reference", input_shapes=shapes).run(feeds)
    ok, worst = _compare(got, want)
    (w0, c0), (w1, c1), *rest = marks
    (w2, c2), (w3, c3) = rest[-2:]
    ex = compiled.executable
    from rammer.backends.opencl.runtime import barrier_rkernels

    wg = ""
    if split:  # the first run's two parts: PoCL's work-group function, then the run itself
        (wg_w, wg_c), = rest[:1]
        wg = (f"work-group function {wg_w - w1:.1f} s (cpu {wg_c - c1:.1f}) + "
              f"run {w2 - wg_w:.1f} s (cpu {c2 - wg_c:.1f}) = ")
    label = f"{name} opencl" if name.startswith("real:") else f"{name} {size}"
    return (f"{label}: compile {w1 - w0:.1f} s (cpu {c1 - c0:.1f}), "
            f"first run {wg}{w2 - w1:.1f} s (cpu {c2 - c1:.1f}), second run {w3 - w2:.2f} s (cpu {c3 - c2:.2f}); "
            f"{'ok' if ok else 'MISMATCH'} max_rel={worst:.1e}; "
            f"build options '{ex.build_options}', {len(ex.report['kernels'])} rKernels "
            f"({barrier_rkernels(ex.program.kernels)} with barriers), "
            f"{ex.report['rtasks']} rTasks, {ex.report['blocks']} blocks, {ex.report['mode']} mode "
            f"({ex.report['launches_per_run']} launches a run)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", type=int, default=0, help="random graphs of the fuzzer's generator")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--zoo", action="store_true", help="the small zoo models")
    ap.add_argument("--real", action="store_true", help="the models of ci/real_models.py found here")
    ap.add_argument("--model", nargs="*", default=[])
    ap.add_argument("--corpus", action="store_true", help="the corpus models (ci/corpus/) at --size")
    ap.add_argument("--size", default="ci", choices=("ci", "full"))
    ap.add_argument("--models", default="", help="with --corpus or --real: these names only (comma-separated)")
    ap.add_argument("--run", default="", help="with --corpus or --real: run what compiles on opencl and/or emulator")
    ap.add_argument("--backend", default="opencl")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--first-run", action="store_true",
                    help="with --models: time compile and the first runs on opencl, each model in a fresh process")
    ap.add_argument("--split", action="store_true",
                    help="with --first-run: time PoCL's work-group function (an empty launch) apart from the run")
    ap.add_argument("--compile", default="",
                    help="with --first-run: also time rammer.compile for these backends (e.g. cuda,rocm)")
    ap.add_argument("--once", action="store_true", help="with --first-run: no second run")
    ap.add_argument("--mode", default="", choices=("", "persistent", "wave"),
                    help="with --first-run or --run: the execution mode (default: the backend's for the device)")
    ap.add_argument("--src", default="", help="with --first-run: import rammer from this tree's core/ and backends/")
    ap.add_argument("--first-run-one", default="", help=argparse.SUPPRESS)
    ap.add_argument("--compile-one", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.src:
        sys.path.insert(0, "ci")
        from session_creation import _use_source  # type: ignore

        _use_source(args.src)
    if args.compile_one:
        print(compile_only(args.first_run_one, args.size, args.compile_one), flush=True)
        return 0
    if args.first_run_one:
        print(first_run(args.first_run_one, args.size, args.split, args.once, args.mode or None), flush=True)
        return 0
    if args.first_run:
        import os
        import subprocess

        env = {**os.environ, "POCL_KERNEL_CACHE": "0"}
        for name in [n for n in args.models.split(",") if n]:
            for backend in [b for b in args.compile.split(",") if b] + ["opencl"]:
                one = (["--split"] if args.split else []) + (["--once"] if args.once else [])
                if backend != "opencl":
                    one = ["--compile-one", backend]
                one += ["--src", args.src] if args.src else []
                one += ["--mode", args.mode] if args.mode and backend == "opencl" else []
                done = subprocess.run([sys.executable, __file__, "--first-run-one", name, "--size", args.size, *one],
                                      env=env, capture_output=True, text=True)
                lines = [ln for ln in done.stdout.splitlines() if ln.startswith(name)]
                print(lines[-1] if lines and done.returncode == 0 else
                      f"{name} {backend}: FAIL rc={done.returncode} {done.stderr.strip()[-300:]}", flush=True)
        return 0

    from rammer import plugins
    from rammer.errors import RammerError
    from rammer.frontend import load
    from rammer.ml import lower_ml
    from rammer.ml.strategy import compiles_tree_kernel

    be = plugins.get_backend(args.backend, compile_only=True)
    models: list[tuple[str, object]] = []
    feeds_of: dict[str, dict] = {}
    if args.graphs:
        from rammer.fuzzing.graphs import GeneratorError, random_model

        for seed in range(args.seed, args.seed + args.graphs):
            try:
                models.append((f"graphs:{seed}", random_model(seed)[0]))
            except GeneratorError:
                pass
    if args.zoo:
        from rammer import zoo

        for entry in zoo.list_models():
            if entry.name.endswith("-small"):
                models.append((entry.name, zoo.build(entry.name)))
    if args.real:
        sys.path.insert(0, "ci")
        import real_models  # type: ignore

        wanted = {n.removeprefix("real:") for n in args.models.split(",") if n}
        for m in real_models.MODELS:
            if wanted and m.name not in wanted:
                continue
            try:
                data = real_models.model_bytes(m)
                models.append((m.name, (data, m.shapes or None)))
                if args.run:  # the model's own feeds (the VAD's sample rate...), as --first-run uses
                    feeds_of[m.name] = real_models.feeds_for(m, data)
            except Exception as exc:  # a source not on this machine
                print(f"{m.name}: skipped: {str(exc)[:80]}")
    for path in args.model:
        models.append((path, path))
    if args.corpus:
        for label, (onnx_bytes, shapes, feeds) in corpus_models(args.size, args.models):  # type: ignore[misc]
            models.append((label, (onnx_bytes, shapes)))
            feeds_of[label] = feeds
    compiled_ok: list[str] = []

    refused_models = 0
    by_op: collections.Counter = collections.Counter()
    by_reason: collections.Counter = collections.Counter()
    t0 = time.perf_counter()
    for label, model in models:
        try:
            src, shapes = model if isinstance(model, tuple) else (model, None)
            # ai.onnx.ml nodes become tensor ops first, as rammer.compile does for every backend
            graph = lower_ml(load(src, shapes), device=be.capabilities.device,
                             tree_kernel=compiles_tree_kernel(be.capabilities))
            bad = be.unsupported_nodes(graph)
        except RammerError as exc:
            print(f"{label}: not loadable: {exc}")
            continue
        if bad:
            refused_models += 1
            ops = sorted({n.op_type for n in bad})
            for op in ops:
                by_op[op] += 1
            from rammer.backends.gpu.compiler import unsupported

            reasons = unsupported(be.prepare_graph(graph).graph)
            for key in sorted({_reason_key(why) for _, why in reasons}):
                by_reason[key] += 1
            if args.verbose:
                print(f"{label}: " + "; ".join(why for _, why in reasons[:3]))
        else:
            compiled_ok.append(label)
    print(f"{len(models)} models, {refused_models} refused ({100.0 * refused_models / max(len(models), 1):.0f}%) "
          f"in {time.perf_counter() - t0:.1f} s")
    for op, count in by_op.most_common():
        print(f"  {count:5d}  {op}")
    print("by reason (models):")
    for why, count in by_reason.most_common():
        print(f"  {count:5d}  {why}")
    if args.corpus:
        print("refused: " + " ".join(label for label, _ in models if label not in compiled_ok))
    for target in [t for t in args.run.split(",") if t]:
        for label in compiled_ok:
            if label in feeds_of:
                src = dict(models)[label]
                print(run_model(label, src[0], feeds_of[label], target, args.mode or None), flush=True)  # type: ignore[index]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
