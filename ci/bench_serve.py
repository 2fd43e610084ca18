"""Requests per second and latency of a model served by `rammer serve`'s deployment, 1 and 2 replicas.

Ray runs locally on 127.0.0.1; a client in this process sends KServe v2 requests from
--concurrency threads; every answer is checked against the reference backend.

    python ci/bench_serve.py --zoo lstm-tc-small --batch 4 --requests 400 --concurrency 16 --replicas 1,2
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", default="lstm-tc-small")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--replicas", default="1,2")
    ap.add_argument("--veus", type=int, default=1)
    args = ap.parse_args()
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    import ray
    from ray import serve

    import rammer
    import rammer.zoo
    from rammer.serve.deployment import ServeConfig, start

    proto = rammer.zoo.build(args.zoo, batch=args.batch)
    ref = rammer.compile(proto, backend="reference")
    (inp,) = ref.inputs
    (outp,) = ref.outputs
    rows = []
    for replicas in [int(r) for r in args.replicas.split(",")]:
        port = _free_port()
        cfg = ServeConfig(model=proto.SerializeToString(), name="m", backend="cpu", veus=args.veus,
                          replicas=replicas, batch=args.batch)
        url = start(cfg, port=port)
        rng = np.random.default_rng(replicas)
        xs = [rng.standard_normal((1,) + tuple(inp.shape[1:])).astype(np.float32) for _ in range(64)]
        wants = [ref.run({inp.name: np.concatenate([x] + [np.zeros_like(x)] * (args.batch - 1))})[outp.name][:1]
                 for x in xs]

        def one(i: int) -> float:
            x = xs[i % len(xs)]
            body = json.dumps({"inputs": [{"name": inp.name, "shape": list(x.shape), "datatype": "FP32",
                                           "data": x.reshape(-1).tolist()}]}).encode()
            t = time.perf_counter()
            req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                out = json.loads(r.read())
            dt = time.perf_counter() - t
            y = np.asarray(out["outputs"][0]["data"], np.float32).reshape(out["outputs"][0]["shape"])
            if not np.allclose(y, wants[i % len(xs)], rtol=1e-3, atol=1e-4):
                raise SystemExit("wrong answer")
            return dt

        with ThreadPoolExecutor(args.concurrency) as pool:
            list(pool.map(one, range(2 * args.concurrency)))  # warm-up
            t0 = time.perf_counter()
            lat = sorted(pool.map(one, range(args.requests)))
            wall = time.perf_counter() - t0
        rows.append((replicas, args.requests / wall, statistics.median(lat) * 1e3,
                     lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e3))
        serve.shutdown()
    ray.shutdown()
    print(f"{args.zoo}, batch {args.batch}, {args.requests} requests from {args.concurrency} client threads, "
          f"{args.veus} vEU(s) per replica")
    print("| replicas | requests/s | p50 ms | p99 ms |")
    print("|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r[0]} | {r[1]:.0f} | {r[2]:.1f} | {r[3]:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
