"""Imports every op module so that their ``@register_op`` calls run."""

from __future__ import annotations

import importlib

# One module per family of ops.
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
    "branch_guard",
    "quant",
    "qlinear",
    "signal",
    "misc",
    "ml_trees",
    "ml",
]

for _name in _MODULES:
    importlib.import_module(f"{__package__}.{_name}")
