"""Small but faithful torch versions of common architectures, for export tests.

torchvision and transformers are not installed (and no weights can be
downloaded), so each architecture is written out here with reduced widths and
depths.  The point is the *graph structure* torch.onnx emits for them:
attention with dynamic-looking shape arithmetic, causal masks, tied
embeddings, BatchNorm/depthwise convolutions, class tokens and LSTMs.  Weights
are random with a fixed seed; every model is returned in eval mode.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

# -- transformers ---------------------------------------------------------------


class SelfAttention(nn.Module):
    """Multi-head attention written as HF BERT/GPT-2 write it: view/permute."""

    def __init__(self, hidden: int, heads: int, causal: bool):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.causal = causal

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        b, s, _ = t.size()
        return t.view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self.qkv(x).split(x.size(-1), dim=-1)
        q, k, v = self._split(q), self._split(k), self._split(v)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        if self.causal:
            s = x.size(1)
            keep = torch.tril(torch.ones(s, s, dtype=torch.bool, device=x.device))
            scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
        if mask is not None:
            scores = scores + mask
        probs = scores.softmax(dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        b, s = ctx.shape[0], ctx.shape[1]
        return self.proj(ctx.view(b, s, -1))


class BertLayer(nn.Module):
    """Post-LN encoder layer (BERT)."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.attn = SelfAttention(hidden, heads, causal=False)
        self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
        self.ff1 = nn.Linear(hidden, 4 * hidden)
        self.ff2 = nn.Linear(4 * hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attn(x, mask))
        return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))


class TinyBert(nn.Module):
    def __init__(self, vocab: int = 100, hidden: int = 64, heads: int = 4, layers: int = 2, max_pos: int = 32):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(max_pos, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.ln = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(hidden, heads) for _ in range(layers))
        self.pool = nn.Linear(hidden, hidden)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seq = input_ids.size(1)
        positions = torch.arange(seq, dtype=torch.long, device=input_ids.device).unsqueeze(0)
        types = torch.zeros_like(input_ids)
        x = self.ln(self.word(input_ids) + self.pos(positions) + self.token_type(types))
        # HF's extended attention mask: (1 - mask) * finfo.min, broadcast over heads and queries.
        ext = attention_mask[:, None, None, :].to(x.dtype)
        ext = (1.0 - ext) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, ext)
        return x, torch.tanh(self.pool(x[:, 0]))


class Gpt2Block(nn.Module):
    """Pre-LN causal decoder block (GPT-2), with the tanh-approximate GELU."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden)
        self.attn = SelfAttention(hidden, heads, causal=True)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, 4 * hidden)
        self.out = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class TinyGpt2(nn.Module):
    def __init__(self, vocab: int = 100, hidden: int = 64, heads: int = 4, layers: int = 2, max_pos: int = 32):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(max_pos, hidden)
        self.blocks = nn.ModuleList(Gpt2Block(hidden, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied embeddings

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(0, input_ids.size(-1), dtype=torch.long, device=input_ids.device).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class TinyViT(nn.Module):
    def __init__(self, image: int = 32, patch: int = 8, hidden: int = 64, heads: int = 4, layers: int = 2,
                 classes: int = 10):
        super().__init__()
        self.patch = nn.Conv2d(3, hidden, kernel_size=patch, stride=patch)
        n = (image // patch) ** 2
        self.cls = nn.Parameter(torch.randn(1, 1, hidden) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n + 1, hidden) * 0.02)
        layer = nn.TransformerEncoderLayer(hidden, heads, dim_feedforward=2 * hidden, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = self.patch(pixels).flatten(2).transpose(1, 2)
        cls = self.cls.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos
        x = self.norm(self.encoder(x))
        return self.head(x[:, 0])


# -- convolutional networks -------------------------------------------------------


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.down is None else self.down(x)
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + identity)


class TinyResNet18(nn.Module):
    """ResNet-18 layout (stem, 4 stages of 2 BasicBlocks) at 1/8 width."""

    def __init__(self, width: int = 8, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], width
        for i, mult in enumerate((1, 2, 4, 8)):
            cout = width * mult
            blocks += [BasicBlock(cin, cout, 1 if i == 0 else 2), BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        mid = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU6()]
        layers += [
            nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid), nn.ReLU6(),
            nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout),
        ]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


class TinyMobileNetV2(nn.Module):
    """MobileNetV2's (t, c, n, s) table at width 0.25, with fewer repeats."""

    def __init__(self, classes: int = 10):
        super().__init__()
        table = [(1, 4, 1, 1), (6, 8, 2, 2), (6, 8, 2, 2), (6, 16, 2, 2), (6, 24, 1, 1), (6, 40, 2, 2), (6, 80, 1, 1)]
        layers: list[nn.Module] = [nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6()]
        cin = 8
        for t, c, n, s in table:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += [nn.Conv2d(cin, 320, 1, bias=False), nn.BatchNorm2d(320), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(320, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


# -- recurrent ----------------------------------------------------------------------


class TinyLstm(nn.Module):
    def __init__(self, features: int = 16, hidden: int = 32, layers: int = 2, bidirectional: bool = False):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=layers, batch_first=True, bidirectional=bidirectional)
        self.head = nn.Linear(hidden * (2 if bidirectional else 1), 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out)


# -- the zoo ------------------------------------------------------------------------


@dataclass(frozen=True)
class TorchCase:
    """A model factory and its example inputs (numpy, fixed shapes)."""

    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[np.random.Generator], dict[str, np.ndarray]]


