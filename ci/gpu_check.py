"""The GPU check for a lent machine (``bash ci/gpu_check.sh``): one command, at most 8 minutes, nothing
downloaded.  Every step runs in its own subprocess with a timeout, and its result is appended to
``$OUT/gpu-check.jsonl`` (one JSON object per line) the moment it finishes, so a hang or a crash loses
nothing measured before it.

Steps, in this order (the slow full-size models last, so a short budget still yields the rest):

1. ``probe``: CuPy, the device (name, multiprocessors), torch and its CUDA, nvcc, compute-sanitizer.
   Without a GPU the check stops here: it prints ``no GPU present`` and exits 3.
2. ``warm``: the baseline backend (``cpu``) compiles the small models once, filling numba's disk cache
   (when it does not finish in 3 minutes, the rest is checked against ``reference`` and a line says so).
3. ``correct`` for every small zoo model: compiled for ``cuda`` in persistent and wave mode, run twice
   (fresh feeds; the second run moves the epoch) against the ``cpu`` backend; the max relative error, the
   launches per inference (counted at the kernel), compile and first-run seconds.
4. ``racecheck``: ``compute-sanitizer --tool racecheck`` on one small model (persistent and wave).
5. ``torch`` for every torch.onnx export of the test suite (tests/torch_models.py): correctness as above,
   then times with CUDA events, median of ``--repeat``: rammer persistent and wave (each run includes
   copying the inputs in and the outputs out) against PyTorch eager and CUDA-graph replay of the same
   module on the same GPU, in the same process.
6. ``correct`` for every full-size zoo model.

``RAMMER_GPU_CHECK_EMULATED=1`` runs the steps on the CUDA emulator's stand-in ``cupy`` (a dry run of
this script's plumbing; tests/gpu/test_gpu_check_script.py uses it): no figure from it is a GPU's.

Exit status: 0 every step passed; 1 a step failed or timed out (see the JSON lines); 3 no GPU present
(nothing was run; the probe's line says why).

    python ci/gpu_check.py --out DIR [--budget 470] [--repeat 30] [--baseline cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ["alexnet-small", "lstm-tc-small", "resnext-small", "deepspeech2-small", "seq2seq-small", "nasnet-small"]
FULL = ["alexnet", "resnext", "lstm-tc", "seq2seq", "deepspeech2", "nasnet"]
NO_GPU_EXIT = 3


# -- steps (each runs in a child process: `python ci/gpu_check.py --step KIND NAME`) --------------------------

def _probe(_: str, args: argparse.Namespace) -> dict[str, Any]:
    row: dict[str, Any] = {"python": sys.version.split()[0], "nvcc": shutil.which("nvcc"),
                           "compute_sanitizer": shutil.which("compute-sanitizer")}
    try:
        import torch

        row.update(torch=torch.__version__, torch_cuda=torch.cuda.is_available())
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        row["torch"] = f"not importable: {type(exc).__name__}"
    from rammer.backends.gpu.native import cupy_gpu

    cupy, why = cupy_gpu()
    if cupy is None:
        return {**row, "gpu": False, "reason": why}
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return {**row, "gpu": True, "device": name, "multiprocessors": int(props["multiProcessorCount"]),
            "cupy": cupy.__version__}


def _vdevice(args: argparse.Namespace) -> dict[str, str]:
    if args.vdevice:
        return {"vdevice": args.vdevice}
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return {"vdevice": "h100"} if ("H100" in name or "H200" in name) else {}


def _model(name: str) -> tuple[Any, Any, dict | None]:
    """``(onnx model or path, torch module or None, feeds or None)``."""
    if name.startswith("torch:"):
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        import torch_models

        folder = tempfile.mkdtemp(prefix="rammer-gpu-check-")
        raw, opt = os.path.join(folder, "raw.onnx"), os.path.join(folder, "model.onnx")
        feeds = torch_models.export_dynamo(name[6:], raw, opt)
        return opt, torch_models.build_model(name[6:]), feeds
    from rammer import zoo

    return zoo.build(name, seed=0), None, None


def _err(got: dict, want: dict) -> float:
    import numpy as np

    return max(float(np.max(np.abs(got[k].astype(np.float64) - want[k]) / np.maximum(1.0, np.abs(want[k]))))
               if want[k].size else 0.0 for k in want)


def _count_launches(compiled) -> list[int]:
    """Wrap the runner's kernel so every launch is counted."""
    runner = compiled.executable._runner
    counter = [0]
    real = runner.fn

    def counted(*a, **kw):
        counter[0] += 1
        return real(*a, **kw)

    runner.fn = counted
    return counter


