"""Checking each node against its ONNX schema before rammer infers it.

The ONNX checker (run on every model at load) verifies the proto's structure:
input and output counts, attribute names and types, required attributes.  It
does not know tensor types, so a string constant fed to ``Relu`` or a bool
tensor added to a float one pass it and used to fail deep inside an op's
numpy code.  At import every input's dtype is known, so this module checks
each node against the schema's type constraints for the node's opset, for all
ops alike:

* each input's element type is one its formal parameter allows;
* inputs that share a type parameter (``T`` of ``Add``'s ``A`` and ``B``)
  have one element type;
* required (non-optional) inputs are present.

Ops whose schema ONNX does not know (rammer's own domains) are left to the
op's ``infer``.  Parameter inputs whose shape follows from the main input's
(a Conv bias, BatchNormalization's statistics, an LSTM's B and initial states,
Clip's bounds) are checked by :func:`check_node_params`, from one table; the
window attributes (``strides=0``, negative pads) in the ops' geometry code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

import onnx.defs

from ..errors import ShapeError
from ..ir import Node, TensorInfo

__all__ = ["AXIS_ATTRS", "ENUM_ATTRS", "check_node_attrs", "check_node_params", "check_node_types", "onnx_type_name"]

_SINGLE = onnx.defs.OpSchema.FormalParameterOption.Single
_VARIADIC = onnx.defs.OpSchema.FormalParameterOption.Variadic

#: IR dtype name -> the element type's name in ONNX type strings (``tensor(float)``).
_ONNX_TYPE_NAMES = {"float32": "float", "float64": "double", "object": "string"}


def onnx_type_name(dtype: str) -> str:
    """``tensor(...)`` spelling of an IR dtype (``float32`` -> ``tensor(float)``)."""
    return f"tensor({_ONNX_TYPE_NAMES.get(dtype, dtype)})"


def _ir_name(type_str: str) -> str:
    inner = type_str[len("tensor("):-1] if type_str.startswith("tensor(") else type_str
    back = {v: k for k, v in _ONNX_TYPE_NAMES.items() if k != "object"}
    return back.get(inner, inner)


def _shown(dtype: str) -> str:
    return "string" if dtype == "object" else dtype


@lru_cache(maxsize=4096)
def _schema(op_type: str, domain: str, opset: int) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None


@lru_cache(maxsize=4096)
def _required_attrs(op_type: str, domain: str, opset: int) -> tuple[str, ...]:
    schema = _schema(op_type, domain, opset)
    return () if schema is None else tuple(sorted(a.name for a in schema.attributes.values() if a.required))


@lru_cache(maxsize=4096)
def _input_count_range(op_type: str, domain: str, opset: int) -> tuple[int, int] | None:
    schema = _schema(op_type, domain, opset)
    return None if schema is None else (int(schema.min_input), int(schema.max_input))


@lru_cache(maxsize=4096)
def _formal_inputs(op_type: str, domain: str, opset: int) -> tuple | None:
    """(name, option, homogeneous, type param, allowed tensor types or None) per formal input."""
    schema = _schema(op_type, domain, opset)
    if schema is None:
        return None
    constraints = {tc.type_param_str: tuple(tc.allowed_type_strs) for tc in schema.type_constraints}
    out = []
    for f in schema.inputs:
        allowed = constraints.get(f.type_str, (f.type_str,))
        tensors = frozenset(t for t in allowed if t.startswith("tensor("))
        # A parameter that also takes sequences/optionals is checked only for its tensor types,
        # and one that takes no tensor at all is not checked (rammer lowers sequences first).
        out.append((f.name, f.option, f.is_homogeneous, f.type_str, tensors or None))
    return tuple(out)


def _formal_for(formals: tuple, index: int) -> tuple | None:
    if index < len(formals):
        return formals[index]
    if formals and formals[-1][1] == _VARIADIC:
        return formals[-1]
    return None


def check_node_types(node: Node, opset: int, inputs: Sequence[TensorInfo | None]) -> None:
    """A :class:`ShapeError` naming the node, the input and the allowed types when ``node``'s
    inputs break its ONNX schema (element types, one type per type parameter, required inputs)."""
    domain = node.domain or ""
    formals = _formal_inputs(node.op_type, domain, opset)
    if formals is None:
        return
    label = node.label
    low, high = _input_count_range(node.op_type, domain, opset)  # type: ignore[misc]
    given = len(node.inputs)
    while given and not node.inputs[given - 1]:
        given -= 1  # trailing omitted optional inputs do not count
    if given < low or given > high:
        want = f"{low}" if low == high else (f"at least {low}" if high > 1 << 20 else f"{low} to {high}")
        raise ShapeError(f"{label}: has {given} input(s), but {node.op_type} (opset {opset}) takes {want}; "
                         f"fix the model's node")
    missing_attrs = [a for a in _required_attrs(node.op_type, domain, opset) if a not in node.attrs]
    if missing_attrs:
        raise ShapeError(f"{label}: required attribute(s) {', '.join(missing_attrs)} missing; the ONNX spec of "
                         f"{node.op_type} (opset {opset}) requires them. Fix the model's node.")
    for i, (fname, option, _, _, _) in enumerate(formals):
        if option == _SINGLE and (i >= len(node.inputs) or not node.inputs[i]):
            raise ShapeError(f"{label}: required input {i} ('{fname}') is missing; the ONNX spec of "
                             f"{node.op_type} (opset {opset}) requires it. Fix the model's node.")
    first_of_param: dict[str, tuple[str, str]] = {}
    for i, (tname, info) in enumerate(zip(node.inputs, inputs)):
        if not tname or info is None:
            continue
        formal = _formal_for(formals, i)
        if formal is None:
            continue
        fname, option, homogeneous, param, allowed = formal
        if allowed is not None and onnx_type_name(info.dtype) not in allowed:
            names = ", ".join(sorted(_ir_name(t) for t in allowed))
            raise ShapeError(
                f"{label}: input {i} ('{fname}') is tensor '{tname}' of type {_shown(info.dtype)}, but "
                f"{node.op_type} (opset {opset}) accepts only {names} there. Fix the model: cast "
                f"'{tname}' or feed the node a tensor of an allowed type.")
        if option == _VARIADIC and not homogeneous:
            continue
        seen = first_of_param.setdefault(param, (tname, info.dtype))
        if seen[1] != info.dtype and allowed is not None and len(allowed) > 1:
            raise ShapeError(
                f"{label}: inputs '{seen[0]}' ({_shown(seen[1])}) and '{tname}' ({_shown(info.dtype)}) must have "
                f"one element type (both are '{param}' in the ONNX spec of {node.op_type}); cast one of them.")


# -- secondary inputs: parameters whose shape follows from the main input's ----------------------


Inputs = Sequence[TensorInfo | None]
#: A parameter check: (node, input infos, opset) -> None, raising a ShapeError.
ParamCheck = Callable[[Node, Inputs, int], None]


def _fail(node: Node, message: str) -> ShapeError:
    return ShapeError(f"{node.label}: {message}")


def _param(node: Node, inputs: Sequence[TensorInfo | None], i: int) -> TensorInfo | None:
    return inputs[i] if i < len(inputs) and i < len(node.inputs) and node.inputs[i] else None


def _expect_shape(node: Node, inputs: Sequence[TensorInfo | None], i: int, what: str,
                  shape: tuple[int, ...], why: str) -> None:
    info = _param(node, inputs, i)
    if info is not None and tuple(info.shape) != tuple(shape):
        raise _fail(node, f"{what} '{info.name}' has shape {list(info.shape)}, but {why} it must be {list(shape)}; "
                          f"fix the model (the initializer's size or the node's inputs)")


def _unidirectional(node: Node, inputs: Sequence[TensorInfo | None], i: int, what: str,
                    target: tuple[int, ...]) -> None:
    info = _param(node, inputs, i)
    if info is None:
        return
    shape = tuple(info.shape)
    ok = len(shape) <= len(target) and all(s in (1, t) for s, t in zip(shape[::-1], target[::-1]))
    if not ok:
        raise _fail(node, f"{what} '{info.name}' of shape {list(shape)} does not broadcast to {list(target)}; "
                          f"fix the model (the initializer's size or the node's inputs)")


def _main(inputs: Sequence[TensorInfo | None], i: int = 0) -> TensorInfo | None:
    return inputs[i] if i < len(inputs) else None


def _conv(node: Node, inputs: Sequence[TensorInfo | None], opset: int) -> None:
    w = _main(inputs, 1)
    if w is not None and w.shape:
        _expect_shape(node, inputs, 2, "bias B", (w.shape[0],), f"with {w.shape[0]} output channels (W's dim 0)")


def _conv_transpose(node: Node, inputs: Sequence[TensorInfo | None], opset: int) -> None:
    w = _main(inputs, 1)
    if w is not None and len(w.shape) > 1:
        m = w.shape[1] * int(node.attrs.get("group", 1))
        _expect_shape(node, inputs, 2, "bias B", (m,), f"with {m} output channels (W's dim 1 x group)")


def _per_channel(*indices: int, names: Sequence[str]) -> ParamCheck:
    def check(node: Node, inputs: Sequence[TensorInfo | None], opset: int) -> None:
        x = _main(inputs)
        if x is None:
            return
        if len(x.shape) < 2:
            raise _fail(node, f"input X '{x.name}' has shape {list(x.shape)}; {node.op_type} needs [N, C, ...] "
                              f"(rank 2 or more)")
        for i, what in zip(indices, names):
            _expect_shape(node, inputs, i, what, (x.shape[1],), f"with {x.shape[1]} channels (X's dim 1)")
    return check


def _normalized(*indices: int, names: Sequence[str]) -> ParamCheck:
    def check(node: Node, inputs: Sequence[TensorInfo | None], opset: int) -> None:
        x = _main(inputs)
        if x is None:
            return
        for i, what in zip(indices, names):
            _unidirectional(node, inputs, i, what, tuple(x.shape))
    return check


def _recurrent(gates: int) -> ParamCheck:
    def check(node: Node, inputs: Sequence[TensorInfo | None], opset: int) -> None:
        x, r = _main(inputs), _main(inputs, 2)
        if x is None or r is None or len(x.shape) != 3 or len(r.shape) != 3:
            return  # the op's infer names what is wrong with X, W and R
        direction = node.attrs.get("direction", "forward")
        dirs = 2 if (direction.decode() if isinstance(direction, bytes) else direction) == "bidirectional" else 1
        hidden = int(node.attrs.get("hidden_size", r.shape[-1]))
        layout = int(node.attrs.get("layout", 0))
        batch = x.shape[0] if layout else x.shape[1]
        _expect_shape(node, inputs, 3, "bias B", (dirs, 2 * gates * hidden),
                      f"with {dirs} direction(s), {gates} gate(s) and hidden_size {hidden}")
        _expect_shape(node, inputs, 4, "sequence_lens", (batch,), f"with batch {batch}")
        state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
        why = f"with {dirs} direction(s), batch {batch}, hidden_size {hidden} and layout {layout}"
        _expect_shape(node, inputs, 5, "initial_h", state, why)
        if gates == 4:
            _expect_shape(node, inputs, 6, "initial_c", state, why)
            _expect_shape(node, inputs, 7, "peepholes P", (dirs, 3 * hidden),
                          f"with {dirs} direction(s) and hidden_size {hidden}")
    return check


def _scalars(*pairs: tuple[int, str]) -> ParamCheck:
    def check(node: Node, inputs: Sequence[TensorInfo | None], opset: int) -> None:
        for i, what in pairs:
            info = _param(node, inputs, i)
            if info is not None and info.size != 1:
                raise _fail(node, f"input {i} ({what}) '{info.name}' has shape {list(info.shape)}, but "
                                  f"{node.op_type} takes a single value there; fix the model")
    return check


def _group_norm(node: Node, inputs: Sequence[TensorInfo | None], opset: int) -> None:
    scale = _param(node, inputs, 1)
    if scale is not None:
        _expect_shape(node, inputs, 2, "bias", tuple(scale.shape), "like the scale")


def _reverse_sequence(node: Node, inputs: Sequence[TensorInfo | None], opset: int) -> None:
    x = _main(inputs)
    if x is None or len(x.shape) < 2:
        raise _fail(node, "input must have rank 2 or more (time and batch axes)")
    batch_axis, time_axis = int(node.attrs.get("batch_axis", 1)), int(node.attrs.get("time_axis", 0))
    if {batch_axis, time_axis} != {0, 1}:
        raise _fail(node, f"batch_axis={batch_axis} and time_axis={time_axis} must be 0 and 1, one each")
    _expect_shape(node, inputs, 1, "sequence_lens", (x.shape[batch_axis],), f"with batch {x.shape[batch_axis]}")


def _min_rank(rank: int) -> ParamCheck:
    def check(node: Node, inputs: Inputs, opset: int) -> None:
        x = _main(inputs)
        if x is not None and len(x.shape) < rank:
            raise _fail(node, f"rank-{len(x.shape)} input '{x.name}' (shape {list(x.shape)}); {node.op_type} needs "
                              f"rank {rank} or more")
    return check


def _prelu(node: Node, inputs: Sequence[TensorInfo | None], opset: int) -> None:
    x = _main(inputs)
    if x is not None:
        _unidirectional(node, inputs, 1, "slope", tuple(x.shape))


_PARAM_CHECKS: dict[str, ParamCheck] = {
    "Conv": _conv,
    "ConvTranspose": _conv_transpose,
    "BatchNormalization": _per_channel(1, 2, 3, 4, names=("scale", "bias B", "input_mean", "input_var")),
    "InstanceNormalization": _per_channel(1, 2, names=("scale", "bias B")),
    "LayerNormalization": _normalized(1, 2, names=("Scale", "bias B")),
    "RMSNormalization": _normalized(1, names=("scale",)),
    "GroupNormalization": _group_norm,
    "RNN": _recurrent(1),
    "GRU": _recurrent(3),
    "LSTM": _recurrent(4),
    "Clip": _scalars((1, "min"), (2, "max")),
    "Trilu": _scalars((1, "k")),
    "Dropout": _scalars((1, "ratio"), (2, "training_mode")),
    "CumSum": _scalars((1, "axis")),
    "Range": _scalars((0, "start"), (1, "limit"), (2, "delta")),
    "OneHot": _scalars((1, "depth")),
    "TopK": _scalars((1, "K")),
    "PRelu": _prelu,
    "Softmax": _min_rank(1),
    "LogSoftmax": _min_rank(1),
    "Hardmax": _min_rank(1),
    "ReverseSequence": _reverse_sequence,
}


_AUTO_PAD = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
_LOSS_REDUCTIONS = ("none", "sum", "mean")
_SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")

#: String attributes that take one of a few values: op -> attribute -> the values rammer computes.
#: Checked at import, so a misspelt mode fails when the model loads instead of when it first runs.
ENUM_ATTRS: dict[str, dict[str, tuple[str, ...]]] = {
    "Conv": {"auto_pad": _AUTO_PAD},
    "ConvTranspose": {"auto_pad": _AUTO_PAD},
    "ConvInteger": {"auto_pad": _AUTO_PAD},
    "QLinearConv": {"auto_pad": _AUTO_PAD},
    "MaxPool": {"auto_pad": _AUTO_PAD},
    "AveragePool": {"auto_pad": _AUTO_PAD},
    "LpPool": {"auto_pad": _AUTO_PAD},
    "RNN": {"direction": ("forward", "reverse", "bidirectional")},
    "GRU": {"direction": ("forward", "reverse", "bidirectional")},
    "LSTM": {"direction": ("forward", "reverse", "bidirectional")},
    "Resize": {
        "mode": ("nearest", "linear", "cubic"),
        "coordinate_transformation_mode": ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                                           "align_corners", "asymmetric", "tf_crop_and_resize"),
        "nearest_mode": ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"),
        "keep_aspect_ratio_policy": ("stretch", "not_larger", "not_smaller"),
    },
    "GridSample": {"mode": ("bilinear", "nearest", "bicubic", "linear", "cubic"),
                   "padding_mode": ("zeros", "border", "reflection")},
    "Pad": {"mode": ("constant", "reflect", "edge", "wrap")},
    "DepthToSpace": {"mode": ("DCR", "CRD")},
    "ScatterElements": {"reduction": _SCATTER_REDUCTIONS},
    "ScatterND": {"reduction": _SCATTER_REDUCTIONS},
    "NegativeLogLikelihoodLoss": {"reduction": _LOSS_REDUCTIONS},
    "SoftmaxCrossEntropyLoss": {"reduction": _LOSS_REDUCTIONS},
    "Gelu": {"approximate": ("none", "tanh")},
}


#: Axis attributes of ops whose ``infer`` keeps the input's shape (and so never reads them):
#: op -> attributes, each an axis or a list of axes of input 0.
AXIS_ATTRS: dict[str, tuple[str, ...]] = {
    "Softmax": ("axis",),
    "LogSoftmax": ("axis",),
    "Hardmax": ("axis",),
    "ReverseSequence": ("batch_axis", "time_axis"),
    "MeanVarianceNormalization": ("axes",),
}


def _check_axes(node: Node, inputs: Sequence[TensorInfo | None]) -> None:
    x = _main(inputs)
    if x is None:
        return
    rank = len(x.shape)
    for name in AXIS_ATTRS.get(node.op_type, ()):
        value = node.attrs.get(name)
        if value is None:
            continue
        for axis in value if isinstance(value, list) else [value]:
            if not isinstance(axis, int) or not -max(rank, 1) <= axis < max(rank, 1):
                raise _fail(node, f"attribute {name}={value!r} is out of range for the input '{x.name}' of rank "
                                  f"{rank}; fix the model")


def check_node_attrs(node: Node, inputs: Sequence[TensorInfo | None] = ()) -> None:
    """A :class:`ShapeError` naming the node and attribute when a mode-like string attribute
    has a value rammer does not know (a typo, or a mode of a newer spec), or an axis attribute
    the op's shape inference does not read is out of range."""
    if node.domain:
        return
    _check_axes(node, inputs)
    for name, allowed in ENUM_ATTRS.get(node.op_type, {}).items():
        value = node.attrs.get(name)
        if value is None:
            continue
        if isinstance(value, bytes):
            value = value.decode("utf-8", errors="replace")
        if not isinstance(value, str) or value not in allowed:
            raise _fail(node, f"attribute {name}={value!r} is not one of {', '.join(allowed)}; fix the model")


def check_node_params(node: Node, opset: int, inputs: Sequence[TensorInfo | None]) -> None:
    """A :class:`ShapeError` naming the node and tensor when a parameter input's shape does not
    fit the node's main input (a 5-element bias on an 8-channel Conv, an LSTM bias for another
    hidden size, a Clip bound that is not a scalar...)."""
    if node.domain:
        return
    check = _PARAM_CHECKS.get(node.op_type)
    if check is not None:
        check(node, inputs, opset)
