from __future__ import annotations

import os
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
