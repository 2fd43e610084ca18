"""Inference time on a cache hit: the native image's driver and kernels against the numba path.

For each corpus model (full size, its input shapes) one process first fills a compile cache; then,
round by round, alternating, a fresh process gets the model from that cache with the image
(``RAMMER_NATIVE_IMAGE`` unset) or without it (``RAMMER_NATIVE_IMAGE=0``: numba's driver and
entries), runs ``--warmup`` inferences, then times ``--runs`` and reports their median (wall) and
the CPU seconds per inference.  The outputs of both paths are compared bit for bit.

    python ci/native_image_runs.py --models bert,resnet50 --rounds 3 --runs 20
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


def child(onnx_path: str, feeds_path: str, cache: str, veus: int, warmup: int, runs: int) -> dict:
    import numpy as np

    import rammer

    with np.load(feeds_path) as z:
        feeds = {k: z[k] for k in z.files}
    model = rammer.compile(onnx_path, backend="cpu", input_shapes={k: v.shape for k, v in feeds.items()},
                           veus=veus, cache_dir=cache)
    for _ in range(warmup):
        out = model(feeds)
    times = []
    c0 = time.process_time()
    for _ in range(runs):
        t = time.perf_counter()
        out = model(feeds)
        times.append(time.perf_counter() - t)
    cpu = (time.process_time() - c0) / runs
    digest = {k: __import__("hashlib").sha256(np.ascontiguousarray(v).tobytes()).hexdigest() for k, v in out.items()}
    return {"status": model.executable.cache_status, "image": model.executable.image is not None,
            "median_s": statistics.median(times), "cpu_s": cpu, "outputs": digest, "load": os.getloadavg()[0]}


def _run(args: list[str], image: bool) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not image:
        env["RAMMER_NATIVE_IMAGE"] = "0"
    else:
        env.pop("RAMMER_NATIVE_IMAGE", None)
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *args], capture_output=True,
                          text=True, env=env, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="bert,resnet50,lstm-lm")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--veus", type=int, default=2)
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    import corpus

    work = args.work or tempfile.mkdtemp(prefix="native-image-runs-")
    print(f"{'model':<16} {'image ms':>9} {'numba ms':>9} {'ratio':>6} {'image cpu ms':>12} {'numba cpu ms':>12} "
          f"{'same outputs':>12} {'load':>9}")
    for name in [m for m in args.models.split(",") if m]:
        entry = corpus.ENTRIES[name]
        corpus.build(entry, "full", corpus.DEFAULT_CACHE)
        base = os.path.join(corpus.DEFAULT_CACHE, f"{name}-full-{entry.cache_key('full')}")
        cache = os.path.join(work, name)
        cargs = [base + ".onnx", base + ".npz", cache, str(args.veus), str(args.warmup), str(args.runs)]
        _run(cargs[:4] + ["0", "1"], image=True)  # fills the cache (a miss: the numba path) and saves the image
        rows: dict[bool, list[dict]] = {True: [], False: []}
        for _ in range(args.rounds):
            for image in (True, False):
                out = _run(cargs, image)
                if out["status"] != "hit" or out["image"] != image:
                    raise SystemExit(f"{name}: expected a hit {'with' if image else 'without'} the image, got {out}")
                rows[image].append(out)
        med = {k: statistics.median(r["median_s"] for r in v) * 1e3 for k, v in rows.items()}
        cpu = {k: statistics.median(r["cpu_s"] for r in v) * 1e3 for k, v in rows.items()}
        same = all(r["outputs"] == rows[False][0]["outputs"] for r in rows[True] + rows[False])
        loads = [r["load"] for v in rows.values() for r in v]
        print(f"{name:<16} {med[True]:>9.2f} {med[False]:>9.2f} {med[True] / med[False]:>6.2f} {cpu[True]:>12.2f} "
              f"{cpu[False]:>12.2f} {str(same):>12} {min(loads):>4.1f}-{max(loads):<4.1f}", flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        a = sys.argv[2:]
        print(json.dumps(child(a[0], a[1], a[2], int(a[3]), int(a[4]), int(a[5]))))
        sys.exit(0)
    sys.exit(main())
