#!/usr/bin/env python3
"""Run ONNX's node test cases on a rammer backend and count passes.

    python ci/node_suite.py --backend reference [--filter REGEX] [--failures out.txt] [-v]

Uses the same cases and the same output comparison as onnx.backend.test's
runner (tests/test_onnx_node_suite.py runs the official runner in CI); this
script is the quick way to see pass counts and why cases fail.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import time
import warnings


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="reference")
    ap.add_argument("--filter", default="", help="regex on case names (e.g. 'test_conv')")
    ap.add_argument("--failures", help="write the names of failing cases to this file, one a line")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each failure's first line")
    args = ap.parse_args(argv)

    warnings.simplefilter("ignore")
    import onnx
    from onnx import numpy_helper
    from onnx.backend.test.loader import load_node_model_tests
    from onnx.backend.test.runner import Runner

    from rammer.onnx_backend import RammerBackend

    backend = RammerBackend.for_backend(args.backend)
    cases = [c for c in load_node_model_tests() if re.search(args.filter, c.name)]
    passed, failed = [], []
    reasons: collections.Counter[str] = collections.Counter()
    start = time.perf_counter()
    for case in cases:
        try:
            rep = backend.prepare(case.model, "CPU")
            for inputs, ref_outputs in case.data_sets:
                # As onnx's runner does: some cases carry TensorProtos, not arrays.
                inputs = [numpy_helper.to_array(i) if isinstance(i, onnx.TensorProto) else i for i in inputs]
                ref_outputs = [numpy_helper.to_array(o) if isinstance(o, onnx.TensorProto) else o
                               for o in ref_outputs]
                outs = rep.run(inputs)
                Runner.assert_similar_outputs(ref_outputs, outs, rtol=case.rtol, atol=case.atol)
            passed.append(case.name)
        except Exception as exc:  # counting failures of every kind is the point
            msg = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            failed.append(case.name)
            reasons[re.sub(r"'[^']*'", "'…'", msg)[:110]] += 1
            if args.verbose:
                print(f"FAIL {case.name}: {msg[:300]}")
    elapsed = time.perf_counter() - start
    if args.failures:
        with open(args.failures, "w") as f:
            f.write("".join(n + "\n" for n in sorted(failed)))
    print("most common failure reasons:")
    for msg, n in reasons.most_common(15):
        print(f"  {n:5d}  {msg}")
    print(f"backend {args.backend}: {len(passed)} passed, {len(failed)} failed of {len(cases)} node cases "
          f"in {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
