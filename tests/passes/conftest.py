from __future__ import annotations

import os
import sys

# The pass tests share pass_graphs.py (imported as a plain module, as tests/helpers.py is).
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
