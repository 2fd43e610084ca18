"""The GPU benchmark: every zoo model at full size and the torch.onnx exports on a real NVIDIA GPU (``cuda``)
or AMD GPU (``rocm``), checked against ``reference`` and timed at batch 1.

    python ci/gpu_bench.py [--backend cuda] [--vdevice a100] [--models ...] [--torch] [--repeat 50] [--json F]

Per model: rammer's persistent mode (one launch per inference) and wave mode (one launch per wave), the
launches per inference, the co-resident grid and the theoretical occupancy (from the compiled kernel's
registers and shared memory), the simulated makespan next to the measured time; baselines in the same
process: onnxruntime's CUDA provider when ``onnxruntime-gpu`` is installed, and for the torch exports PyTorch
eager and CUDA-graph replay of the same module.  Times are medians of ``--repeat`` runs after warm-up,
device-synchronised (CuPy / torch events); each rammer run includes copying inputs in and outputs out.

Without a GPU it compiles everything and says what is missing (exit 2): run ``bash ci/gpu_bench.sh`` on a
machine with one (it installs from a package registry; on the lent machines, which reach none, run
``bash ci/gpu_check.sh`` instead).

Robust to a bad model: every model's row is appended to ``--json`` (JSON lines) as soon as it is done, each
step is guarded (a failure is recorded in the row and the next model runs), and onnxruntime's CUDA baseline
is recorded only when the session really runs on the CUDA provider (``get_providers()`` after creation:
onnxruntime silently falls back to its CPU provider when the CUDA one fails to load).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_sets import ZOO, torch_protos, zoo_protos  # noqa: E402

TARGETS = {"lstm-tc": 0.5, "nasnet": 0.7, "resnext": 0.7, "seq2seq": 0.7, "alexnet": 1.2}


def _models(args) -> list[tuple[str, object, object]]:
    """``(name, onnx model, torch module or None)``."""
    out = [(n, proto, None) for n, proto in zoo_protos(args.models)]
    return out + (torch_protos() if args.torch else [])


def _median_ms(fn, sync, repeat: int, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def _torch_baselines(module, feeds: dict, repeat: int) -> dict:
    import torch

    dev = torch.device("cuda")
    module = module.to(dev).eval()
    args = [torch.from_numpy(v).to(dev) for v in feeds.values()]
    out: dict = {}
    with torch.no_grad():
        out["torch_eager_ms"] = _median_ms(lambda: module(*args), torch.cuda.synchronize, repeat)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                module(*args)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            module(*args)
        out["torch_cuda_graph_ms"] = _median_ms(graph.replay, torch.cuda.synchronize, repeat)
    return out


def _ort_cuda(model, feeds: dict, repeat: int) -> tuple[float | None, str]:
    """onnxruntime on its CUDA provider: ``(median ms, "")``, or ``(None, why not)``."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None, "onnxruntime is not installed"
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return None, "onnxruntime has no CUDA provider (install onnxruntime-gpu)"
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CUDAExecutionProvider"])
    used = sess.get_providers()
    if not used or used[0] != "CUDAExecutionProvider":  # the CUDA provider failed to load: CPU fallback
        return None, f"onnxruntime's CUDA provider did not load (session runs on {used})"
    return _median_ms(lambda: sess.run(None, feeds), lambda: None, repeat), ""


def _append(path: str | None, row: dict) -> None:
    """One JSON line per model, written when the model is done (a later hang or crash keeps it)."""
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row, default=str) + "\n")


def _guarded(row: dict, key: str, fn):
    """``fn()``, or ``None`` with the error recorded in ``row[key + "_error"]``."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - one model's failure must not lose the others
        row[f"{key}_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="cuda", choices=("cuda", "rocm"))
    parser.add_argument("--vdevice", default=None, help="GPU preset the schedule is made for (default: backend's)")
    parser.add_argument("--models", default=ZOO)
    parser.add_argument("--torch", action="store_true")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--json", default=None, help="append one JSON line per model here, as each is done")
    args = parser.parse_args(argv)

    import numpy as np

    import rammer
    from rammer import plugins
    from rammer.api import random_feeds
    from rammer.errors import RammerError
    from rammer.frontend import load
    from rammer.schedule import simulate

    be = plugins.backends()[args.backend]
    avail = be.availability()
    if args.json and os.path.exists(args.json):
        os.remove(args.json)
    failed = 0
    for name, model, module in _models(args):
        options = {"mode": "persistent", **({"vdevice": args.vdevice} if args.vdevice else {})}
        row: dict = {"model": name}
        try:
            exe = be.compile(load(model), options)
        except RammerError as exc:
            row["refused"] = str(exc)[:200]
            _append(args.json, row)
            print(f"{name}: refused: {row['refused']}", flush=True)
            continue
        row.update(blocks=exe.program.blocks, launches_persistent=1,
                   simulated_ms=simulate(exe.schedule).makespan_us / 1e3)
        if not avail.ok:
            _append(args.json, row)
            print(f"{name}: compiled ({exe.program.blocks} blocks, simulated {row['simulated_ms']:.3f} ms); "
                  f"not run: {avail.reason}", flush=True)
            continue
        occ = _guarded(row, "occupancy", exe.occupancy)  # needs the vendor compiler
        if occ:
            row.update(occ)
        compiled = {m: _guarded(row, f"{m}_compile",
                                lambda m=m: rammer.compile(model, backend=args.backend, **{**options, "mode": m}))
                    for m in ("persistent", "wave")}
        feeds = random_feeds(next(c for c in compiled.values() if c).inputs, seed=0) if any(compiled.values()) \
            else None
        want = _guarded(row, "reference", lambda: rammer.compile(model, backend="reference").run(feeds)) \
            if feeds else None
        import cupy

        sync = cupy.cuda.Device().synchronize
        for mode, cm in compiled.items():
            if cm is None or want is None:
                continue
            got = _guarded(row, f"{mode}_run", lambda cm=cm: cm.run(feeds))
            if got is None:
                continue
            row[f"{mode}_max_rel_err"] = max(float(np.max(np.abs(got[k] - want[k])) /
                                                 (np.max(np.abs(want[k])) + 1e-12)) for k in want)
            row[f"{mode}_ms"] = _guarded(row, f"{mode}_time",
                                         lambda cm=cm: _median_ms(lambda: cm.run(feeds), sync, args.repeat))
        if compiled["wave"] is not None:
            row["launches_wave"] = compiled["wave"].executable.report["launches_per_run"]
        if feeds is not None:
            ort = _guarded(row, "ort_cuda", lambda: _ort_cuda(model, feeds, args.repeat))
            if ort is not None:
                ms, why = ort
                if ms is not None:
                    row["ort_cuda_ms"] = ms
                else:
                    row["ort_cuda_skipped"] = why
        if module is not None and feeds is not None:
            row.update(_guarded(row, "torch", lambda: _torch_baselines(module, feeds, args.repeat)) or {})
        base = row.get("torch_cuda_graph_ms") or row.get("ort_cuda_ms")
        if base and row.get("persistent_ms"):
            row["ratio"] = row["persistent_ms"] / base
            row["target"] = TARGETS.get(name)
        failed += any(k.endswith("_error") for k in row)
        _append(args.json, row)
        print(json.dumps(row, default=str), flush=True)
    if not avail.ok:
        print(f"\nno GPU run: {args.backend} is unavailable here ({avail.reason}); everything above compiled. "
              f"Run `bash ci/gpu_bench.sh` on a machine with the GPU.")
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
