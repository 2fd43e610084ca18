"""Lowering a graph to CPU rOperators over arena buffers.

Steps:

1. classify every node: a *view* (Reshape, Split, Transpose... become
   strided views, no work), *ew* (fusible elementwise), *head* (GEMM-like,
   takes an epilogue), *op* (another CPU kernel) or *host* (runs on the
   reference implementation, with the reason recorded for the report);
2. fuse ew nodes into groups, GEMM epilogues included (:mod:`.fusion`);
3. give every stored tensor a buffer, every view tensor its view;
4. build one :class:`CpuOp` per group, op and host node;
5. order the ops topologically by the buffers they read and write.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from rammer.ir import Graph, Node, outer_names
from rammer.lower.aliasing import is_view
from rammer.lower.batching import find_chunks
from rammer.lower.ew_translate import EW_OPS, ew_reason, ew_translate
from rammer.lower.fusion import Group, ancestors, build_groups
from rammer.lower.operator import OpCycle, Rules, classify, topological_order
from rammer.lower.views import Buffer, View, dense_strides

from . import control_flow, graph_passes, lower_attention, lower_linalg, lower_nn, lower_views
from .lower_common import GemmSpec, ew_op, gemm_op
from .ops import ARENA_DTYPES, CostModel, CpuOp
from .program import EwProgram

HEAD_OPS = lower_linalg.HEAD_OPS


@dataclass
class Lowered:
    graph: Graph
    buffers: list[Buffer]
    views: dict[str, View]
    ops: list[CpuOp]
    #: (node, reason) for every node that runs on the reference implementation.
    fallbacks: list[tuple[Node, str]]
    #: Tensors that live outside the arena (non-arena dtypes), by name.
    host_tensors: set[str] = field(default_factory=set)
    fused_groups: int = 0
    #: (node, reason) for every If the host runs as control flow, its branches compiled
    #: (:mod:`.control_flow`): host steps too, but no fallback.
    control: list[tuple[Node, str]] = field(default_factory=list)


log = logging.getLogger("rammer")


def _printable(name: object) -> str:
    return "".join(ch if ch.isprintable() else "?" for ch in str(name))[:80]


class Lowerer:
    def __init__(self, graph: Graph, cost: CostModel | None = None, batch_rows: int = 0, fuse: bool = True):
        self.graph = graph
        #: Elementwise fusion (groups, epilogues); off only for the rare graph where it makes a cycle.
        self.fuse = fuse
        #: Largest stacked row count of batched shared-weight MatMuls (0: off); see rammer.lower.batching.
        self.batch_rows = batch_rows
        self.cost = cost or CostModel()
        self.opset = graph.opset.get("", 1)
        self.buffers: list[Buffer] = []
        self.views: dict[str, View] = {}
        self.ops: list[CpuOp] = []
        self.fallbacks: list[tuple[Node, str]] = []
        self.control: list[tuple[Node, str]] = []
        #: ids of the If nodes whose branches all run compiled (see control_flow.py).
        self._control_ifs: set[int] = set()
        self.host_tensors: set[str] = set()
        self._dense: dict[str, View] = {}
        self._const_ids: dict[int, View] = {}
        #: Arrays behind _const_ids, kept alive so that their ids stay unique.
        self._const_arrays: list[np.ndarray] = []

    # -- buffers and views --------------------------------------------------
    def new_buffer(self, dtype: str, size: int, kind: str = "temp", data: np.ndarray | None = None) -> int:
        b = Buffer(len(self.buffers), dtype, max(int(size), 1), kind, data)
        self.buffers.append(b)
        return b.id

    def new_dense(self, dtype: str, shape: tuple[int, ...]) -> View:
        size = int(np.prod(shape)) if shape else 1
        return View(self.new_buffer(dtype, size), dtype, tuple(shape), dense_strides(tuple(shape)))

    def const_view(self, array: np.ndarray) -> View:
        """A compile-time constant (e.g. folded BatchNorm scales) as a view."""
        # (np.ascontiguousarray would turn a 0-d array into shape (1,))
        array = array if array.flags.c_contiguous else array.copy(order="C")
        key = id(array)
        found = self._const_ids.get(key)
        if found is not None:
            return found
        b = self.new_buffer(array.dtype.name if array.dtype != np.bool_ else "bool", array.size, "const", array)
        v = View(b, self.buffers[b].dtype, tuple(array.shape), dense_strides(tuple(array.shape)))
        self._const_ids[key] = v
        self._const_arrays.append(array)
        return v

    def view(self, name: str) -> View:
        found = self.views.get(name)
        if found is not None:
            return found
        init = self.graph.initializers.get(name)
        if init is None:
            raise KeyError(f"tensor '{name}' has no buffer (lowering order bug)")
        v = self.const_view(np.asarray(init))
        self.views[name] = v
        return v

    def dense(self, name: str) -> View:
        """``name``'s view, copied to a dense buffer first if it is strided."""
        v = self.view(name)
        if v.is_dense():
            return v
        found = self._dense.get(name)
        if found is None:
            found = self.new_dense(v.dtype, v.shape)
            self.add_op(lower_views.copy_op(self, f"dense:{name}", (), v, found))
            self._dense[name] = found
        return found

    def add_op(self, op: CpuOp) -> CpuOp:
        op.index = len(self.ops)
        self.ops.append(op)
        return op

    def unfuse(self, head: Node, members: list[Node], internal: set[str], target_name: str) -> None:
        """Lower a head alone and its epilogue members as an elementwise op (a head's lowering
        calls this when the epilogue does not fit its tiles; see :func:`.lower_linalg._unfuse`)."""
        lower_linalg._unfuse(self, head, members, internal, target_name)

    # -- the pipeline ---------------------------------------------------------
    def run(self) -> Lowered:
        """The lowered graph.  Fusion and batching check for cycles as they merge, node by node;
        should the merged ops still feed each other in a circle (a fuzzer found such graphs), the
        graph is lowered again without fusion or batching: slower for that model, never wrong."""
        try:
            return self._run()
        except OpCycle:
            if not self.fuse:
                raise AssertionError("cycle among CPU ops without fusion") from None
            log.warning("the cpu backend's fusion made a cycle in '%s'; compiling it without elementwise fusion",
                        _printable(self.graph.name))
            return Lowerer(self.graph, self.cost, 0, fuse=False)._run()

    def _run(self) -> Lowered:
        g = self.graph
        kinds, reasons = self._classify()
        anc = ancestors(g)
        chunks = [c for c in find_chunks(g, anc, self.batch_rows) if all(kinds[i] == "head" for i in c)]
        chunk_of = {i: k for k, c in enumerate(chunks) for i in c}
        for i in chunk_of:
            kinds[i] = "batched"
        groups, group_of = build_groups(g, kinds, anc, fuse=self.fuse)
        by_id = {gr.id: gr for gr in groups}
        internal = self._internal_tensors(groups, group_of)
        for t in g.inputs:
            if t.dtype in ARENA_DTYPES:
                self.views[t.name] = View(self.new_buffer(t.dtype, t.size, "input"), t.dtype, t.shape,
                                          dense_strides(t.shape))
            else:
                self.host_tensors.add(t.name)
        chunk_out = [self._chunk_outputs(c) for c in chunks]
        for i, node in enumerate(g.nodes):
            if kinds[i] in ("view", "batched"):
                continue
            for out in node.outputs:
                if not out or out in internal:
                    continue
                info = g.value_info[out]
                if info.dtype in ARENA_DTYPES:
                    self.views[out] = self.new_dense(info.dtype, info.shape)
                else:
                    self.host_tensors.add(out)
        last_member = {gr.id: max(([gr.head] if gr.head is not None else []) + gr.members) for gr in groups}
        for i, node in enumerate(g.nodes):
            kind = kinds[i]
            if kind == "view":
                lower_views.lower_view(self, node)
            elif kind in ("ew", "head"):
                gid = group_of[i]
                if last_member[gid] == i:
                    self._lower_group(by_id[gid], internal)
            elif kind == "batched":
                k = chunk_of[i]
                if chunks[k][-1] == i:
                    self._lower_chunk(chunks[k], chunk_out[k])
            elif kind == "op":
                lower_nn.LOWERINGS[node.op_type](self, node)
            elif kind == "empty":
                continue  # nothing to compute; its outputs keep their (empty) views
            else:
                self.add_op(self.host_op(node, reasons[i]))
        self._check_views()
        ops = topological_order(self.ops)
        n_groups = sum(1 for gr in groups if len(gr.members) + (gr.head is not None) > 1)
        return Lowered(g, self.buffers, self.views, ops, self.fallbacks, self.host_tensors, n_groups, self.control)

    def _check_views(self) -> None:
        """Every view must stay inside its buffer: a lowering bug here would
        otherwise be a silent out-of-bounds access in compiled code."""
        for name, v in self.views.items():
            if v.size == 0:
                continue
            lo = v.offset + sum(s * (d - 1) for s, d in zip(v.strides, v.shape) if s < 0)
            hi = v.offset + sum(s * (d - 1) for s, d in zip(v.strides, v.shape) if s > 0)
            if lo < 0 or hi >= self.buffers[v.buffer].size:
                raise AssertionError(f"view of '{name}' ({v}) leaves its buffer of {self.buffers[v.buffer].size}")

    def _classify(self) -> tuple[list[str], list[str]]:
        g = self.graph
        return classify(g, Rules(
            host_reason=self._host_reason, is_empty=self._all_empty,
            is_view=lambda node: is_view(g, self.opset, node),
            ew_reason=lambda node: ew_reason(node, g),
            head_ops=frozenset(HEAD_OPS), head_reason=lambda node: lower_linalg.head_reason(self, node),
            op_types=frozenset(lower_nn.LOWERINGS), op_reason=lambda node: lower_nn.reason(self, node),
            ew_ops=EW_OPS, no_kernel="no CPU rKernel for this op"))

    def _all_empty(self, node: Node) -> bool:
        """Whether every output of ``node`` has no elements (and lives in the arena)."""
        outs = [self.graph.value_info[o] for o in node.outputs if o]
        return bool(outs) and all(t.dtype in ARENA_DTYPES and t.size == 0 for t in outs)

    def _host_reason(self, node: Node) -> str:
        if node.domain not in ("", "ai.onnx") and (node.domain, node.op_type) not in lower_attention.DOMAIN_OPS:
            return f"domain {node.domain}"
        if control_flow.is_if(node):
            found = control_flow.branch_fallbacks(node, self.graph, _host_nodes)
            if not found:
                self._control_ifs.add(id(node))
            return control_flow.if_reason(node, found)
        if node.subgraphs():
            return "control flow (subgraphs)"
        for name in list(node.inputs) + list(node.outputs):
            if name and self.graph.value_info[name].dtype not in ARENA_DTYPES:
                return f"dtype {self.graph.value_info[name].dtype} of '{name}'"
        return ""

    def _internal_tensors(self, groups: list[Group], group_of: dict[int, int]) -> set[str]:
        g = self.graph
        index = {id(n): i for i, n in enumerate(g.nodes)}
        outputs = {t.name for t in g.outputs}
        internal: set[str] = set()
        for gr in groups:
            for m in ([gr.head] if gr.head is not None else []) + gr.members:
                for t in g.nodes[m].outputs:
                    if not t or t in outputs:
                        continue
                    users = g.consumers.get(t, ())
                    if users and all(group_of.get(index[id(u)]) == gr.id for u in users):
                        internal.add(t)
        return internal

    # -- batched shared-weight MatMuls ------------------------------------------------
    def _chunk_outputs(self, chunk: list[int]) -> View:
        """The stacked output of a chunk; each member's output is a row block of it."""
        g = self.graph
        first = g.nodes[chunk[0]]
        m, _ = g.value_info[first.inputs[0]].shape
        n = g.value_info[first.inputs[1]].shape[1]
        out = self.new_dense("float32", (len(chunk) * m, n))
        for k, i in enumerate(chunk):
            self.views[g.nodes[i].outputs[0]] = View(out.buffer, "float32", (m, n), (n, 1), k * m * n)
        return out

    def _lower_chunk(self, chunk: list[int], out: View) -> None:
        g = self.graph
        nodes = [g.nodes[i] for i in chunk]
        m, k = g.value_info[nodes[0].inputs[0]].shape
        rows = [self.view(nd.inputs[0]) for nd in nodes]
        a = _stacked(rows, m, k)
        if a is None:
            a = self.new_dense("float32", (len(rows) * m, k))
            pieces = [(v, View(a.buffer, "float32", (m, k), (k, 1), j * m * k)) for j, v in enumerate(rows)]
            self.add_op(lower_views.multi_copy_op(self, f"{nodes[-1].name or 'MatMul'}:stack", tuple(nodes), pieces))
        b = self.view(nodes[0].inputs[1])
        b_rs, b_cs = b.strides
        spec = GemmSpec(len(rows) * m, out.shape[1], k, a, a.strides[0], a.strides[1], b, b_rs, b_cs, out,
                        out.shape[1], [(0, 0, 0)])
        self.add_op(gemm_op(self, f"{nodes[-1].name or 'MatMul'}:batched{len(rows)}", tuple(nodes), spec, None,
                            ("matrix",)))

    # -- host (reference) ops ---------------------------------------------------
    def host_op(self, node: Node, reason: str) -> CpuOp:
        if id(node) in self._control_ifs:
            self.control.append((node, reason))
            log.info("the cpu backend runs If '%s' of '%s' on the host as control flow, its taken branch compiled",
                     _printable(node.name), _printable(self.graph.name))
        else:
            self.fallbacks.append((node, reason))
        # The host reads initializers straight from the graph; arena reads are
        # the tensors computed (or fed) before it.
        reads = tuple(sorted({self.views[i].buffer for i in set(node.inputs) | outer_names(node)
                              if i and i in self.views}))
        writes = tuple(sorted({self.views[o].buffer for o in node.outputs if o and o in self.views}))
        return CpuOp(node.name or node.op_type, "host", (node,), reads, writes, 0.0, 0.0, None, None,
                     host=True, host_reason=reason)

    # -- fused groups -------------------------------------------------------------
    def _lower_group(self, gr: Group, internal: set[str]) -> None:
        g = self.graph
        members = [g.nodes[m] for m in gr.members]
        head = g.nodes[gr.head] if gr.head is not None else None
        if head is not None:
            lower_linalg.lower_head(self, head, members, internal)
            return
        prog, stored = self.build_program(members, internal, gr.shape)
        self.add_op(ew_op(self, members, prog, stored))

    def build_program(self, members: list[Node], internal: set[str], shape: tuple[int, ...],
                      preset: dict[str, tuple[int, View]] | None = None,
                      ) -> tuple[EwProgram, list[str]]:
        """An elementwise program running ``members`` in order.

        ``preset`` maps tensor names to (register, view) already loaded
        (a GEMM epilogue's raw tile).  Returns the program and the names of
        the tensors it stores.
        """
        g = self.graph
        prog = EwProgram(tuple(shape))
        regs: dict[str, int] = {}
        for name, (_, view) in (preset or {}).items():
            regs[name] = prog.load(view)
        stored: list[str] = []
        for node in members:
            def operand(i: int, node: Node = node) -> int:
                name = node.inputs[i]
                if name in regs:
                    return regs[name]
                return prog.load(self.view(name))

            def constant(array: np.ndarray) -> int:
                return prog.load(self.const_view(array))

            out = node.outputs[0]
            regs[out] = ew_translate(node, g, prog, operand, constant)
            if out not in internal:
                prog.store(regs[out], self.views[out])
                stored.append(out)
        return prog, stored


def _host_nodes(graph: Graph) -> list[tuple[Node, str]]:
    """The nodes of ``graph`` the cpu backend would leave to the host, with the reasons: classified
    after the backend's graph passes, as a compile of ``graph`` would (they rewrite some ops, e.g.
    a reflect Pad, into forms with kernels)."""
    graph = graph_passes.prepare(graph)
    kinds, reasons = Lowerer(graph)._classify()
    return [(n, r) for n, k, r in zip(graph.nodes, kinds, reasons) if k == "host"]


def _stacked(rows: list[View], m: int, k: int) -> View | None:
    """The rows as one strided [len * m, k] matrix view, if they already are one."""
    first = rows[0]
    if any(v.buffer != first.buffer for v in rows) or any(v.strides[-1] != 1 for v in rows):
        return None
    if m > 1 and any(v.strides[0] != k for v in rows):
        return None
    step = (rows[1].offset - first.offset) if len(rows) > 1 else m * k
    if step < m * k or any(v.offset != first.offset + j * step for j, v in enumerate(rows)):
        return None
    if m > 1 and step != m * k:
        return None
    return View(first.buffer, "float32", (len(rows) * m, k), (step if m == 1 else k, 1), first.offset)


