"""The attention block on ``cpu`` before/after the fused kernel, against onnxruntime, over a grid of shapes.

    python ci/micro_attention.py --threads 1                 # the whole grid
    python ci/micro_attention.py --threads 1 --mask causal    # one mask class
    python ci/micro_attention.py --shapes "B=8 " --json a.json
    python ci/micro_attention.py --models bert,gpt2 --runs 10    # whole corpus models, fusion off/on in-process

The block is ``softmax(Q K^T * scale + mask) @ V`` as torch exports it (``Transpose`` of K feeding the
``MatMul``; ``Mul`` by 1/sqrt(D); ``Add`` of the mask; ``Softmax(axis=-1)``; ``MatMul`` by V) over
``[B, H, S, D]`` operands, for three shape classes of mask:

* ``padding``: an additive ``[B, 1, 1, S]`` mask with the last S/8 keys of each row at -1e4 (encoders);
* ``causal``: an additive ``[1, 1, S, S]`` constant mask of float32's minimum above the diagonal (decoders);
* ``none``: no mask (vision transformers).

Grid: (heads, head dim) in (2, 32), (8, 64), (12, 64), (16, 128); S in 16, 64, 128, 256; batch 1 and 8
(the padding class; the other two at batch 1).  "before" compiles with the fusion pass off
(``rammer.passes.fuse_attention.ENABLED = False``: the block as two batched MatMuls, an elementwise op and
a Softmax), "after" with it on (one ``k_attention`` op).  Protocol as ``ci/micro_gemm.py``: one process,
the same thread count for both runtimes, ``--rounds`` alternating rounds of ``--runs`` runs per side, the
best run per side; ratio = cpu / onnxruntime; outputs checked against onnxruntime (1e-3).  A
micro-benchmark on shared machines: read ratios, and compare before/after from the same run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import warnings

import numpy as np
import onnx
from onnx import helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from micro_gemm import _geomean, _model, _setting, measure  # noqa: E402

MASKS = ("padding", "causal", "none")
HEADS_DIMS = ((2, 32), (8, 64), (12, 64), (16, 128))
SEQS = (16, 64, 128, 256)


def attention(b: int, h: int, s: int, d: int, mask: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(b * 7 + h * 5 + s * 3 + d)
    inits: dict[str, np.ndarray] = {"scale": np.array(1.0 / math.sqrt(d), np.float32)}
    feeds = {n: rng.standard_normal((b, h, s, d)).astype(np.float32) for n in ("q", "k", "v")}
    ins = [(n, [b, h, s, d]) for n in ("q", "k", "v")]
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["qk"]), helper.make_node("Mul", ["qk", "scale"], ["qks"])]
    scores = "qks"
    if mask == "padding":
        m = np.zeros((b, 1, 1, s), np.float32)
        m[..., s - max(1, s // 8):] = -1e4
        feeds["mask"] = m
        ins.append(("mask", [b, 1, 1, s]))
    elif mask == "causal":
        inits["mask"] = np.triu(np.full((s, s), np.finfo(np.float32).min, np.float32), 1).reshape(1, 1, s, s)
    if mask != "none":
        nodes.append(helper.make_node("Add", ["qks", "mask"], ["qkm"]))
        scores = "qkm"
    nodes += [helper.make_node("Softmax", [scores], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    return _model(nodes, ins, ("y", [b, h, s, d]), inits), feeds


def grid(masks: tuple[str, ...]) -> list[tuple[str, str, tuple[int, int, int, int, str]]]:
    out = []
    for mask in masks:
        for batch in ((1, 8) if mask == "padding" else (1,)):
            for h, d in HEADS_DIMS:
                for s in SEQS:
                    out.append((mask, f"B={batch} H={h} S={s} D={d}", (batch, h, s, d, mask)))
    return out


def models_ab(names: list[str], runs: int, threads: int) -> int:
    """Whole corpus models (full size), fusion off / on compiled in this process, single runs alternating,
    best per side: resolves a few percent where separate processes on a loaded machine do not."""
    import importlib
    import time

    from corpus import ENTRIES, build

    import rammer

    switch = importlib.import_module("rammer.passes.fuse_attention")
    print("| model | off ms | on ms | speed-up | max abs(on - off) |")
    print("|---|---:|---:|---:|---:|")
    for name in names:
        built = build(ENTRIES[name], "full")
        shapes = {k: v.shape for k, v in built.feeds.items()}
        compiled = {}
        for side, enabled in (("off", False), ("on", True)):
            switch.ENABLED = enabled
            try:
                compiled[side] = rammer.compile(built.onnx, backend="cpu", input_shapes=shapes, veus=threads,
                                                cache=False)
            finally:
                switch.ENABLED = True
        outs = {side: m.run(built.feeds) for side, m in compiled.items()}
        err = max(float(np.max(np.abs(outs["on"][k] - outs["off"][k]))) for k in outs["off"])
        best = {"off": math.inf, "on": math.inf}
        for i in range(runs):
            for side in (("off", "on") if i % 2 == 0 else ("on", "off")):
                start = time.perf_counter()
                compiled[side].run(built.feeds)
                best[side] = min(best[side], time.perf_counter() - start)
        print(f"| {name} | {best['off'] * 1e3:.1f} | {best['on'] * 1e3:.1f} | {best['off'] / best['on']:.3f}x | "
              f"{err:.1e} |", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mask", default=",".join(MASKS), help=f"comma-separated mask classes: {', '.join(MASKS)}")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--shapes", default="",
                    help="only shapes whose label contains one of these comma-separated strings")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--models", default="",
                    help="instead of the grid: these corpus models (comma-separated), fusion off/on in-process A/B")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    import logging
    logging.getLogger("rammer").setLevel(logging.ERROR)
    if args.models:
        return models_ab([m.strip() for m in args.models.split(",") if m.strip()], args.runs, args.threads)
    masks = tuple(m.strip() for m in args.mask.split(",") if m.strip())
    if any(m not in MASKS for m in masks):
        ap.error(f"unknown mask class; choose from {', '.join(MASKS)}")
    wanted = [w for w in args.shapes.split(",") if w.strip()]
    before = [_setting("rammer.passes.fuse_attention.ENABLED=False")]
    print("| mask | shape | before ms | after ms | ort ms | before/ort | after/ort | speed-up | max err |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for mask, label, shape in grid(masks):
        if wanted and not any(w in label + " " for w in wanted):
            continue
        model, feeds = attention(*shape)
        r = measure(model, feeds, args.threads, args.rounds, args.runs, before=before)
        r.update(mask=mask, shape=label)
        rows.append(r)
        print(f"| {mask} | {label} | {r['before_ms']:.3f} | {r['cpu_ms']:.3f} | {r['ort_ms']:.3f} | "
              f"{r['before_ratio']:.2f} | {r['ratio']:.2f} | {r['speedup']:.2f} | {r['max_err']:.1e}"
              f"{'' if r['ok'] else ' MISMATCH'} |", flush=True)
    print()
    for mask in masks:
        sel = [r for r in rows if r["mask"] == mask]
        if sel:
            print(f"{mask}: geomean cpu/onnxruntime {_geomean([r['ratio'] for r in sel]):.2f}x "
                  f"(before {_geomean([r['before_ratio'] for r in sel]):.2f}x) over {len(sel)} shapes")
    if rows:
        print(f"all: geomean {_geomean([r['ratio'] for r in rows]):.2f}x "
              f"(before {_geomean([r['before_ratio'] for r in rows]):.2f}x), speed-up "
              f"{_geomean([r['speedup'] for r in rows]):.2f}x over {len(rows)} shapes")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
