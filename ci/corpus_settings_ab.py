"""Corpus models compiled twice in one process, with and without ``--before`` module settings (a lowering
switch), timed alternating against each other and onnxruntime: a before/after that a loaded machine's
process-to-process spread does not swamp (both sides share the process, its pages and its core).

    python ci/corpus_settings_ab.py --models nas-darts,dbnet-ocr --rounds 5 --runs 5 \\
        --before rammer.backends.cpu.lower_conv.STRIDED_PIXEL_ROWS_PLAIN=False

The timing protocol is :func:`micro_gemm.measure`'s (rounds alternating, the best of each side, CPU
time by default, ``--threads`` vEUs and onnxruntime intra-op threads).  A switch that numba compiles
into a kernel as a constant cannot be compared this way: use ``ci/corpus_ab.py`` (two installations).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from micro_gemm import _setting, measure  # noqa: E402  (a sibling script, not a package)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", required=True, help="comma-separated corpus entries (ci/corpus_bench.py --list)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="cpu")
    ap.add_argument("--before", action="append", default=[], metavar="MODULE.ATTR=VALUE", required=True,
                    help="settings of the 'before' compile (repeatable)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    import corpus

    before = [_setting(t) for t in args.before]
    print("| model | before ms | after ms | ort ms | after / before | before / ort | after / ort | max err |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.models.split(","):
        built = corpus.build(corpus.select(models=name)[0], "full")
        model = onnx.load_from_string(built.onnx)
        r = measure(model, built.feeds, args.threads, args.rounds, args.runs, "min", args.clock, before)
        print(f"| {name} | {r['before_ms']:.2f} | {r['cpu_ms']:.2f} | {r['ort_ms']:.2f} | "
              f"{r['cpu_ms'] / r['before_ms']:.3f} | {r['before_ratio']:.2f} | {r['ratio']:.2f} | "
              f"{r['max_err']:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
