"""Hardware-neutral memory planning: buffers placed in memory spaces by liveness under a schedule.

See :mod:`.arena` for the planner and the small protocols a backend's buffers and ops satisfy.
"""

from __future__ import annotations

from .arena import (
                    GLOBAL,
                    Alias,
                    ArenaBuffer,
                    ArenaOp,
                    ArenaPlan,
                    MemoryOp,
                    PlannedBuffer,
                    SpacePlan,
                    alias_roots,
                    align_up,
                    op_ancestors,
                    plan_arena,
)
from .order import greedy_order, least_live_order, live_bytes

__all__ = ["GLOBAL", "Alias", "ArenaBuffer", "ArenaOp", "ArenaPlan", "MemoryOp", "PlannedBuffer", "SpacePlan",
           "alias_roots", "align_up",
           "op_ancestors", "plan_arena", "greedy_order", "least_live_order", "live_bytes"]
