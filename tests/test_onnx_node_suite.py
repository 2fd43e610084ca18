"""ONNX's official node test suite, through onnx.backend.test's runner.

Runs every node case on the CPU device against ``rammer.onnx_backend``.  The
cases that are known to fail for a backend are listed, one name a line, in
``tests/known_failures/node_<backend>.txt`` and run as expected failures: a
listed case that starts passing fails the run ("unexpected success"), so the
lists only shrink.  Regenerate a list with::

    python ci/node_suite.py --backend reference --failures tests/known_failures/node_reference.txt
"""

from __future__ import annotations

import os
import re
import unittest
import warnings

import onnx.backend.test
import pytest

from rammer import plugins
from rammer.onnx_backend import RammerBackend

#: 3,768 cases (two backends), minutes even on a quiet machine: left out of the quick subset.
pytestmark = pytest.mark.slow

HERE = os.path.dirname(__file__)
#: The backends whose node-suite results CI checks.
SUITE_BACKENDS = [b for b in ("reference", "cpu")
                  if b in plugins.backends() and plugins.backends()[b].availability().ok]


def known_failures(backend: str) -> list[str]:
    path = os.path.join(HERE, "known_failures", f"node_{backend}.txt")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def _suite_class(backend: str) -> type[unittest.TestCase]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner = onnx.backend.test.BackendTest(RammerBackend.for_backend(backend), __name__)
    runner.include(r"_cpu$")
    failing = known_failures(backend)
    if failing:
        runner.xfail("^(" + "|".join(re.escape(n) for n in failing) + ")_cpu$")
    cls = runner.test_cases["OnnxBackendNodeModelTest"]
    # Each case also exists for the CUDA device; rammer's ONNX adapter is CPU-only.
    hidden = {name: None for name in dir(cls) if name.startswith("test_") and not name.endswith("_cpu")}
    return type(f"TestOnnxNodeSuite_{backend}", (cls,), hidden)


for _backend in SUITE_BACKENDS:
    globals()[f"TestOnnxNodeSuite_{_backend}"] = _suite_class(_backend)
del _backend
