"""Running one fuzz case and saying what happened.

A case is a model (bytes) and feeds.  The reference backend is the
specification; onnxruntime breaks ties.  Outcomes:

* ``ok``: the backend agrees with reference (or both refuse the model with a
  good error);
* ``invalid``: reference itself refuses the model with a :class:`RammerError`
  that names what is wrong (expected for mutated models);
* ``wrong``: the backend's outputs differ from reference beyond the
  backend's declared tolerance (onnxruntime agreeing with reference confirms
  it; ``reference-disputed`` when onnxruntime sides with the backend);
* ``refused``: reference runs the model but the backend fails to compile or
  run it (a backend that declares ``reference_fallback`` must fall back, not fail);
* ``unsupported``: a backend without ``reference_fallback`` refuses the model
  with an :class:`~rammer.errors.UnsupportedOpError` that names the node and
  op (its documented answer to an op it does not compile: not a finding);
* ``raw-exception``: an exception that is not a :class:`RammerError`
  escaped (a ``KeyError`` from deep inside);
* ``vague-error``: a :class:`RammerError` whose message names no node, op or
  tensor of the model and is not about the file as a whole;
* ``crash`` and ``hang`` are decided by :mod:`.campaign` (the worker died or
  ran out of time).
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

import rammer

from ..errors import ModelLoadError, RammerError, UnsupportedOpError

__all__ = ["Outcome", "run_case", "FAILURES"]

#: Outcomes that are findings.
FAILURES = ("wrong", "reference-disputed", "refused", "raw-exception", "vague-error", "crash", "hang")

#: Messages about the file as a whole may name no node (nothing was parsed).
_FILE_LEVEL = re.compile(r"not a valid ONNX model|protobuf|checker|opset|ir_version|has no graph|external data|"
                         r"domain|too large|exceeds|limit", re.IGNORECASE)


@dataclass
class Outcome:
    kind: str
    detail: str = ""
    max_err: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "detail": self.detail[:2000], "max_err": self.max_err}


def _names(model_bytes: bytes) -> set[str]:
    """Node names, op types and tensor names of a (maybe broken) model, for judging error messages."""
    m = onnx.ModelProto()
    try:
        m.ParseFromString(model_bytes)
    except Exception:
        return set()
    names: set[str] = set()

    def walk(g: onnx.GraphProto) -> None:
        for n in g.node:
            names.update(x for x in (n.name, n.op_type, *n.input, *n.output) if x)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for sub in a.graphs:
                    walk(sub)
        names.update(v.name for v in (*g.input, *g.output, *g.value_info) if v.name)
        names.update(t.name for t in g.initializer if t.name)
    walk(m.graph)
    # a damaged string field can decode as bytes; only text can appear in an error message
    return {n for n in names if isinstance(n, str) and len(n) >= 2}


def _judge_error(exc: BaseException, model_bytes: bytes) -> Outcome | None:
    """None when ``exc`` is a good refusal; else the finding it is."""
    if not isinstance(exc, RammerError):
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:])
        return Outcome("raw-exception", f"{type(exc).__name__}: {exc}\n{tb}")
    text = str(exc)
    if isinstance(exc, ModelLoadError) and _FILE_LEVEL.search(text):
        return None
    if _FILE_LEVEL.search(text):
        return None
    names = _names(model_bytes)
    if any(n in text for n in names):
        return None
    return Outcome("vague-error", f"{type(exc).__name__}: {text}")


def _compare(want: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray], rtol: float,
             atol: float) -> tuple[bool, float, str]:
    worst = 0.0
    for name, w in want.items():
        if name not in got:
            return False, float("inf"), f"output {name} missing"
        g = np.asarray(got[name])
        w = np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return False, float("inf"), f"output {name}: {g.dtype}{list(g.shape)} vs {w.dtype}{list(w.shape)}"
        if w.dtype.kind in "fc":
            with np.errstate(invalid="ignore", over="ignore"):
                ok_here, err = _close(g, w, rtol, atol)
            worst = max(worst, err)
            if not ok_here:
                return False, worst, f"output {name}: values differ (max {err:.3g})"
            continue
        if not np.array_equal(g, w):
            return False, float("inf"), f"output {name}: values differ"
    return True, worst, ""


def _close(g: np.ndarray, w: np.ndarray, rtol: float, atol: float) -> tuple[bool, float]:
    both_nan = np.isnan(w) & np.isnan(g)
    same_inf = np.isinf(w) & (w == g)
    diff = np.where(both_nan | same_inf, 0.0, np.abs(g.astype(np.float64) - w.astype(np.float64)))
    finite = np.where(np.isfinite(w), w, 0).astype(np.float64)
    # Elementwise allclose, plus a slack at the tensor's own scale: an element near zero after a
    # cancellation (a LayerNorm of a nearly constant row) carries the rounding of its large inputs.
    scale = float(np.sqrt(np.mean(finite * finite))) if finite.size else 0.0
    bound = atol + rtol * (np.abs(finite) + 0.5 * scale)
    bad = ~(diff <= bound) & ~(both_nan | same_inf)
    err = float(np.where(np.isfinite(diff), diff, np.inf).max()) if diff.size else 0.0
    return not bool(bad.any()), err


def _ort(model_bytes: bytes, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    try:
        import onnxruntime as ort  # deferred: the optional independent oracle

        opts = ort.SessionOptions()
        opts.log_severity_level = 4
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(None, dict(feeds))))
    except Exception:
        return None


def run_case(model_bytes: bytes, feeds: Mapping[str, np.ndarray], backend: str,
             compile_options: Mapping[str, Any] | None = None) -> Outcome:
    """Run one case on ``backend`` and on reference; the outcome (see the module docstring)."""

    options = dict(compile_options or {})
    try:
        ref = rammer.compile(model_bytes, backend="reference")
        want = ref.run(dict(feeds))
    except Exception as exc:  # reference refuses: the backend must refuse as well, with a good error
        bad = _judge_error(exc, model_bytes)
        if bad is not None:
            bad.detail = "reference: " + bad.detail
            return bad
        try:
            rammer.compile(model_bytes, backend=backend, **options).run(dict(feeds))
        except Exception as exc2:
            bad2 = _judge_error(exc2, model_bytes)
            if bad2 is not None:
                bad2.detail = f"{backend}: " + bad2.detail
                return bad2
        return Outcome("invalid", f"{type(exc).__name__}: {str(exc)[:300]}")
    be = rammer.plugins.get_backend(backend)
    rtol, atol = be.capabilities.rtol, be.capabilities.atol
    try:
        got = rammer.compile(model_bytes, backend=backend, **options).run(dict(feeds))
    except Exception as exc:
        bad = _judge_error(exc, model_bytes)
        if bad is not None:
            return bad
        if isinstance(exc, UnsupportedOpError) and not be.capabilities.reference_fallback:
            return Outcome("unsupported", f"{type(exc).__name__}: {str(exc)[:500]}")
        return Outcome("refused", f"{type(exc).__name__}: {str(exc)[:500]}")
    ok, err, why = _compare(want, got, max(rtol, 1e-4), max(atol, 1e-5))
    if ok:
        return Outcome("ok", max_err=err)
    tie = _ort(model_bytes, feeds)
    if tie is not None:
        ref_ok, ort_err, _ = _compare(want, tie, 1e-3, 1e-4)
        be_ok, _, _ = _compare(tie, got, 1e-3, 1e-4)
        if be_ok and not ref_ok:
            return Outcome("reference-disputed", why, err)
        # Rounding, not a bug: the backend is no further from reference than an independent
        # runtime is (float32 sums in another order; e.g. a LayerNorm output near 0).
        if ref_ok and err <= 2 * ort_err:
            return Outcome("ok", f"within onnxruntime's own distance from reference ({ort_err:.3g})", err)
    return Outcome("wrong", why, err)
