"""Stand-ins for the oracle's ``run_case`` that the campaign's spawned workers import by name.

The test writes a plan, ``plan.json`` in the campaign's cache folder (a worker's ``RAMMER_CACHE_DIR``),
mapping the SHA-256 of a case's model bytes to what to do with it: ``"hang"`` (never answer),
``"hang-once"`` (never answer the first time the case is run, answer ``ok`` after) or, for cases not in
the plan, answer ``ok`` at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from rammer.fuzzing.oracle import Outcome


def model_key(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run_case_as_planned(data: bytes, feeds: dict, backend: str, options: dict[str, Any] | None = None) -> Outcome:
    folder = Path(os.environ["RAMMER_CACHE_DIR"])
    key = model_key(data)
    what = json.loads((folder / "plan.json").read_text()).get(key, "ok")
    tried = folder / f"tried-{key}"
    first_time = not tried.exists()
    tried.touch()
    if what == "hang" or (what == "hang-once" and first_time):
        threading.Event().wait()  # no answer ever: the campaign has to kill this worker
    return Outcome("ok", "as planned")
