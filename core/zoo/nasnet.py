"""NASNet-A for CIFAR (Zoph et al., 2018), batch norm folded into the convs.

Each cell takes the two previous cell outputs (h_{i-1}, h_i), projects both
to the cell's filter count, then builds five blocks; each block applies one
operation to each of two earlier states and adds the results. A normal cell
concatenates h_i and its five blocks (6 x filters channels); a reduction cell
halves the resolution and concatenates its four unused blocks (4 x filters).

The cells are described as data (the NASNet-A search result), so the builder
below stays a small interpreter of that description.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from rammer.zoo.builder import GraphBuilder
from rammer.zoo.layers import avg_pool, classifier, conv, max_pool, relu


@dataclass(frozen=True)
class Feature:
    """A tensor with what the builder needs to know about its shape."""

    name: str
    channels: int
    size: int  # height == width


@dataclass(frozen=True)
class CellSpec:
    # Two (operation, input state index) pairs per block; states 0 and 1 are
    # the cell's (projected) inputs h_{i-1} and h_i, state 2+k is block k.
    blocks: tuple[tuple[tuple[str, int], tuple[str, int]], ...]
    # State indices concatenated into the cell output.
    concat: tuple[int, ...]


NORMAL_CELL = CellSpec(
    blocks=(
        (("sep5", 0), ("sep3", 1)),
        (("sep5", 1), ("sep3", 1)),
        (("avg3", 0), ("identity", 1)),
        (("avg3", 1), ("avg3", 1)),
        (("sep3", 0), ("identity", 0)),
    ),
    concat=(1, 2, 3, 4, 5, 6),
)

REDUCTION_CELL = CellSpec(
    blocks=(
        (("sep5", 0), ("sep7", 1)),
        (("max3", 0), ("sep7", 1)),
        (("avg3", 0), ("sep5", 1)),
        (("identity", 3), ("avg3", 2)),
        (("sep3", 2), ("max3", 0)),
    ),
    concat=(3, 4, 5, 6),
)


@dataclass(frozen=True)
class NASNetConfig:
    image: int = 32
    cells_per_stage: int = 6  # N
    filters: int = 32  # F
    stem_multiplier: int = 3
    classes: int = 10


class _NASNetBuilder:
    def __init__(self, b: GraphBuilder) -> None:
        self.b = b

    def project(self, x: str, in_c: int, out_c: int, name: str) -> str:
        """A 1x1 conv bringing a cell input to the cell's width.

        Gain 1/sqrt(2): every block adds two branches, doubling the variance;
        halving it here stands in for the batch norms that NASNet relies on,
        so the 20-cell stack keeps O(1) activations.
        """
        return conv(self.b, x, in_c, out_c, 1, name, pad=0, gain=0.5**0.5)

    def separable(self, x: Feature, filters: int, kernel: int, stride: int, name: str) -> Feature:
        """NASNet's separable op: (relu, depthwise, pointwise+BN) twice; stride on the first."""
        b, y, channels = self.b, x.name, x.channels
        size = x.size
        for rep in (1, 2):
            s = stride if rep == 1 else 1
            y = relu(b, y, f"{name}_relu{rep}")
            y = conv(
                b, y, channels, channels, kernel, f"{name}_dw{rep}", stride=s, group=channels,
                bias=False, gain=0.5**0.5,  # no ReLU between depthwise and pointwise
            )
            y = conv(b, y, channels, filters, 1, f"{name}_pw{rep}")
            channels = filters
            size = (size + 2 * (kernel // 2) - kernel) // s + 1
        return Feature(y, filters, size)

    def operation(self, op: str, x: Feature, filters: int, stride: int, name: str) -> Feature:
        if op.startswith("sep"):
            return self.separable(x, filters, int(op[3:]), stride, name)
        size = (x.size + 2 - 3) // stride + 1
        if op == "avg3":
            y = avg_pool(self.b, x.name, name, kernel=3, stride=stride, pad=1)
        elif op == "max3":
            y = max_pool(self.b, x.name, name, kernel=3, stride=stride, pad=1)
        elif op == "identity":
            if stride != 1:
                raise ValueError("NASNet identity ops never stride in NASNet-A")
            return x
        else:
            raise ValueError(f"unknown NASNet operation {op!r}")
        return Feature(y, x.channels, size)

    def factorized_reduction(self, x: Feature, filters: int, name: str) -> Feature:
        """Halve resolution without losing pixels: two 1x1 paths, the second shifted by one."""
        b = self.b
        half = filters // 2
        path1 = avg_pool(b, x.name, f"{name}_path1_pool", kernel=1, stride=2, pad=0)
        path1 = self.project(path1, x.channels, half, f"{name}_path1_conv")
        shifted = b.op(
            "Pad", [x.name, b.int64s("pad_bottom_right", [0, 0, 0, 0, 0, 0, 1, 1])],
            f"{name}_path2_pad",
        )
        shifted = b.op(
            "Slice",
            [shifted, b.int64s("ones2", [1, 1]),
             b.int64s(f"ends_{x.size + 1}", [x.size + 1, x.size + 1]), b.int64s("axes23", [2, 3])],
            f"{name}_path2_shift",
        )
        path2 = avg_pool(b, shifted, f"{name}_path2_pool", kernel=1, stride=2, pad=0)
        path2 = self.project(path2, x.channels, filters - half, f"{name}_path2_conv")
        y = b.op("Concat", [path1, path2], f"{name}_concat", axis=1)
        return Feature(y, filters, (x.size - 1) // 2 + 1)

    def cell_inputs(self, prev: Feature, cur: Feature, filters: int, name: str) -> list[Feature]:
        """Bring h_{i-1} to h_i's resolution and both to ``filters`` channels."""
        b = self.b
        if prev.size != cur.size:
            act = Feature(relu(b, prev.name, f"{name}_prev_relu"), prev.channels, prev.size)
            prev = self.factorized_reduction(act, filters, f"{name}_prev_reduce")
        elif prev.channels != filters:
            y = relu(b, prev.name, f"{name}_prev_relu")
            prev = Feature(self.project(y, prev.channels, filters, f"{name}_prev_proj"), filters,
                           prev.size)
        y = relu(b, cur.name, f"{name}_cur_relu")
        cur = Feature(self.project(y, cur.channels, filters, f"{name}_cur_proj"), filters, cur.size)
        return [prev, cur]

    def cell(
        self, spec: CellSpec, prev: Feature, cur: Feature, filters: int, stride: int, name: str
    ) -> Feature:
        states = self.cell_inputs(prev, cur, filters, name)
        for k, pair in enumerate(spec.blocks):
            branches = []
            for side, (op, index) in zip("lr", pair):
                # Only ops reading the cell's inputs stride; blocks are already reduced.
                s = stride if index < 2 else 1
                branches.append(
                    self.operation(op, states[index], filters, s, f"{name}_b{k}{side}_{op}")
                )
            left, right = branches
            y = self.b.op("Add", [left.name, right.name], f"{name}_b{k}_add")
            states.append(Feature(y, filters, left.size))
        parts = [states[i] for i in spec.concat]
        y = self.b.op("Concat", [p.name for p in parts], f"{name}_out", axis=1)
        return Feature(y, filters * len(parts), parts[0].size)


def build_nasnet(cfg: NASNetConfig, *, name: str, seed: int, batch: int) -> onnx.ModelProto:
    b = GraphBuilder(name, seed)
    nas = _NASNetBuilder(b)
    image = b.input("image", (batch, 3, cfg.image, cfg.image))
    stem_c = cfg.stem_multiplier * cfg.filters
    stem = Feature(conv(b, image, 3, stem_c, 3, "stem"), stem_c, cfg.image)
    outputs = [stem, stem]  # the first cell sees the stem as both inputs
    filters = cfg.filters
    cell_no = 0
    for stage in range(3):
        if stage > 0:
            filters *= 2
            outputs.append(
                nas.cell(REDUCTION_CELL, outputs[-2], outputs[-1], filters, 2, f"reduce{stage}")
            )
        for _ in range(cfg.cells_per_stage):
            outputs.append(
                nas.cell(NORMAL_CELL, outputs[-2], outputs[-1], filters, 1, f"cell{cell_no}")
            )
            cell_no += 1
    last = outputs[-1]
    x = relu(b, last.name, "final_relu")
    x = classifier(b, x, last.channels, cfg.classes)
    b.output(x, (batch, cfg.classes))
    return b.model(
        f"NASNet-A ({3 * cfg.cells_per_stage} normal + 2 reduction cells, "
        f"F={cfg.filters}), {cfg.image}px input, {cfg.classes} classes"
    )
