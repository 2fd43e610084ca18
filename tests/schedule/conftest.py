from __future__ import annotations

import os
import sys

# sched_util.py (random graphs, an independent executor) is imported as a plain module.
sys.path.insert(0, os.path.dirname(__file__))
