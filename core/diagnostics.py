"""The ``rammer`` logger and the warnings every user should see.

rammer logs through Python's :mod:`logging` under the name ``rammer``.  It is
quiet by default except for warnings: when the application has configured no
logging at all, warnings go to stderr once per distinct message (Python's
"last resort" handler), and an application's own logging configuration takes
over as usual (``logging.getLogger("rammer").setLevel(logging.ERROR)`` silences
them).

The main warning is a silent slow path: a backend that leaves nodes to the
reference implementation (numpy, op by op, between compiled segments) still
gives correct results, but typically 10-100x slower for those nodes.
``rammer.compile(..., strict=True)`` and ``--no-fallback`` make that an error.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import CompileError

__all__ = ["logger", "fallbacks_of", "report_fallbacks"]

logger = logging.getLogger("rammer")

#: Messages already logged in this process (a warning is said once, not per compile).
_said: set[str] = set()


def fallbacks_of(executable: Any) -> list[Mapping[str, Any]]:
    """The nodes ``executable`` runs through the reference implementation, from its
    report (``{"node", "op", "reason"}`` each); empty when it declares none."""
    report = getattr(executable, "report", None)
    if callable(report):
        report = report()
    if not isinstance(report, Mapping):
        return []
    found = report.get("fallbacks") or []
    return [f for f in found if isinstance(f, Mapping)]


def _printable(text: Any, limit: int = 80) -> str:
    """A model's name as one line of log text (control characters could forge log lines)."""
    out = re.sub(r"[\x00-\x1f\x7f\u2028\u2029\u202a-\u202e]", "?", str(text))
    return out if len(out) <= limit else out[:limit - 3] + "..."


def _summary(fallbacks: Iterable[Mapping[str, Any]]) -> str:
    by_op: dict[str, list[str]] = {}
    for f in fallbacks:
        by_op.setdefault(_printable(f.get("op", "?")), []).append(_printable(f.get("node", "?")))
    parts = []
    for op, nodes in sorted(by_op.items()):
        shown = ", ".join(nodes[:3]) + (", ..." if len(nodes) > 3 else "")
        parts.append(f"{op} x{len(nodes)} ({shown})")
    return "; ".join(parts)


def report_fallbacks(model_name: str, backend: str, fallbacks: list[Mapping[str, Any]], strict: bool) -> None:
    """Warn once about ``fallbacks``, or raise when ``strict``."""
    if not fallbacks:
        return
    what = _summary(fallbacks)
    if strict:
        reasons = "; ".join(
            f"{_printable(f.get('node'))} ({_printable(f.get('op'))}): {_printable(f.get('reason'), 200)}"
            for f in fallbacks[:5])
        raise CompileError(
            f"backend '{backend}' would run {len(fallbacks)} node(s) of '{_printable(model_name)}' through the "
            f"reference implementation ({what}), and strict mode forbids fallbacks. Why: {reasons}. "
            f"Choose another backend, or compile without strict=True / --no-fallback")
    model_name = _printable(model_name)
    message = (f"backend '{backend}' runs {len(fallbacks)} node(s) of '{model_name}' in numpy, op by op, between "
               f"compiled segments: {what}. Results are correct, but these nodes are typically 10-100x slower than "
               f"compiled kernels; 'rammer compile MODEL --report' says why each falls back, strict=True "
               f"(--no-fallback) makes this an error")
    if message in _said:
        return
    _said.add(message)
    logger.warning(message)
