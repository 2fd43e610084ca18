from __future__ import annotations

import os
import subprocess
import sys

# Every graph pass pipeline run in a test checks the IR after each pass (rammer.passes.pipeline).
os.environ.setdefault("RAMMER_VERIFY_IR", "1")

# Tests import shared helper modules (helpers.py, cpu/cpu_helpers.py,
# gpu/gpu_helpers.py, schedule/sched_util.py, fuzz/fuzz_doubles.py) as plain modules; with
# --import-mode=importlib their folders are not on sys.path by themselves.  (Spawned processes get the same
# sys.path, so a fuzz worker can import fuzz_doubles by name.)
_HERE = os.path.dirname(os.path.abspath(__file__))
for _folder in (_HERE, *(os.path.join(_HERE, sub) for sub in ("cpu", "gpu", "schedule", "fuzz"))):
    if _folder not in sys.path:
        sys.path.insert(0, _folder)

try:  # Hypothesis (a test extra) times each example against a deadline by default; load alone can pass it.
    from hypothesis import HealthCheck, settings
except ImportError:
    pass
else:
    settings.register_profile("rammer", deadline=None, suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("rammer")


# A fresh clone's run compiles every `cpu` kernel entry with numba, one after the other, on the one core
# the tests use (minutes: the convolution entry alone takes over a minute).  A background process
# compiles them into numba's on-disk cache on the second core meanwhile; a test that needs an entry
# it has not reached yet compiles that entry itself, as without it.  RAMMER_TEST_PRECOMPILE=0 turns it
# off.
_PRECOMPILE: list[subprocess.Popen] = []


def pytest_sessionstart(session) -> None:
    if os.environ.get("RAMMER_TEST_PRECOMPILE", "1") == "0" or (os.cpu_count() or 1) < 2:
        return
    if hasattr(session.config, "workerinput"):  # a pytest-xdist worker: its controller starts the one process
        return
    try:
        from rammer.backends.cpu import warmup  # imports the cache guard here first: it runs once
    except Exception:  # noqa: BLE001 - an import error is the tests' to report, not this hook's
        return
    if not warmup.missing_entries(warmup.all_entries()) and warmup.epilogue_cached():
        return
    _PRECOMPILE.append(subprocess.Popen([sys.executable, "-m", "rammer.backends.cpu.warmup", "--all"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))


def pytest_sessionfinish(session, exitstatus) -> None:
    for proc in _PRECOMPILE:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
