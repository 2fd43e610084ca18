"""Building one IR graph node by node: shape inference, folding and aliasing.

:class:`GraphBuilder` receives nodes in topological order.  For each node it
asks the op registry for the output dtypes and shapes (with the values of
constant inputs at hand) and then either

* evaluates it right away with the reference implementation when the inputs
  its outputs depend on are constants (constant folding).  Since every shape
  is static after import, ``Shape``/``Size`` of *any* tensor is a constant,
  so the shape arithmetic exporters emit (``Shape -> Gather -> Concat ->
  Reshape``...) folds away completely;
* drops it as an alias (``Identity``, ``SequenceAt``): later readers read the
  aliased tensor directly;
* or keeps it in the graph.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ModelLoadError, RammerError, ShapeError, UnsupportedOpError
from ..interpreter import run_graph
from ..ir import Graph, Node, TensorInfo, dtype_name, outer_names
from ..ops.registry import OpContext, lookup
from .limits import Limits, check_tensor, check_unroll
from .validate import check_node_attrs, check_node_params, check_node_types

#: Folding is skipped for outputs larger than this (elements): such constants
#: are cheaper to compute at run time than to keep in the model.
MAX_FOLD_ELEMENTS = 1 << 24

#: Inputs whose *values* do not matter, only their dtype and static shape.
#: With these replaced by placeholders, e.g. ``Shape(x)`` folds for any ``x``.
METADATA_ONLY_INPUTS: dict[str, tuple[int, ...]] = {
    "Shape": (0,),
    "Size": (0,),
    "CastLike": (1,),
    "EyeLike": (0,),
}


class Scope:
    """Tensor infos, constant values, aliases and sequences visible at a point of the import."""

    def __init__(self, parent: Scope | None, opset: Mapping[str, int]):
        self.parent = parent
        self.opset = opset
        self.infos: dict[str, TensorInfo] = {}
        self.consts: dict[str, np.ndarray] = {}
        #: name -> the tensor it is another name for (dropped Identity nodes).
        self.aliases: dict[str, str] = {}
        #: name -> element tensor names of a sequence value (sequences are
        #: lowered at import; the IR has tensors only).
        self.sequences: dict[str, list[str]] = {}

    def _find(self, table: str, name: str) -> Any:
        s: Scope | None = self
        while s is not None:
            found = getattr(s, table).get(name)
            if found is not None:
                return found
            s = s.parent
        return None

    def resolve(self, name: str) -> str:
        target = self._find("aliases", name)
        return name if target is None else target

    def info(self, name: str) -> TensorInfo | None:
        return self._find("infos", self.resolve(name))

    def sequence(self, name: str) -> list[str] | None:
        return self._find("sequences", name)

    def const(self, name: str) -> np.ndarray | None:
        name = self.resolve(name)
        s: Scope | None = self
        while s is not None:
            if name in s.consts:
                return s.consts[name]
            if name in s.infos:
                return None  # shadowed by a non-constant
            s = s.parent
        return None


def _fold_run_graph(graph: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return run_graph(graph, feeds)


class GraphBuilder:
    """Accumulates the nodes and constants of one (sub)graph being imported."""

    def __init__(self, scope: Scope, output_names: set[str], fold: bool, taken_names: set[str],
                 limits: Limits | None = None):
        self.scope = scope
        self.limits = limits or Limits()
        self.fold = fold
        self.output_names = output_names
        self.initializers: dict[str, np.ndarray] = {}
        self.nodes: list[Node] = []
        self.folded = 0
        self._taken = taken_names
        self._counter = 0

    @property
    def opset(self) -> int:
        return int(self.scope.opset.get("", 1))

    def fresh(self, base: str) -> str:
        """A tensor name no other tensor of the model uses."""
        while True:
            self._counter += 1
            name = f"{base}__{self._counter}"
            if name not in self._taken and self.scope.info(name) is None:
                self._taken.add(name)
                return name

    def add_constant(self, name: str, value: np.ndarray) -> None:
        arr = np.asarray(value)
        self.initializers[name] = arr
        self.scope.consts[name] = arr
        self.scope.infos[name] = TensorInfo(name, dtype_name(arr.dtype), arr.shape)

    def alias(self, name: str, target: str, label: str) -> None:
        """Make ``name`` another name of ``target`` (a copy node if ``name`` is a graph output)."""
        target = self.scope.resolve(target)
        if self.scope.info(target) is None:
            raise ModelLoadError(f"{label} reads tensor '{target}', which is not defined before it")
        if name not in self.output_names:
            self.scope.aliases[name] = target
        elif not self._rename_output(target, name):
            self.add(Node("Identity", (target,), (name,), f"{label}/copy", ""))

    def _rename_output(self, old: str, new: str) -> bool:
        """Make the node writing ``old`` write ``new`` instead (so a graph output needs no copy)."""
        if old in self.output_names or old not in self.scope.infos:
            return False
        at = next((i for i, n in enumerate(self.nodes) if old in n.outputs), None)
        if at is None or any(old in outer_names(n) for n in self.nodes[at + 1:]):
            return False  # a constant or an input, or captured by a subgraph under its old name

        def renamed(names: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(new if n == old else n for n in names)

        for i in range(at, len(self.nodes)):
            n = self.nodes[i]
            if old in n.outputs or old in n.inputs:
                self.nodes[i] = Node(n.op_type, renamed(n.inputs), renamed(n.outputs), n.name, n.domain, n.attrs)
        info = self.scope.infos.pop(old)
        self.scope.infos[new] = TensorInfo(new, info.dtype, info.shape)
        self.scope.aliases[old] = new
        return True

    def add(self, node: Node) -> None:
        """Infer, then fold, alias or keep ``node``."""
        label = node.label
        op = lookup(node.op_type, node.domain)
        if op is None:  # the listing of all unsupported ops runs first at top level; subgraphs land here
            raise UnsupportedOpError(f"{label}: op {node.domain or 'ai.onnx'}::{node.op_type} is not supported",
                                     [(node.op_type, node.domain, node.name)])
        inputs = tuple(self.scope.resolve(n) if n else "" for n in node.inputs)
        if inputs != node.inputs:
            node = Node(node.op_type, inputs, node.outputs, node.name, node.domain, node.attrs)
        in_infos: list[TensorInfo | None] = []
        in_values: list[np.ndarray | None] = []
        for tname in node.inputs:
            if not tname:
                in_infos.append(None)
                in_values.append(None)
                continue
            info = self.scope.info(tname)
            if info is None:
                if self.scope.sequence(tname) is not None:
                    raise ModelLoadError(
                        f"{label} reads the sequence '{tname}' as a tensor; rammer supports sequences only "
                        f"as intermediate values of the Sequence*/SplitToSequence/ConcatFromSequence ops"
                    )
                raise ModelLoadError(f"{label} reads tensor '{tname}', which is not defined before it")
            in_infos.append(info)
            in_values.append(self.scope.const(tname))
        for oname in node.outputs:
            if oname and (oname in self.scope.infos or oname in self.scope.aliases):
                # onnx's checker refuses this (SSA); import_model without it must not let a second
                # writer silently replace the first.
                raise ModelLoadError(f"{label} writes tensor '{oname}', which an earlier node or input already "
                                     f"defines; every tensor name must be written once. Rename one of them")
        opset = int(self.scope.opset.get(node.domain or "", 1))
        check_node_types(node, opset, in_infos)
        check_node_params(node, opset, in_infos)
        check_node_attrs(node, in_infos)
        check_unroll(node, in_infos, self.limits)
        ctx = OpContext(node, opset, in_infos, in_values, run_graph=_fold_run_graph)
        try:
            specs = list(op.infer(ctx))
        except RammerError:
            raise
        except MemoryError:
            raise ShapeError(f"{label}: out of memory inferring its output shapes; check the model's sizes") from None
        except Exception as exc:
            raise ShapeError(f"{label}: shape inference failed ({type(exc).__name__}: {exc}); the node's inputs "
                             f"or attributes are probably invalid for {node.op_type}, fix the model") from exc
        out_infos: dict[str, TensorInfo] = {}
        for i, oname in enumerate(node.outputs):
            if not oname:
                continue
            if i >= len(specs):
                raise ShapeError(f"{label}: inference gave {len(specs)} outputs, the node has {len(node.outputs)}")
            dt, shape = specs[i]
            info = TensorInfo(oname, dtype_name(dt), tuple(int(d) for d in shape))
            if any(d < 0 for d in info.shape):
                raise ShapeError(f"{label}: output '{oname}' would have shape {list(info.shape)}, with a negative "
                                 f"dim; the node's inputs or attributes are invalid for {node.op_type}, fix the model")
            check_tensor(info, f"{label} output", self.limits)
            out_infos[oname] = info

        if self.fold and op.foldable and sum(t.size for t in out_infos.values()) <= MAX_FOLD_ELEMENTS:
            fold_values = self._fold_inputs(node, in_infos, in_values)
            if fold_values is not None:
                self._fold(node, op, fold_values, in_infos, out_infos)
                return
        if node.op_type == "Identity" and not node.domain and node.outputs[0] not in self.output_names:
            self.alias(node.outputs[0], node.inputs[0], label)
            return
        self.scope.infos.update(out_infos)
        self.nodes.append(node)

    # -- folding ----------------------------------------------------------

    def _fold_inputs(self, node: Node, infos: list[TensorInfo | None],
                     values: list[np.ndarray | None]) -> list[np.ndarray | None] | None:
        """The input values to fold ``node`` with, or None if it depends on run-time values."""
        if any(self.scope.const(n) is None for n in outer_names(node)):
            return None  # a subgraph captures a run-time tensor
        metadata_only = METADATA_ONLY_INPUTS.get(node.op_type, ()) if not node.domain else ()
        out: list[np.ndarray | None] = []
        for i, (name, info, value) in enumerate(zip(node.inputs, infos, values)):
            if name and value is None:
                if i not in metadata_only or info is None:
                    return None
                # A read-only placeholder of the right dtype and shape, without the memory.
                value = np.broadcast_to(np.zeros((), dtype=info.np_dtype), info.shape)
            out.append(value)
        return out

    def _fold(self, node: Node, op: Any, values: list[np.ndarray | None], infos: list[TensorInfo | None],
              out_infos: dict[str, TensorInfo]) -> None:
        ctx = OpContext(node, int(self.scope.opset.get(node.domain or "", 1)), infos, values,
                        run_graph=_fold_run_graph)
        try:
            with np.errstate(all="ignore"):
                out = op.compute(ctx, *values)
        except RammerError:
            raise
        except MemoryError:
            raise ShapeError(f"{node.label}: out of memory folding it into a constant") from None
        except Exception as exc:
            raise ShapeError(f"{node.label}: constant folding failed ({type(exc).__name__}: {exc})") from exc
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        for i, oname in enumerate(node.outputs):
            if not oname:
                continue
            arr = np.asarray(outs[i])
            want = out_infos[oname]
            if dtype_name(arr.dtype) != want.dtype or tuple(arr.shape) != want.shape:
                raise ShapeError(
                    f"{node.label}: folding output '{oname}' gave {dtype_name(arr.dtype)}{list(arr.shape)} but "
                    f"it was inferred as {want.dtype}{list(want.shape)} (an op infer/compute mismatch in rammer)"
                )
            self.add_constant(oname, arr)
        self.folded += 1

    # -- result -------------------------------------------------------------

    def output_info(self, name: str, where: str) -> TensorInfo:
        info = self.scope.info(name)
        if info is None:
            what = "a sequence (not supported as a graph output)" if self.scope.sequence(name) else "never computed"
            raise ModelLoadError(f"{where}: output '{name}' is {what}")
        return TensorInfo(name, info.dtype, info.shape)

    def build(self, name: str, inputs: list[TensorInfo], outputs: list[TensorInfo]) -> Graph:
        """The graph, without nodes and constants no output depends on (left over by folding)."""
        needed = {t.name for t in outputs}
        kept: list[Node] = []
        for node in reversed(self.nodes):
            if any(o in needed for o in node.outputs if o):
                kept.append(node)
                needed.update(i for i in node.inputs if i)
                needed.update(outer_names(node))
        kept.reverse()
        inits = {k: v for k, v in self.initializers.items() if k in needed}
        value_info = {t.name: t for t in inputs}
        value_info.update({k: self.scope.infos[k] for k in inits})
        for node in kept:
            value_info.update({o: self.scope.infos[o] for o in node.outputs if o})
        return Graph(name, tuple(inputs), tuple(outputs), tuple(kept), inits, value_info, dict(self.scope.opset))
