"""The backend conformance suite, run on every built-in backend that is registered.

This is what `ci/conformance.sh` does, inside the test run that CI executes
(the plugin loads through its `pytest11` entry point).
Backends whose device is absent get the suite's compile-only checks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from rammer import plugins
from rammer.time_limits import scaled_limit

BUILTIN = sorted(name for name in plugins.backends() if plugins.backend_origin(name) == name)


def _run_suite(backend: str, folder: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, RAMMER_CACHE_DIR=os.path.join(folder, "cache"))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "rammer.conformance",
         "--backend", backend, "-q", "-rfE", "-p", "no:cacheprovider"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=scaled_limit(1800),
    )


@pytest.fixture(scope="module")
def suite_runs(request, tmp_path_factory):
    """The selected backends' suites, two child processes at a time: this process only waits on
    them, so on a machine of two cores or more the seven suites (the ipu simulator's alone took 4-10
    minutes under load) take about half the wall they took one after the other."""
    selected = [item.callspec.params["backend"] for item in request.session.items
                if item.originalname == "test_conformance_suite_passes"]
    pool = ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1)))
    runs = {b: pool.submit(_run_suite, b, str(tmp_path_factory.mktemp(f"conformance-{b}"))) for b in selected}
    yield runs
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BUILTIN)
def test_conformance_suite_passes(backend, suite_runs):
    proc = suite_runs[backend].result()
    tail = "\n".join(proc.stdout.splitlines()[-25:])
    assert proc.returncode == 0, f"conformance suite failed for '{backend}':\n{tail}\n{proc.stderr[-2000:]}"
    assert " passed" in proc.stdout
