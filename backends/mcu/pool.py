"""The weight pool: one set of 8-long vectors shared by the whole network.

Weights of a pooled layer are cut into 8-long vectors along the input channels (conv [K, kh, kw, C]
gives K*kh*kw*C/8 vectors; fc [K, C] gives K*C/8).  k-means with cosine distance (assignment by the
largest cosine, centroid = mean of the members) makes the pool; each vector is replaced by its most
cosine-similar pool vector and stored as a 1-byte index.  Magnitude is kept per output channel: the
least-squares ``alpha[k]`` with W[k] ~ alpha[k] * pool[idx[k]], folded into the channel's
requantization multiplier, so the int8 format (bias, multiplier, shift per channel) is unchanged.

Layers that stay int8, with the reason: the first weighted layer (its input is the raw image, not
a ReLU output), the last one (the classifier, most sensitive), depthwise convs, 1x1 convs with a
stride (residual downsample shortcuts), layers whose input channels are not a multiple of 8, and
layers whose input can be negative (bit-serial needs an unsigned activation, i.e. a ReLU before it).

Optional fine-tuning with torch keeps the pool fixed and projects every pooled layer's weights on
it in every forward pass (straight-through gradient).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rammer.errors import CompileError

from .layers import FloatNet, run_float
from .quantize import PooledWeights

VECTOR = 8
POOL_SIZES = range(32, 257)


@dataclass
class PoolPlan:
    pool: np.ndarray  # float [P, 8]
    pooled: dict[str, PooledWeights]
    #: layer name -> why it stays int8 (weighted layers only)
    reasons: dict[str, str]


def select_layers(net: FloatNet, calibration: np.ndarray) -> tuple[list[str], dict[str, str]]:
    """(names of poolable layers, reasons for the weighted layers that stay int8)."""
    weighted = [l for l in net.layers if l.kind in ("conv", "fc", "dwconv")]
    vals = run_float(net, calibration, keep_all=True)
    ok: list[str] = []
    reasons: dict[str, str] = {}
    for i, l in enumerate(weighted):
        c = l.weight.shape[-1] if l.kind != "dwconv" else 1
        if l.kind == "dwconv":
            reasons[l.name] = "depthwise conv (one weight per input channel: nothing to share)"
        elif i == 0:
            reasons[l.name] = "first layer (reads the raw input, not a ReLU output)"
        elif i == len(weighted) - 1:
            reasons[l.name] = "last layer (the classifier)"
        elif l.kind == "conv" and l.kernel == (1, 1) and l.stride != (1, 1):
            reasons[l.name] = "1x1 strided conv (residual downsample shortcut)"
        elif c % VECTOR:
            reasons[l.name] = f"input channels {c} not a multiple of {VECTOR}"
        elif float(vals[l.inputs[0]].min()) < 0.0:
            reasons[l.name] = "input can be negative (no ReLU before it): bit-serial needs unsigned activations"
        else:
            ok.append(l.name)
    return ok, reasons


def _vectors(weight: np.ndarray) -> np.ndarray:
    return weight.reshape(weight.shape[0], -1, VECTOR)  # [K, J, 8]


def kmeans_cosine(vectors: np.ndarray, size: int, seed: int = 0, iters: int = 30) -> np.ndarray:
    """``size`` pool vectors for ``vectors`` [N, 8] by k-means with cosine distance."""
    if size not in POOL_SIZES:
        raise CompileError(f"pool size {size} outside 32..256 (a 1-byte index)")
    rng = np.random.default_rng(seed)
    norms = np.linalg.norm(vectors, axis=1)
    live = vectors[norms > 1e-12]
    if len(live) < size:
        raise CompileError(f"pool size {size} is more than the {len(live)} nonzero weight vectors of the pooled layers")
    unit = live / np.linalg.norm(live, axis=1, keepdims=True)
    # k-means++ seeding on cosine distance
    centers = [unit[rng.integers(len(unit))]]
    dist = 1.0 - unit @ centers[0]
    for _ in range(1, size):
        p = np.maximum(dist, 0) ** 2
        p = p / p.sum() if p.sum() > 0 else None
        centers.append(unit[rng.choice(len(unit), p=p)])
        dist = np.minimum(dist, 1.0 - unit @ centers[-1])
    c = np.array(centers)
    for _ in range(iters):
        assign = np.argmax(unit @ (c / np.linalg.norm(c, axis=1, keepdims=True)).T, axis=1)
        new = np.zeros_like(c)
        np.add.at(new, assign, live)
        counts = np.bincount(assign, minlength=size)
        empty = counts == 0
        new[~empty] /= counts[~empty, None]
        new[empty] = c[empty]
        if np.allclose(new, c):
            break
        c = new
    return c.astype(np.float32)


def assign(weight: np.ndarray, pool: np.ndarray) -> PooledWeights:
    """Indices of the most cosine-similar pool vector and the least-squares per-channel alpha."""
    v = _vectors(weight)
    unit_pool = pool / np.maximum(np.linalg.norm(pool, axis=1, keepdims=True), 1e-12)
    idx = np.argmax(v @ unit_pool.T, axis=2)  # [K, J]
    p = pool[idx]  # [K, J, 8]
    num = (v * p).sum(axis=(1, 2))
    den = (p * p).sum(axis=(1, 2))
    alpha = np.maximum(num / np.maximum(den, 1e-12), 1e-8)
    return PooledWeights(idx.astype(np.uint8).reshape(weight.shape[:-1] + (weight.shape[-1] // VECTOR,)),
                         alpha.astype(np.float64))


def pooled_float_weight(pw: PooledWeights, pool: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    w = pool[pw.indices.astype(np.int64)] * pw.alpha.reshape((-1,) + (1,) * pw.indices.ndim)
    return w.reshape(shape).astype(np.float32)


def build_pool(net: FloatNet, calibration: np.ndarray, size: int = 64, seed: int = 0,
               layers: list[str] | None = None) -> PoolPlan:
    ok, reasons = select_layers(net, calibration)
    if layers is not None:
        for name in ok:
            if name not in layers:
                reasons[name] = "left int8 by request"
        ok = [n for n in ok if n in layers]
    if not ok:
        return PoolPlan(np.zeros((0, VECTOR), np.float32), {}, reasons)
    by_name = {l.name: l for l in net.layers}
    vecs = np.concatenate([_vectors(by_name[n].weight).reshape(-1, VECTOR) for n in ok])
    pool = kmeans_cosine(vecs, size, seed)
    return PoolPlan(pool, {n: assign(by_name[n].weight, pool) for n in ok}, reasons)


def finetune(net: FloatNet, plan: PoolPlan, x: np.ndarray, y: np.ndarray, epochs: int = 10, lr: float = 1e-3,
             seed: int = 0, batch: int = 64) -> tuple[FloatNet, PoolPlan]:
    """Train every weight with the pool fixed (pooled layers projected on it in every forward pass);
    returns the new float network and its pool assignment.  Needs torch."""
    import torch

    from .torch_net import TorchNet

    torch.manual_seed(seed)
    model = TorchNet(net, {n: torch.tensor(plan.pool) for n in plan.pooled})
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    xt, yt = torch.tensor(x), torch.tensor(y, dtype=torch.long)
    g = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        perm = torch.randperm(len(xt), generator=g)
        for i in range(0, len(xt), batch):
            sel = perm[i:i + batch]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xt[sel]).reshape(len(sel), -1), yt[sel])
            loss.backward()
            opt.step()
    new = model.to_float_net()
    by_name = {l.name: l for l in new.layers}
    return new, PoolPlan(plan.pool, {n: assign(by_name[n].weight, plan.pool) for n in plan.pooled}, plan.reasons)
