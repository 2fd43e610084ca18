"""Which nodes the GPU backends refuse, without compiling or running anything.

    python ci/gpu_coverage.py --graphs 400 --seed 0          # the fuzzer's random graphs
    python ci/gpu_coverage.py --zoo --torch                  # zoo models and the test suite's torch exports
    python ci/gpu_coverage.py --model a.onnx b.onnx

For each model: the opencl backend's passes, then every node lowered (``unsupported``); refusals are
counted by op and by the first words of the reason.  Graphs the cpu backend would not compile without
falling back are counted apart (they are not the GPU backends' to run).
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import time


def _reason_key(why: str) -> str:
    why = re.sub(r"^[^:]*: no GPU rKernel for ", "", why)
    why = re.sub(r"'[^']*'", "'_'", why)
    why = re.sub(r"\d+", "N", why)
    return why[:110]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", type=int, default=0, help="random graphs of the fuzzer's generator")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--zoo", action="store_true", help="the small zoo models")
    ap.add_argument("--real", action="store_true", help="the models of ci/real_models.py found here")
    ap.add_argument("--model", nargs="*", default=[])
    ap.add_argument("--backend", default="opencl")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)

    from rammer import plugins
    from rammer.errors import RammerError
    from rammer.frontend import load

    be = plugins.get_backend(args.backend, compile_only=True)
    models: list[tuple[str, object]] = []
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

        for m in real_models.MODELS:
            try:
                models.append((m.name, (real_models.model_bytes(m), m.shapes or None)))
            except Exception as exc:  # a source not on this machine
                print(f"{m.name}: skipped: {str(exc)[:80]}")
    for path in args.model:
        models.append((path, path))

    refused_models = 0
    by_op: collections.Counter = collections.Counter()
    by_reason: collections.Counter = collections.Counter()
    t0 = time.perf_counter()
    for label, model in models:
        try:
            src, shapes = model if isinstance(model, tuple) else (model, None)
            graph = load(src, shapes)
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
    print(f"{len(models)} models, {refused_models} refused ({100.0 * refused_models / max(len(models), 1):.0f}%) "
          f"in {time.perf_counter() - t0:.1f} s")
    for op, count in by_op.most_common():
        print(f"  {count:5d}  {op}")
    print("by reason (models):")
    for why, count in by_reason.most_common():
        print(f"  {count:5d}  {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