def _correct(name: str, args: argparse.Namespace, keep: bool = False) -> dict[str, Any]:
    import rammer

    model, module, feeds = _model(name)
    base = rammer.compile(model, backend=args.baseline)
    # a torch export's example inputs (token ids in range) for both runs; zoo models: two random draws
    other = feeds or base.random_feeds(seed=1)
    feeds = feeds or base.random_feeds(seed=0)
    want, want2 = base.run(feeds), base.run(other)
    row: dict[str, Any] = {"baseline": args.baseline}
    compiled = {}
    for mode in ("persistent", "wave"):
        t = time.perf_counter()
        cm = rammer.compile(model, backend="cuda", mode=mode, **_vdevice(args))
        row[f"{mode}_compile_s"] = round(time.perf_counter() - t, 3)
        t = time.perf_counter()
        row[f"{mode}_max_rel_err"] = _err(cm.run(feeds), want)
        row[f"{mode}_first_run_s"] = round(time.perf_counter() - t, 3)
        counter = _count_launches(cm)
        row[f"{mode}_max_rel_err_2nd_run"] = _err(cm.run(other), want2)
        row[f"{mode}_launches_per_inference"] = counter[0]
        row[f"{mode}_blocks"] = cm.executable.program.blocks
        compiled[mode] = cm
    for mode, cm in compiled.items():  # the run with its host copies, then the device program alone
        row[f"{mode}_ms"] = _events_ms(lambda cm=cm: cm.run(feeds), args.repeat)
        row[f"{mode}_kernel_ms"] = _events_ms(cm.executable._runner.launch, args.repeat)
    row["ok"] = all(row[f"{m}_max_rel_err{s}"] <= args.tolerance for m in compiled for s in ("", "_2nd_run"))
    if keep:
        row["_compiled"], row["_module"], row["_feeds"] = compiled, module, feeds
    return row


def _events_ms(fn, repeat: int, warmup: int = 5) -> float:
    """Median milliseconds of ``fn`` between two CUDA events on the current stream."""
    import cupy

    for _ in range(min(warmup, repeat)):
        fn()
    times = []
    for _ in range(repeat):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end))
    return statistics.median(times)


def _torch_ms(module, feeds: dict, repeat: int) -> dict[str, float]:
    import torch

    dev = torch.device("cuda")
    module = module.to(dev).eval()
    inputs = [torch.from_numpy(v).to(dev) for v in feeds.values()]

    def timed(fn) -> float:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    out: dict[str, float] = {}
    with torch.no_grad():
        out["torch_eager_ms"] = timed(lambda: module(*inputs))
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                module(*inputs)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            module(*inputs)
        out["torch_cuda_graph_ms"] = timed(graph.replay)
    return out


def _torch(name: str, args: argparse.Namespace) -> dict[str, Any]:
    row = _correct(name, args, keep=True)
    module, feeds = row.pop("_module"), row.pop("_feeds")
    row.pop("_compiled")
    row.update(_torch_ms(module, feeds, args.repeat))
    row["persistent_vs_cuda_graph"] = row["persistent_ms"] / row["torch_cuda_graph_ms"]
    row["persistent_kernel_vs_cuda_graph"] = row["persistent_kernel_ms"] / row["torch_cuda_graph_ms"]
    row["timing"] = (f"CUDA events, median of {args.repeat} after 5 warm-up runs; rammer's *_ms includes the "
                     f"input and output copies, *_kernel_ms and torch's do not")
    return row


