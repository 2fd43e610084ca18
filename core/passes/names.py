"""Fresh tensor and node names for passes that add to a graph.

A pass that inserts nodes must keep the IR in SSA form (every tensor defined
once) and should keep node names unique, so each new name is derived from an
existing one and made unique against the names already taken.
"""

from __future__ import annotations


def fresh_name(name: str, taken: set[str]) -> str:
    """``name``, or ``name_2``, ``name_3``... whichever is not in ``taken`` (which it joins)."""
    out, k = name, 2
    while out in taken:
        out, k = f"{name}_{k}", k + 1
    taken.add(out)
    return out
