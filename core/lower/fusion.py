"""Fusion of elementwise nodes into groups (FusionStitching-style loop fusion).

A group is a set of elementwise nodes of one output shape, optionally headed
by a GEMM-like node (MatMul, Gemm, Conv) whose output the group consumes:
then the group runs as that GEMM's epilogue on each output tile.  Values
that only group members read never reach memory.

A node joins the groups of its elementwise producers when all have its
shape and merging cannot create a cycle (no path from a group out through a
non-member and back in).  Cycles are found with ancestor bitsets: bit ``j``
of ``anc[i]`` says node ``j`` is a (transitive) producer of node ``i``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from rammer.ir import Graph, outer_names


@dataclass
class Group:
    id: int
    shape: tuple[int, ...]
    head: int | None = None
    members: list[int] = field(default_factory=list)
    mask: int = 0
    #: Union over the group's external producers p of anc[p] | bit(p).
    ext_anc: int = 0


def ancestors(graph: Graph) -> list[int]:
    """Per node, the bitset of its transitive producers, through the tensors its subgraphs
    capture too (an If reading ``r`` only in its branches still depends on r's producer)."""
    producer = graph.producer
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    anc: list[int] = []
    for node in graph.nodes:
        acc = 0
        for t in set(node.inputs) | (outer_names(node) if node.subgraphs() else set()):
            p = producer.get(t) if t else None
            if p is not None:
                j = index[id(p)]
                acc |= anc[j] | (1 << j)
        anc.append(acc)
    return anc


def build_groups(graph: Graph, kinds: list[str], anc: list[int] | None = None,
                 fuse: bool = True) -> tuple[list[Group], dict[int, int]]:
    """Groups over nodes of kind "ew" and "head"; returns groups and node -> group id.

    ``kinds[i]`` is "ew" (fusible elementwise), "head" (GEMM-like that takes
    an epilogue) or anything else (not fused).  With ``fuse=False`` every node
    is a group of its own.
    """
    if anc is None:
        anc = ancestors(graph)
    producer = graph.producer
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    groups: dict[int, Group] = {}
    group_of: dict[int, int] = {}
    ids = iter(range(len(graph.nodes)))

    def shape_of(i: int) -> tuple[int, ...]:
        return graph.value_info[graph.nodes[i].outputs[0]].shape

    for i, node in enumerate(graph.nodes):
        kind = kinds[i]
        if kind == "head":
            g = Group(next(ids), shape_of(i), head=i, mask=1 << i, ext_anc=anc[i])
            groups[g.id] = g
            group_of[i] = g.id
            continue
        if kind != "ew":
            continue
        shape = shape_of(i)
        candidates: list[int] = []
        externals: list[int] = []
        for t in dict.fromkeys(x for x in node.inputs if x and fuse):
            p = producer.get(t)
            if p is None:
                continue
            j = index[id(p)]
            gid = group_of.get(j)
            fusible = gid is not None and groups[gid].shape == shape
            if fusible and gid is not None:
                if gid not in candidates:
                    candidates.append(gid)
            else:
                externals.append(j)
        # At most one GEMM head per group: keep the latest (the one most
        # likely on the critical path, e.g. h @ R rather than x @ W in an RNN).
        heads = sorted((g for g in candidates if groups[g].head is not None), key=lambda g: -cast(int, groups[g].head))
        for extra in heads[1:]:
            candidates.remove(extra)
            externals.extend(m for m in _members(groups[extra]))
        ext = 0
        for j in externals:
            ext |= anc[j] | (1 << j)
        merged = _try_merge([groups[g] for g in candidates], ext)
        if merged is None and candidates:
            # Fall back to joining the single best candidate alone.
            for gid in sorted(candidates, key=lambda g: groups[g].head is None):
                others = [j for g in candidates if g != gid for j in _members(groups[g])]
                ext2 = ext
                for j in others:
                    ext2 |= anc[j] | (1 << j)
                if _try_merge([groups[gid]], ext2) is not None:
                    merged = [groups[gid]]
                    ext = ext2
                    break
        if not merged:
            g = Group(next(ids), shape, members=[i], mask=1 << i, ext_anc=ext)
            groups[g.id] = g
            group_of[i] = g.id
            continue
        keep = merged[0]
        for other in merged[1:]:
            keep.members.extend(other.members)
            if other.head is not None:
                keep.head = other.head
            keep.mask |= other.mask
            keep.ext_anc |= other.ext_anc
            for m in _members(other):
                group_of[m] = keep.id
            del groups[other.id]
        keep.members.append(i)
        keep.mask |= 1 << i
        keep.ext_anc |= ext
        group_of[i] = keep.id
    for g in groups.values():
        g.members.sort()
    _break_cycles(graph, groups, group_of)
    return list(groups.values()), group_of


def _group_edges(graph: Graph, groups: dict[int, Group], group_of: dict[int, int]) -> dict[int, set[int]]:
    """Group -> the groups it reads from (a group runs as one op, so a read by any member counts)."""
    producer = graph.producer
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    edges: dict[int, set[int]] = {gid: set() for gid in groups}
    for gid, g in groups.items():
        for m in _members(g):
            for t in graph.nodes[m].inputs:
                p = producer.get(t) if t else None
                if p is None:
                    continue
                src = group_of.get(index[id(p)])
                if src is not None and src != gid:
                    edges[gid].add(src)
    return edges


def _find_cycle(edges: dict[int, set[int]]) -> list[int] | None:
    state: dict[int, int] = {}
    stack: list[int] = []

    def visit(u: int) -> list[int] | None:
        state[u] = 1
        stack.append(u)
        for w in sorted(edges[u]):
            if state.get(w) == 1:
                return stack[stack.index(w):]
            if w not in state:
                found = visit(w)
                if found:
                    return found
        stack.pop()
        state[u] = 2
        return None

    for u in sorted(edges):
        if u not in state:
            found = visit(u)
            if found:
                return found
    return None


def _break_cycles(graph: Graph, groups: dict[int, Group], group_of: dict[int, int]) -> None:
    """Split groups until no two groups feed each other.

    Merging checks ancestry node by node, but a group runs as a unit: group A can read from an
    elementwise group B one of whose members needs a node that a later merge put into A (a MatMul
    epilogue that pulled in a producer B also reads).  Such a cycle is broken by splitting a
    head-less group on it into single nodes (rare; it costs that group's fusion, never a result).
    """
    while True:
        cycle = _find_cycle(_group_edges(graph, groups, group_of))
        if cycle is None:
            return
        victims = [g for g in cycle if groups[g].head is None and len(groups[g].members) > 1] or \
                  [g for g in cycle if len(_members(groups[g])) > 1]
        if not victims:
            raise AssertionError("cycle among single-node fusion groups")
        g = groups.pop(max(victims, key=lambda k: len(_members(groups[k]))))
        for m in _members(g):
            single = Group(max(groups, default=-1) + 1, graph.value_info[graph.nodes[m].outputs[0]].shape,
                           head=m if m == g.head else None, members=[] if m == g.head else [m], mask=1 << m)
            groups[single.id] = single
            group_of[m] = single.id


def _members(g: Group) -> list[int]:
    return ([g.head] if g.head is not None else []) + g.members


def _try_merge(cands: list[Group], ext: int) -> list[Group] | None:
    """The groups, if merging them with a node whose external producers'
    ancestry is ``ext`` creates no cycle; else None."""
    if not cands:
        return None
    mask = 0
    for g in cands:
        mask |= g.mask
    if ext & mask:
        return None
    for g in cands:
        if g.ext_anc & (mask & ~g.mask):
            return None
    return cands