def _token_inputs(rng: np.random.Generator, with_mask: bool) -> dict[str, np.ndarray]:
    feeds = {"input_ids": rng.integers(0, 100, size=(2, 16)).astype(np.int64)}
    if with_mask:
        mask = np.ones((2, 16), dtype=np.int64)
        mask[1, 11:] = 0  # a padded second sequence
        feeds["attention_mask"] = mask
    return feeds


def _image(size: int) -> Callable[[np.random.Generator], dict[str, np.ndarray]]:
    return lambda rng: {"pixels": rng.standard_normal((2, 3, size, size)).astype(np.float32)}


def _sequence(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"x": rng.standard_normal((2, 10, 16)).astype(np.float32)}


CASES: dict[str, TorchCase] = {
    c.name: c
    for c in [
        TorchCase("bert", TinyBert, lambda rng: _token_inputs(rng, True)),
        TorchCase("gpt2", TinyGpt2, lambda rng: _token_inputs(rng, False)),
        TorchCase("resnet18", TinyResNet18, _image(64)),
        TorchCase("mobilenetv2", TinyMobileNetV2, _image(64)),
        TorchCase("vit", TinyViT, _image(32)),
        TorchCase("lstm", lambda: TinyLstm(), _sequence),
        TorchCase("bilstm", lambda: TinyLstm(bidirectional=True), _sequence),
    ]
}


def build_model(name: str, seed: int = 0) -> nn.Module:
    """The named model with random weights drawn from ``seed``, in eval mode."""
    torch.manual_seed(seed)
    model = CASES[name].build()
    # Non-trivial BatchNorm statistics, so folding mistakes would show.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return model.eval()


def example_inputs(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    return CASES[name].inputs(np.random.default_rng(seed))


def _dynamic_dims(name: str) -> dict[str, dict[int, str]]:
    """Which dims of each input an export with dynamic shapes leaves symbolic."""
    if name in ("bert", "gpt2"):
        return {k: {0: "batch", 1: "seq"} for k in example_inputs(name)}
    if name in ("lstm", "bilstm"):
        return {"x": {0: "batch", 1: "time"}}
    return {"pixels": {0: "batch"}}


class _NoFastPath:
    """The fused encoder-layer kernel has no TorchScript export; trace the module's math instead."""

    def __enter__(self) -> None:
        self.saved = torch.backends.mha.get_fastpath_enabled()
        torch.backends.mha.set_fastpath_enabled(False)

    def __exit__(self, *exc: object) -> None:
        torch.backends.mha.set_fastpath_enabled(self.saved)


def export_dynamo(name: str, raw_path: str, optimized_path: str, dynamic: bool = False,
                  opset: int = 18) -> dict[str, np.ndarray]:
    """Export with the (default) dynamo exporter; returns the example inputs.

    ``optimized_path`` gets what ``torch.onnx.export`` writes by default (its
    onnxscript optimizer already folded constants); ``raw_path`` the graph
    before that optimizer, full of shape arithmetic that rammer must fold.
    """
    model = build_model(name)
    feeds = example_inputs(name)
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    dynamic_shapes = None
    if dynamic:
        dims: dict[str, torch.export.Dim] = {}
        dynamic_shapes = {
            arg: {axis: dims.setdefault(dim, torch.export.Dim(dim, max=32)) for axis, dim in axes.items()}
            for arg, axes in zip(_forward_arg_names(model), _dynamic_dims(name).values())
        }
    with torch.no_grad(), _NoFastPath():
        program = torch.onnx.export(model, args, input_names=list(feeds), opset_version=opset, dynamo=True,
                                    optimize=False, dynamic_shapes=dynamic_shapes)
    program.save(raw_path)
    program.optimize()
    program.save(optimized_path)
    return feeds


def _forward_arg_names(model: nn.Module) -> list[str]:
    return [p for p in inspect.signature(model.forward).parameters]


def export_torchscript(name: str, path: str, dynamic: bool = False, opset: int = 17,
                       initializers_as_inputs: bool = False) -> dict[str, np.ndarray]:
    """Export with the TorchScript exporter (``dynamo=False``); returns the example inputs."""
    model = build_model(name)
    feeds = example_inputs(name)
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    with torch.no_grad(), _NoFastPath(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter is deprecated and says so
        torch.onnx.export(model, args, path, input_names=list(feeds), opset_version=opset, dynamo=False,
                          dynamic_axes=_dynamic_dims(name) if dynamic else None,
                          keep_initializers_as_inputs=initializers_as_inputs)
    return feeds
