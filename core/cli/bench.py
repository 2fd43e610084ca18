"""``rammer bench``: the cross-backend benchmark matrix, and ``rammer bench merge``."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
import time

from ..bench.charts import write_charts
from ..bench.matrix import MatrixConfig, run_matrix
from ..bench.merge import merge_results
from ..bench.progress import Progress
from ..bench.report import load_results, summary_table, write_all
from ..errors import RammerError

_EPILOG = """\
examples:
  rammer bench --models zoo-small --backends cpu,reference,onnxruntime --repeat 5 --out bench-out
  rammer bench --config ci/bench-matrix.toml --matrix standard --out bench-out
  rammer bench merge cpu-box/results.json gpu-box/results.json --out matrix

models: zoo names, .onnx paths, or the keywords 'zoo' (all full-size) and 'zoo-small'.
backends: rammer backends (`rammer backends`) and the baselines onnxruntime,
onnxruntime-cuda, torch, torch-cuda.  Every cell is checked against the
reference backend before it is timed.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmark models across backends and baselines (json, csv, md, charts)",
                       description=textwrap.fill(
                                   "Run a benchmark matrix of models x backends; see also `rammer bench merge`. "
                                   "Each row's backends are timed in rounds of one run each, alternating run by run "
                                   "in an order rotated every round (the timing function of `rammer run`, whose one "
                                   "model runs back to back): each run follows another backend's, so a small model's "
                                   "figures are higher than `rammer run`'s; --backends B alone measures what "
                                   "`rammer run -b B` does.", 79),
                       epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="FILE.toml", help="a matrix file (e.g. ci/bench-matrix.toml)")
    p.add_argument("--matrix", metavar="NAME", help="which matrix of --config to run")
    p.add_argument("--models", metavar="M1,M2", help="comma-separated zoo names, .onnx paths, 'zoo' or 'zoo-small'")
    p.add_argument("--backends", metavar="B1,B2", help="comma-separated rammer backends and baselines")
    p.add_argument("--batch", metavar="N1,N2", help="batch sizes (default 1)")
    p.add_argument("--repeat", type=int, help="timed runs per cell (default 10)")
    p.add_argument("--warmup", type=int, help="untimed runs per cell after the checking run (default 1)")
    p.add_argument("--threads", type=int, help="limit every library's intra-op threads to N")
    p.add_argument("--settle", dest="settle", action="store_true", default=None,
                   help="wait for idle cores before each timed run (thread pools that spin after a run "
                        "otherwise slow whoever runs next); default: back to back, as `rammer run`")
    p.add_argument("--no-settle", dest="settle", action="store_false", help="back to back (the default)")
    p.add_argument("--baseline", metavar="NAME", help="column to compute speedups against "
                   "(default: onnxruntime if present, else reference)")
    p.add_argument("--seed", type=int, help="seed of zoo weights and inputs (default 0)")
    p.add_argument("--machine-name", metavar="NAME", help="label of this machine in results (default: hostname)")
    p.add_argument("--out", metavar="DIR", help="folder for results.json/.csv/.md and the charts")
    p.add_argument("--no-charts", action="store_true", help="skip the PNG charts")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 if any cell is wrong, failed or unchecked (n/a is fine)")
    p.set_defaults(func=run_bench)
    actions = p.add_subparsers(dest="bench_action", metavar="ACTION")
    m = actions.add_parser("merge", help="join results.json files from several machines into one matrix")
    m.add_argument("results", nargs="+", metavar="RESULTS.json",
                   help="results.json files, or the --out folders of `rammer bench` that hold them")
    m.add_argument("--out", dest="merge_out", metavar="DIR", required=True, help="folder for the joined results")
    m.add_argument("--baseline", dest="merge_baseline", metavar="NAME", help="baseline column (default: the files')")
    m.add_argument("--no-charts", dest="merge_no_charts", action="store_true", help="skip the PNG charts")
    m.set_defaults(func=run_merge)


def _warn(message: str) -> None:
    print(f"rammer bench: {message}", file=sys.stderr)


def _config_from_args(args: argparse.Namespace):
    # bench.config reads TOML with tomllib (Python 3.11+): the CLI itself still starts on Python 3.10
    from ..bench.config import expand_models, load_matrix, split_ints, split_list

    table = load_matrix(args.config, args.matrix) if args.config else {}
    if args.matrix and not args.config:
        raise RammerError("--matrix needs --config FILE.toml")
    models = split_list(args.models) if args.models else table.get("models", [])
    backends = split_list(args.backends) if args.backends else table.get("backends", [])
    if not models:
        raise RammerError("no models: give --models (e.g. zoo-small) or --config FILE.toml")
    if not backends:
        raise RammerError("no backends: give --backends (e.g. reference,onnxruntime) or --config FILE.toml")
    batches = split_ints(args.batch, "--batch") if args.batch else [int(b) for b in table.get("batch", [1])]

    def pick(name: str, default):
        value = getattr(args, name)
        return value if value is not None else table.get(name, default)

    return MatrixConfig(
        models=expand_models(models), backends=list(dict.fromkeys(backends)), batches=batches,
        repeat=pick("repeat", 10), warmup=pick("warmup", 1), threads=pick("threads", None),
        baseline=pick("baseline", None), seed=pick("seed", 0), machine_name=args.machine_name,
        settle=bool(table.get("settle", False)) if args.settle is None else args.settle,
    )


def _write(doc: dict, out: str, charts: bool) -> list[str]:
    written = list(write_all(doc, out).values())
    if charts:
        try:
            written += write_charts(doc, out)
        except ImportError as exc:
            _warn(f"charts skipped: {exc.name or exc} is not installed "
                  f"(pip install -e '.[bench]' in the rammer checkout)")
    return written


def _print_summary(doc: dict, written: list[str]) -> None:
    print("\n".join(summary_table(doc)))
    bad = [c for c in doc["cells"] if c["status"] in ("wrong", "error", "unchecked")]
    for c in bad:
        print(f"  {c['status']}: {c['model']} batch {c['batch']} on {c['backend']}: {c['reason']}")
    print("wrote " + ", ".join(written))


def run_bench(args: argparse.Namespace) -> int:
    if not args.out:
        raise RammerError("give --out DIR for the results")
    cfg = _config_from_args(args)
    start = time.perf_counter()
    doc = run_matrix(cfg, progress=Progress(0), warn=_warn)
    written = _write(doc, args.out, not args.no_charts)
    _print_summary(doc, written)
    print(f"{len(doc['cells'])} cells in {time.perf_counter() - start:.1f} s")
    if args.strict and any(c["status"] in ("wrong", "error", "unchecked") for c in doc["cells"]):
        return 1
    return 0


def run_merge(args: argparse.Namespace) -> int:
    # A folder written by `rammer bench --out DIR` stands for its results.json.
    paths = [os.path.join(p, "results.json") if os.path.isdir(p) else p for p in args.results]
    docs = [(path, load_results(path)) for path in paths]
    merged = merge_results(docs, baseline=args.merge_baseline, warn=_warn)
    written = _write(merged, args.merge_out, not args.merge_no_charts)
    _print_summary(merged, written)
    machines = sorted(merged["machines"])
    print(f"merged {len(docs)} file(s) ({', '.join(paths)}) measured on {len(machines)} machine(s): "
          f"{', '.join(machines)}")
    return 0
