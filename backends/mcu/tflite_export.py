"""A quantized model as a ``.tflite`` flatbuffer, for checking the int8 path against TFLite Micro.

Written with the ``flatbuffers`` builder against the TFLite schema (field slots and enum values as
in ``schema.fbs``; the ``tflite`` package's readers check them in the tests).  Covers the layer kinds
whose padding TFLite can express (SAME or VALID); anything else is refused with a ValueError.
Activations are NHWC with a batch of 1; conv weights [K, kh, kw, C], depthwise [1, kh, kw, C],
fully connected [K, C] (TFLite flattens its input in NHWC order, as this backend does).
"""

from __future__ import annotations

import numpy as np

from .quantize import QLayer, QModel

# schema.fbs enums
_INT8, _INT32 = 9, 2
_SAME, _VALID = 0, 1
_NONE, _RELU, _RELU6 = 0, 1, 3
_OPS = {"add": 0, "avgpool": 1, "conv": 3, "dwconv": 4, "fc": 9, "maxpool": 17}
_OPTIONS = {"conv": 1, "dwconv": 2, "avgpool": 5, "maxpool": 5, "fc": 8, "add": 11}


def _padding(layer: QLayer, in_hw, out_hw) -> int:
    if layer.pad == (0, 0, 0, 0):
        return _VALID
    same = []
    for d in range(2):
        total = max((out_hw[d] - 1) * layer.stride[d] + layer.kernel[d] - in_hw[d], 0)
        same += [total // 2, total - total // 2]
    if (layer.pad[0], layer.pad[2], layer.pad[1], layer.pad[3]) == tuple(same):
        return _SAME
    raise ValueError(f"layer '{layer.name}': padding {layer.pad} is neither SAME nor VALID in TFLite")


def _activation(layer: QLayer, zp_out: int) -> int:
    if layer.act_max < 127:
        return _RELU6
    if layer.act_min > -128 and layer.act_min == zp_out:
        return _RELU
    if layer.act_min == -128:
        return _NONE
    raise ValueError(f"layer '{layer.name}': clamp [{layer.act_min}, {layer.act_max}] is no TFLite activation")


def to_tflite(model: QModel) -> bytes:
    import flatbuffers

    b = flatbuffers.Builder(1024)
    buffers: list[bytes] = [b""]
    tensors: list[tuple] = []  # (shape, type, buffer, name, scales, zero points, quantized_dimension)

    def tensor(shape, ttype, data: np.ndarray | None, name, scales, zps, qdim=0) -> int:
        buf = 0
        if data is not None:
            buffers.append(np.ascontiguousarray(data).tobytes())
            buf = len(buffers) - 1
        tensors.append((list(shape), ttype, buf, name, list(scales), list(zps), qdim))
        return len(tensors) - 1

    t = model.tensors
    act = {tid: tensor([1, *q.shape], _INT8, None, f"t{tid}", [q.scale], [q.zero_point]) for tid, q in t.items()}
    ops = []  # (opcode, inputs, outputs, options kind, options fields)
    for layer in model.layers:
        tin, tout = t[layer.inputs[0]], t[layer.output]
        k = layer.kind
        if k not in _OPS:
            raise ValueError(f"layer '{layer.name}': no TFLite export for '{k}'")
        if k in ("conv", "fc", "dwconv"):
            s_w = np.asarray(layer.weight_scale, np.float32)
            if k == "dwconv":
                w = tensor([1, *layer.weight.shape], _INT8, layer.weight.astype(np.int8), f"w{layer.output}",
                           s_w, [0] * len(s_w), 3)
            else:
                w = tensor(layer.weight.shape, _INT8, layer.weight.astype(np.int8), f"w{layer.output}",
                           s_w, [0] * len(s_w), 0)
            bias = tensor([len(layer.bias)], _INT32, layer.bias.astype("<i4"), f"b{layer.output}",
                          np.float32(tin.scale) * s_w, [0] * len(s_w), 0)
            inputs = [act[layer.inputs[0]], w, bias]
        else:
            inputs = [act[i] for i in layer.inputs]
        fa = _activation(layer, tout.zero_point) if k in ("conv", "dwconv", "fc", "add") else _NONE
        if k in ("conv", "dwconv", "maxpool", "avgpool"):
            pad = _padding(layer, tin.shape[:2], tout.shape[:2])
        if k == "conv":
            fields = [(0, "b", pad), (1, "i", layer.stride[1]), (2, "i", layer.stride[0]), (3, "b", fa),
                      (4, "i", 1), (5, "i", 1)]
        elif k == "dwconv":
            fields = [(0, "b", pad), (1, "i", layer.stride[1]), (2, "i", layer.stride[0]), (3, "i", 1),
                      (4, "b", fa), (5, "i", 1), (6, "i", 1)]
        elif k in ("maxpool", "avgpool"):
            fields = [(0, "b", pad), (1, "i", layer.stride[1]), (2, "i", layer.stride[0]),
                      (3, "i", layer.kernel[1]), (4, "i", layer.kernel[0]), (5, "b", _NONE)]
        elif k == "fc":
            fields = [(0, "b", fa)]
        else:
            fields = [(0, "b", fa)]
        ops.append((_OPS[k], inputs, [act[layer.output]], _OPTIONS[k], fields))

    # --- serialize (children before parents) ---
    codes = sorted({op[0] for op in ops})

    def ivec(values, kind="i"):
        if kind == "i":
            b.StartVector(4, len(values), 4)
            for v in reversed(values):
                b.PrependInt32(int(v))
        elif kind == "f":
            b.StartVector(4, len(values), 4)
            for v in reversed(values):
                b.PrependFloat32(float(v))
        elif kind == "l":
            b.StartVector(8, len(values), 8)
            for v in reversed(values):
                b.PrependInt64(int(v))
        return b.EndVector()

    tensor_offs = []
    for shape, ttype, buf, name, scales, zps, qdim in tensors:
        name_off = b.CreateString(name)
        shape_off = ivec(shape)
        sc, zp = ivec(scales, "f"), ivec(zps, "l")
        b.StartObject(7)
        b.PrependUOffsetTRelativeSlot(2, sc, 0)
        b.PrependUOffsetTRelativeSlot(3, zp, 0)
        b.PrependInt32Slot(6, qdim, 0)
        q = b.EndObject()
        b.StartObject(10)
        b.PrependUOffsetTRelativeSlot(0, shape_off, 0)
        b.PrependInt8Slot(1, ttype, 0)
        b.PrependUint32Slot(2, buf, 0)
        b.PrependUOffsetTRelativeSlot(3, name_off, 0)
        b.PrependUOffsetTRelativeSlot(4, q, 0)
        tensor_offs.append(b.EndObject())
    op_offs = []
    for code, ins, outs, opt_kind, fields in ops:
        n = 1 + max(f[0] for f in fields)
        b.StartObject(n)
        for slot, kind, value in fields:
            if kind == "b":
                b.PrependInt8Slot(slot, value, -1)  # -1: never equal, so every field is written
            else:
                b.PrependInt32Slot(slot, value, -(1 << 31))
        opt = b.EndObject()
        ins_off, outs_off = ivec(ins), ivec(outs)
        b.StartObject(9)
        b.PrependUint32Slot(0, codes.index(code), 0)
        b.PrependUOffsetTRelativeSlot(1, ins_off, 0)
        b.PrependUOffsetTRelativeSlot(2, outs_off, 0)
        b.PrependUint8Slot(3, opt_kind, 0)
        b.PrependUOffsetTRelativeSlot(4, opt, 0)
        op_offs.append(b.EndObject())

    def ovec(offs):
        b.StartVector(4, len(offs), 4)
        for o in reversed(offs):
            b.PrependUOffsetTRelative(o)
        return b.EndVector()

    tv, opv = ovec(tensor_offs), ovec(op_offs)
    sg_in, sg_out = ivec([act[model.input]]), ivec([act[model.output]])
    sg_name = b.CreateString("main")
    b.StartObject(5)
    b.PrependUOffsetTRelativeSlot(0, tv, 0)
    b.PrependUOffsetTRelativeSlot(1, sg_in, 0)
    b.PrependUOffsetTRelativeSlot(2, sg_out, 0)
    b.PrependUOffsetTRelativeSlot(3, opv, 0)
    b.PrependUOffsetTRelativeSlot(4, sg_name, 0)
    sg = b.EndObject()
    code_offs = []
    for code in codes:
        b.StartObject(4)
        b.PrependInt8Slot(0, min(code, 127), -1)
        b.PrependInt32Slot(2, 1, 0)
        b.PrependInt32Slot(3, code, -1)
        code_offs.append(b.EndObject())
    buf_offs = []
    for data in buffers:
        if data:
            b.StartVector(1, len(data), 16)
            b.head = b.head - len(data)
            b.Bytes[b.head:b.head + len(data)] = data
            vec = b.EndVector()
            b.StartObject(3)
            b.PrependUOffsetTRelativeSlot(0, vec, 0)
        else:
            b.StartObject(3)
        buf_offs.append(b.EndObject())
    codes_v, sgs_v, bufs_v = ovec(code_offs), ovec([sg]), ovec(buf_offs)
    desc = b.CreateString("rammer mcu int8")
    b.StartObject(8)
    b.PrependUint32Slot(0, 3, 0)
    b.PrependUOffsetTRelativeSlot(1, codes_v, 0)
    b.PrependUOffsetTRelativeSlot(2, sgs_v, 0)
    b.PrependUOffsetTRelativeSlot(3, desc, 0)
    b.PrependUOffsetTRelativeSlot(4, bufs_v, 0)
    root = b.EndObject()
    b.Finish(root, file_identifier=b"TFL3")
    return bytes(b.Output())
