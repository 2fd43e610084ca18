"""Imports every op module so that their ``@register_op`` calls run."""

from __future__ import annotations

import importlib

# One module per family of ops.  A module listed here that does not exist yet
# is skipped, so families can land one at a time.
_MODULES = [
    "elementwise",
    "activations",
    "reduce",
    "linalg",
    "nn",
    "rnn",
    "loss",
    "attention",
    "fused_attention",
    "tensor",
    "indexing",
    "resize",
    "control",
    "quant",
    "qlinear",
    "sequence",
    "signal",
    "misc",
    "ml",
]

for _name in _MODULES:
    try:
        importlib.import_module(f"{__package__}.{_name}")
    except ModuleNotFoundError as exc:  # pragma: no cover - only while a family is missing
        if exc.name != f"{__package__}.{_name}":
            raise