def _run_once(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One run per mode, for compute-sanitizer (it watches this process)."""
    import rammer

    model, _, _ = _model(name)
    out = {}
    for mode in ("persistent", "wave"):
        cm = rammer.compile(model, backend="cuda", mode=mode, **_vdevice(args))
        cm.run(cm.random_feeds(seed=0))
        out[mode] = "ran"
    return out


def _warm(_: str, args: argparse.Namespace) -> dict[str, Any]:
    """Compile and run the small zoo models on the baseline backend once: the cpu backend's numba
    kernels are cached on disk, so the steps after this one do not each pay the cold JIT."""
    import rammer
    from rammer import zoo

    t = time.perf_counter()
    for name in SMALL:
        compiled = rammer.compile(zoo.build(name, seed=0), backend=args.baseline)
        compiled.run(compiled.random_feeds(seed=0))
    return {"ok": True, "seconds": round(time.perf_counter() - t, 1)}


STEPS = {"probe": _probe, "warm": _warm, "correct": _correct, "torch": _torch, "run-once": _run_once}


def _child(kind: str, name: str, args: argparse.Namespace) -> int:
    if os.environ.get("RAMMER_GPU_CHECK_EMULATED") == "1":  # the dry run of tests/gpu: the CPU emulator as the GPU
        from rammer.backends.gpu.emulation.fake_cupy import make_cupy

        sys.modules["cupy"] = make_cupy(sms=132, blocks_per_sm=8, name="rammer CPU emulator")
    try:
        row = STEPS[kind](name, args)
    except Exception as exc:  # noqa: BLE001 - one line for the parent
        row = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:600]}"}
    print("RESULT " + json.dumps(row, default=str), flush=True)
    return 0


# -- the parent: one subprocess per step, results appended as they come -----------------------------------

class Log:
    def __init__(self, path: str) -> None:
        self.path = path
        self.failed = 0

    def add(self, row: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row, default=str) + "\n")
        if row.get("ok") is False or row.get("status") in ("failed", "timeout"):
            self.failed += 1
        brief = {k: v for k, v in row.items() if not k.endswith(("_s", "_blocks"))}
        print(json.dumps(brief, default=str)[:400], flush=True)


def _step(log: Log, kind: str, name: str, timeout: float, args: argparse.Namespace,
          prefix: list[str] | None = None) -> dict[str, Any]:
    cmd = [*(prefix or []), sys.executable, os.path.abspath(__file__), "--step", kind, name,
           "--baseline", args.baseline, "--repeat", str(args.repeat), "--tolerance", str(args.tolerance),
           *(["--vdevice", args.vdevice] if args.vdevice else [])]
    t = time.perf_counter()
    row: dict[str, Any] = {"step": kind, "model": name}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stderr or b"")[-800:]
        row.update(status="timeout", ok=False, timeout_s=timeout,
                   stderr_tail=tail.decode(errors="replace") if isinstance(tail, bytes) else tail)
    else:
        result = [line[7:] for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if result:
            row.update(json.loads(result[-1]))
            row.setdefault("status", "done" if row.get("ok", True) else "failed")
        else:
            row.update(status="failed", ok=False, rc=proc.returncode, stderr_tail=proc.stderr[-800:])
        if prefix:  # compute-sanitizer: its summary is in stdout
            summary = [line for line in proc.stdout.splitlines() if "RACECHECK SUMMARY" in line or
                       "ERROR SUMMARY" in line]
            row["sanitizer"] = summary
            hazards = any(" 0 hazards" not in s and "RACECHECK" in s for s in summary) or \
                any("ERROR SUMMARY: 0 errors" not in s and "ERROR SUMMARY" in s for s in summary)
            row["ok"] = bool(summary) and not hazards and row.get("ok", True) is not False
            row["status"] = "done" if row["ok"] else "failed"
    row["elapsed_s"] = round(time.perf_counter() - t, 2)
    log.add(row)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT") or os.path.join(ROOT, "gpu-check-out"))
    parser.add_argument("--budget", type=float, default=470.0, help="seconds for all steps (default 470)")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--baseline", default="cpu", help="the backend results are checked against (default cpu)")
    parser.add_argument("--tolerance", type=float, default=1e-3)
    parser.add_argument("--vdevice", default=None, help="GPU preset (default: h100 on an H100/H200, else the "
                                                        "backend's)")
    parser.add_argument("--small", default=",".join(SMALL), help="small zoo models to check (comma-separated)")
    parser.add_argument("--full", default=",".join(FULL), help="full-size zoo models to check")
    parser.add_argument("--no-torch", action="store_true", help="leave out the torch exports and their timing")
    parser.add_argument("--torch", default="", help="torch exports to check (comma-separated; default all)")
    parser.add_argument("--step", nargs=2, metavar=("KIND", "NAME"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.step:
        return _child(args.step[0], args.step[1], args)

    os.makedirs(args.out, exist_ok=True)
    log = Log(os.path.join(args.out, "gpu-check.jsonl"))
    start = time.perf_counter()
    log.add({"step": "start", "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "budget_s": args.budget})
    probe = _step(log, "probe", "-", 90, args)
    if not probe.get("gpu"):
        print(f"no GPU present: {probe.get('reason') or probe.get('error') or probe.get('stderr_tail')}; "
              f"nothing to check (exit {NO_GPU_EXIT}); results in {log.path}")
        return NO_GPU_EXIT

    if args.baseline != "reference":
        warm = _step(log, "warm", args.baseline, 180, args)
        if not warm.get("ok"):
            log.add({"step": "baseline", "status": "changed", "from": args.baseline, "to": "reference",
                     "reason": "the baseline backend did not warm up in time; results are checked against reference"})
            args.baseline = "reference"
    small, full = [n for n in args.small.split(",") if n], [n for n in args.full.split(",") if n]
    plan: list[tuple[str, str, float, list[str] | None]] = [("correct", n, 75, None) for n in small]
    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer:
        plan.append(("run-once", "alexnet-small", 150, [sanitizer, "--tool", "racecheck", "--print-limit", "20"]))
    else:
        log.add({"step": "racecheck", "status": "skipped", "reason": "compute-sanitizer is not on PATH"})
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    try:
        if args.no_torch:
            raise RuntimeError("--no-torch")
        import torch_models

        chosen = [n for n in args.torch.split(",") if n] or list(torch_models.CASES)
        unknown = sorted(set(chosen) - set(torch_models.CASES))
        if unknown:
            raise RuntimeError(f"unknown torch export(s) {unknown}; known: {sorted(torch_models.CASES)}")
        plan += [("torch", f"torch:{n}", 100, None) for n in chosen]
    except Exception as exc:  # noqa: BLE001 - torch absent: recorded, the rest still runs
        log.add({"step": "torch", "status": "skipped", "reason": f"{type(exc).__name__}: {exc}"[:300]})
    plan += [("correct", n, 120, None) for n in full]

    for kind, name, timeout, prefix in plan:
        left = args.budget - (time.perf_counter() - start)
        if left < 20:
            log.add({"step": kind, "model": name, "status": "skipped", "reason": "the time budget is spent"})
            continue
        _step(log, kind, name, min(timeout, left - 5), args, prefix)
    log.add({"step": "end", "elapsed_s": round(time.perf_counter() - start, 1), "failed": log.failed})
    return 1 if log.failed else 0


if __name__ == "__main__":
    sys.exit(main())
