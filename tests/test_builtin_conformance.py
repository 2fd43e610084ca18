"""The backend conformance suite, run on every built-in backend that is registered.

This is what `ci/conformance.sh` does, inside the test run that CI executes
(the plugin loads through its `pytest11` entry point).
Backends whose device is absent get the suite's compile-only checks.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rammer import plugins
from rammer.time_limits import scaled_limit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILTIN = sorted(name for name in plugins.backends() if plugins.backend_origin(name) == name)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BUILTIN)
def test_conformance_suite_passes(backend, tmp_path):
    env = dict(os.environ, RAMMER_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "rammer.conformance",
         "--backend", backend, "-q", "-rfE", "-p", "no:cacheprovider"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=scaled_limit(900),
    )
    tail = "\n".join(proc.stdout.splitlines()[-25:])
    assert proc.returncode == 0, f"conformance suite failed for '{backend}':\n{tail}\n{proc.stderr[-2000:]}"
    assert " passed" in proc.stdout
