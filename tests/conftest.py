from __future__ import annotations

import os
import sys

# Every graph pass pipeline run in a test checks the IR after each pass (rammer.passes.pipeline).
os.environ.setdefault("RAMMER_VERIFY_IR", "1")

# Tests import shared helper modules (helpers.py, cpu/cpu_helpers.py,
# gpu/gpu_helpers.py, schedule/sched_util.py) as plain modules; with --import-mode=importlib their
# folders are not on sys.path by themselves.
_HERE = os.path.dirname(os.path.abspath(__file__))
for _folder in (_HERE, os.path.join(_HERE, "cpu"), os.path.join(_HERE, "gpu"), os.path.join(_HERE, "schedule")):
    if _folder not in sys.path:
        sys.path.insert(0, _folder)
