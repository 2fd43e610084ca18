"""A :class:`~rammer.backends.mcu.layers.FloatNet` as a torch module (NHWC in, NHWC out), for
fine-tuning with a fixed weight pool (:func:`rammer.backends.mcu.pool.finetune`)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .layers import FloatLayer, FloatNet


def project(w: torch.Tensor, pool: torch.Tensor) -> torch.Tensor:
    """w's 8-long vectors replaced by alpha[k] * (most cosine-similar pool vector), straight-through."""
    k = w.shape[0]
    v = w.reshape(k, -1, 8)
    unit = pool / pool.norm(dim=1, keepdim=True).clamp_min(1e-12)
    with torch.no_grad():
        idx = torch.argmax(v @ unit.T, dim=2)
    p = pool[idx]
    alpha = ((v * p).sum(dim=(1, 2)) / (p * p).sum(dim=(1, 2)).clamp_min(1e-12)).clamp_min(1e-8)
    proj = (alpha[:, None, None] * p).reshape(w.shape)
    return w + (proj - w).detach()


class TorchNet(torch.nn.Module):
    def __init__(self, net: FloatNet, pools: dict[str, torch.Tensor]):
        super().__init__()
        self.net = net
        self.pools = pools
        self.weights = torch.nn.ParameterDict()
        self.biases = torch.nn.ParameterDict()
        for i, l in enumerate(net.layers):
            if l.weight is not None:
                self.weights[str(i)] = torch.nn.Parameter(torch.tensor(l.weight))
                self.biases[str(i)] = torch.nn.Parameter(torch.tensor(l.bias))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        vals = {0: x}
        for i, l in enumerate(self.net.layers):
            xs = [vals[t] for t in l.inputs]
            w = self.weights[str(i)] if l.weight is not None else None
            if w is not None and l.name in self.pools:
                w = project(w, self.pools[l.name])
            vals[l.output] = self._layer(l, xs, w, self.biases[str(i)] if w is not None else None)
        return vals[self.net.output]

    @staticmethod
    def _layer(l: FloatLayer, xs, w, b):
        x = xs[0]
        nchw = x.permute(0, 3, 1, 2) if x.dim() == 4 else x
        pt, pl, pb, pr = l.pad
        if l.kind in ("conv", "dwconv", "maxpool", "avgpool"):
            fill = float("-inf") if l.kind == "maxpool" else 0.0
            nchw = F.pad(nchw, (pl, pr, pt, pb), value=fill)
        if l.kind == "conv":
            y = F.conv2d(nchw, w.permute(0, 3, 1, 2), b, stride=l.stride)
        elif l.kind == "dwconv":
            y = F.conv2d(nchw, w[:, None], b, stride=l.stride, groups=w.shape[0])
        elif l.kind == "maxpool":
            y = F.max_pool2d(nchw, l.kernel, l.stride)
        elif l.kind == "avgpool":
            y = F.avg_pool2d(nchw, l.kernel, l.stride)
        elif l.kind == "fc":
            y = (x.reshape(x.shape[0], -1) @ w.T + b)[:, :, None, None]
        elif l.kind == "add":
            y = (xs[0] + xs[1]).permute(0, 3, 1, 2)
        else:  # relu
            y = nchw
        if l.act == "relu":
            y = F.relu(y)
        elif l.act == "relu6":
            y = y.clamp(0, 6)
        return y.permute(0, 2, 3, 1)

    def to_float_net(self) -> FloatNet:
        layers = []
        for i, l in enumerate(self.net.layers):
            if l.weight is not None:
                l = FloatLayer(**{**l.__dict__, "weight": self.weights[str(i)].detach().numpy().astype(np.float32),
                                  "bias": self.biases[str(i)].detach().numpy().astype(np.float32)})
            layers.append(l)
        return FloatNet(self.net.name, self.net.input_shape, layers, self.net.shapes, self.net.output)
