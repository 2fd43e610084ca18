"""A corpus of 40+ architectures built in code, for measuring rammer on models nobody here tuned for.

Every entry is a named model with its family, built from code with random weights from fixed seeds
(torch modules written here or instantiated from ``transformers`` configs, scikit-learn estimators
through skl2onnx, onnxruntime's quantizer applied to a float export): nothing is downloaded.

Each entry builds at two sizes:

* ``"full"``: realistic widths, depths, sequence lengths (32-256) and image sizes (224 or what the
  architecture expects); what ``ci/corpus_bench.py`` times and docs/benchmarks.md reports;
* ``"ci"``: the same graph structure reduced (fewer layers, narrower, smaller inputs) so that
  tests/test_corpus.py compiles and checks every entry in a few minutes on two cores.

Built models are cached on disk (``$RAMMER_CORPUS_DIR``, default ``~/.cache/rammer/corpus``), keyed
by the entry's definition: its name, size, batch, parameters, the source text of the corpus's modules
and the versions of torch / transformers / skl2onnx / onnxruntime; a repeated run does
not re-export.

    from corpus import ENTRIES, build
    model = build(ENTRIES["bert"], "ci")      # Built(onnx=bytes, feeds={name: array})
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import io
import os
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SIZES = ("full", "ci")
FAMILIES = ("encoder", "decoder", "speech", "vision-transformer", "cnn", "detection", "rnn", "quantized",
            "traditional-ml")
DEFAULT_CACHE = os.environ.get("RAMMER_CORPUS_DIR", os.path.expanduser("~/.cache/rammer/corpus"))


@dataclass(frozen=True)
class Built:
    """One built model: its ONNX bytes and the inputs it is run with (fixed seed)."""

    onnx: bytes
    feeds: dict[str, np.ndarray]


@dataclass(frozen=True)
class Entry:
    """One corpus model.  ``builder(size, batch, **params)`` returns a :class:`Built`."""

    name: str
    family: str
    kind: str
    builder: Callable[..., Built]
    batch: int = 1
    params: tuple[tuple[str, Any], ...] = field(default=())

    def cache_key(self, size: str) -> str:
        """A digest of everything that decides the built model (a changed builder re-exports)."""
        # Every module of the corpus: builders call each other (the quantized entries build float ones).
        here = os.path.dirname(os.path.abspath(__file__))
        source = "".join(open(os.path.join(here, f), encoding="utf-8").read()
                         for f in sorted(os.listdir(here)) if f.endswith(".py"))
        versions = []
        for pkg in ("torch", "transformers", "sklearn", "skl2onnx", "onnxruntime", "onnx"):
            try:
                versions.append(f"{pkg}={importlib.import_module(pkg).__version__}")
            except ImportError:
                versions.append(f"{pkg}=absent")
        text = "\n".join([self.name, self.family, size, str(self.batch), repr(self.params),
                          self.builder.__qualname__, source, *versions])
        return hashlib.sha256(text.encode()).hexdigest()[:20]


def build(entry: Entry, size: str = "full", cache_dir: str | None = DEFAULT_CACHE) -> Built:
    """The entry's model at ``size``, from the disk cache when built before (``cache_dir=None``: no cache)."""
    if size not in SIZES:
        raise ValueError(f"size {size!r} is not one of {SIZES}")
    if cache_dir is None:
        return entry.builder(size, entry.batch, **dict(entry.params))
    key = entry.cache_key(size)
    onnx_path = os.path.join(cache_dir, f"{entry.name}-{size}-{key}.onnx")
    feeds_path = onnx_path[:-5] + ".npz"
    if os.path.exists(onnx_path) and os.path.exists(feeds_path):
        with open(onnx_path, "rb") as f:
            data = f.read()
        with np.load(feeds_path) as z:
            return Built(data, {k: z[k] for k in z.files})
    built = entry.builder(size, entry.batch, **dict(entry.params))
    os.makedirs(cache_dir, exist_ok=True)
    # Written under temporary names and renamed: a killed run never leaves half a model in the cache.
    for path, write in ((feeds_path, lambda f: np.savez(f, **built.feeds)), (onnx_path, lambda f: f.write(built.onnx))):
        fd, tmp = tempfile.mkstemp(dir=cache_dir, suffix=".part")
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    return built


# -- helpers the family modules share -------------------------------------------------------------------
def export_torch(module: Any, inputs: dict[str, Any], opset: int = 17, outputs: int | None = None) -> Built:
    """``torch.onnx.export`` (the TorchScript exporter, static shapes) of ``module`` in eval mode,
    called with ``inputs`` (by name when its ``forward`` has those parameters, else in order).  The model's outputs are its tensor results
    (``outputs``: keep only the first that many)."""
    import torch

    names = list(inputs)
    # transformers models take their inputs by name; modules written here take them in order.
    by_name = set(names) <= set(inspect.signature(module.forward).parameters)

    class Positional(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = module

        def forward(self, *args):
            out = self.inner(**dict(zip(names, args))) if by_name else self.inner(*args)
            if hasattr(out, "to_tuple"):
                out = out.to_tuple()
            if not isinstance(out, (tuple, list)):
                out = (out,)
            out = tuple(o for o in out if isinstance(o, torch.Tensor))
            return out[:outputs] if outputs else out

    wrapper = Positional().eval()
    args = tuple(torch.as_tensor(v) for v in inputs.values())
    with torch.no_grad():
        n_out = len(wrapper(*args))
    buf = io.BytesIO()
    torch.backends.mha.set_fastpath_enabled(False)  # the fused encoder fast path has no ONNX export
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(wrapper, args, buf, input_names=names, output_names=[f"out{i}" for i in range(n_out)],
                          opset_version=opset, dynamo=False, do_constant_folding=True)
    return Built(buf.getvalue(), {k: np.asarray(v) for k, v in inputs.items()})


def token_ids(batch: int, seq: int, vocab: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, vocab, (batch, seq)).astype(np.int64)


def image(batch: int, channels: int, height: int, width: int | None = None, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, channels, height, width or height)).astype(np.float32)


def _collect() -> dict[str, Entry]:
    from . import cnn, detection, ml, quantized, rnn, speech, transformer_text, vision_transformer

    found: dict[str, Entry] = {}
    for mod in (transformer_text, speech, vision_transformer, cnn, detection, rnn, quantized, ml):
        for e in mod.ENTRIES:
            if e.name in found:
                raise ValueError(f"corpus entry {e.name} is defined twice")
            if e.family not in FAMILIES:
                raise ValueError(f"corpus entry {e.name}: unknown family {e.family}")
            found[e.name] = e
    return found


ENTRIES: dict[str, Entry] = _collect()


def select(models: str = "", family: str = "") -> list[Entry]:
    """The entries named (comma-separated) and/or of the families named; all when both are empty."""
    names = [n for n in models.split(",") if n]
    fams = [f for f in family.split(",") if f]
    unknown = [n for n in names if n not in ENTRIES] + [f for f in fams if f not in FAMILIES]
    if unknown:
        raise KeyError(f"unknown corpus model(s)/family(ies) {unknown}; families: {', '.join(FAMILIES)}")
    chosen = [ENTRIES[n] for n in names] if names else list(ENTRIES.values())  # in the order named
    return [e for e in chosen if not fams or e.family in fams]
