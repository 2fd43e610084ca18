"""Neural-network layer ops, one module per family.

Importing this module registers them all: convolutions (:mod:`.conv`),
pooling (:mod:`.pool`) and normalizations (:mod:`.norm`).
"""

from __future__ import annotations

from . import (
    conv,  # noqa: F401
    norm,  # noqa: F401
    pool,  # noqa: F401
)
