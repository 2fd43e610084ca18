"""Signal processing: window functions, DFT, STFT and MelWeightMatrix.

ONNX has no complex dtype here: a complex tensor carries a trailing axis of 2
(real, imaginary) and a real one a trailing axis of 1.  Output lengths depend
on scalar inputs (window size, dft_length, frame_step...), which ``infer``
reads as constants.
"""

from __future__ import annotations

import numpy as np

from .registry import OpContext, OutSpec, register_op
from .tensor import onnx_dtype_attr


def _scalar(ctx: OpContext, value: np.ndarray | None, what: str) -> int:
    flat = np.asarray(value).reshape(-1)
    if flat.size != 1:
        raise ctx.fail(f"{what} must be a scalar, got {flat.size} values")
    return int(flat[0])


def _window_length(ctx: OpContext, size: np.ndarray) -> int:
    n = _scalar(ctx, size, "the window size")
    if n < 0:
        raise ctx.fail(f"window size {n} is negative")
    return n


def _window(ctx: OpContext, size: np.ndarray, terms: tuple[float, ...]) -> np.ndarray:
    """A generalized cosine window: sum_k (-1)^k a_k cos(2 pi k n / N)."""
    n = _window_length(ctx, size)
    periodic = int(ctx.attr("periodic", 1))
    denom = n if periodic else n - 1
    phase = 2 * np.pi * np.arange(n) / denom if denom > 0 else np.zeros(n)
    out = sum(((-1) ** k) * a * np.cos(k * phase) for k, a in enumerate(terms))
    return np.asarray(out, dtype=np.float64).astype(onnx_dtype_attr(ctx, "output_datatype", "float32"))


def _infer_window(ctx: OpContext) -> list[OutSpec]:
    n = _window_length(ctx, ctx.const(0, "size"))
    return [(onnx_dtype_attr(ctx, "output_datatype", "float32"), (n,))]


@register_op("HannWindow", infer=_infer_window)
def hann_window(ctx: OpContext, size: np.ndarray) -> np.ndarray:
    return _window(ctx, size, (0.5, 0.5))


@register_op("HammingWindow", infer=_infer_window)
def hamming_window(ctx: OpContext, size: np.ndarray) -> np.ndarray:
    return _window(ctx, size, (25 / 46, 21 / 46))


@register_op("BlackmanWindow", infer=_infer_window)
def blackman_window(ctx: OpContext, size: np.ndarray) -> np.ndarray:
    return _window(ctx, size, (0.42, 0.5, 0.08))


# -- DFT ----------------------------------------------------------------------------


def _as_complex(x: np.ndarray) -> np.ndarray:
    """[..., 1] real or [..., 2] (re, im) -> complex array without the last axis.

    float32 signals are transformed in complex64 (numpy's FFT keeps that
    precision), which is what ONNX's reference outputs were computed with.
    """
    ctype = np.complex128 if x.dtype == np.float64 else np.complex64
    if x.shape[-1] == 1:
        return x[..., 0].astype(ctype)
    return (x[..., 0] + 1j * x[..., 1]).astype(ctype)


def _from_complex(z: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1).astype(dtype)


def _dft_params(ctx: OpContext, shape: tuple[int, ...], arrays: list[np.ndarray | None] | None) -> tuple[int, int]:
    """(signal axis, dft_length); ``arrays=None`` reads constants (infer)."""
    rank = len(shape)
    if ctx.opset >= 20:
        if ctx.has_input(2):
            axis = _scalar(ctx, ctx.const(2, "axis") if arrays is None else arrays[2], "axis")
        else:
            axis = -2
    else:
        axis = int(ctx.attr("axis", 1))
    if not -rank <= axis < rank:
        raise ctx.fail(f"axis {axis} is out of range for an input of rank {rank}")
    axis %= rank
    if axis == rank - 1:
        raise ctx.fail("the DFT axis cannot be the last axis (it holds re/im)")
    if shape[-1] not in (1, 2):
        raise ctx.fail(f"the last axis must be 1 (real) or 2 (complex), got {shape[-1]}")
    inverse, onesided = int(ctx.attr("inverse", 0)), int(ctx.attr("onesided", 0))
    if ctx.has_input(1):
        length = _scalar(ctx, ctx.const(1, "dft_length") if arrays is None else arrays[1], "dft_length")
    elif inverse and onesided:
        length = 2 * (shape[axis] - 1)  # a one-sided spectrum of an even-length signal
    else:
        length = shape[axis]
    if length < 1:
        raise ctx.fail(f"dft_length {length} must be positive")
    return axis, length


def _dft_shape(ctx: OpContext, shape: tuple[int, ...], axis: int, length: int) -> tuple[int, ...]:
    inverse, onesided = int(ctx.attr("inverse", 0)), int(ctx.attr("onesided", 0))
    out = list(shape)
    if inverse and onesided:
        out[axis], out[-1] = length, 1
    else:
        out[axis], out[-1] = (length // 2 + 1 if onesided else length), 2
    return tuple(out)


def _infer_dft(ctx: OpContext) -> list[OutSpec]:
    x = ctx.inputs[0]
    assert x is not None
    axis, length = _dft_params(ctx, x.shape, None)
    return [(x.dtype, _dft_shape(ctx, x.shape, axis, length))]


@register_op("DFT", infer=_infer_dft)
def dft(ctx: OpContext, x: np.ndarray, *rest: np.ndarray | None) -> np.ndarray:
    axis, length = _dft_params(ctx, x.shape, [x, *rest])
    z = _as_complex(x)
    if int(ctx.attr("inverse", 0)):
        if int(ctx.attr("onesided", 0)):
            return np.fft.irfft(z, n=length, axis=axis)[..., None].astype(x.dtype)
        return _from_complex(np.fft.ifft(z, n=length, axis=axis), x.dtype)
    spectrum = np.fft.fft(z, n=length, axis=axis)
    if int(ctx.attr("onesided", 0)):
        spectrum = np.take(spectrum, np.arange(length // 2 + 1), axis=axis)
    return _from_complex(spectrum, x.dtype)


# -- STFT ---------------------------------------------------------------------------


def _stft_params(ctx: OpContext, shape: tuple[int, ...], window_len: int | None,
                 step: np.ndarray, frame_length: np.ndarray | None) -> tuple[int, int, int, int]:
    """(frame step, frame length, number of frames, frequency bins)."""
    if len(shape) != 3 or shape[-1] not in (1, 2):
        raise ctx.fail(f"signal must be [batch, length, 1 or 2], got {list(shape)}")
    hop = _scalar(ctx, step, "frame_step")
    if frame_length is not None:
        size = _scalar(ctx, frame_length, "frame_length")
    elif window_len is not None:
        size = window_len
    else:
        size = shape[1]
    if window_len is not None and window_len != size:
        raise ctx.fail(f"window length {window_len} differs from frame_length {size}")
    if hop < 1 or not 1 <= size <= shape[1]:
        raise ctx.fail(f"frame_step {hop} and frame_length {size} do not fit a signal of length {shape[1]}")
    frames = 1 + (shape[1] - size) // hop
    bins = size // 2 + 1 if int(ctx.attr("onesided", 1)) else size
    return hop, size, frames, bins


def _infer_stft(ctx: OpContext) -> list[OutSpec]:
    x, window = ctx.inputs[0], ctx.inputs[2] if len(ctx.inputs) > 2 else None
    assert x is not None
    length = ctx.const(3, "frame_length") if ctx.has_input(3) else None
    _, _, frames, bins = _stft_params(ctx, x.shape, window.shape[0] if window is not None else None,
                                      ctx.const(1, "frame_step"), length)
    return [(x.dtype, (x.shape[0], frames, bins, 2))]


@register_op("STFT", infer=_infer_stft)
def stft(ctx: OpContext, x: np.ndarray, step: np.ndarray, window: np.ndarray | None = None,
         frame_length: np.ndarray | None = None) -> np.ndarray:
    hop, size, frames, bins = _stft_params(ctx, x.shape, len(window) if window is not None else None,
                                           step, frame_length)
    signal = _as_complex(x)  # [batch, length]
    starts = np.arange(frames) * hop
    framed = signal[:, starts[:, None] + np.arange(size)[None, :]]  # [batch, frames, size]
    if window is not None:
        framed = framed * window.astype(framed.real.dtype)
    spectrum = np.fft.fft(framed, n=size, axis=-1)[..., :bins]
    return _from_complex(spectrum, x.dtype)


# -- MelWeightMatrix --------------------------------------------------------------------


def _mel_shape(ctx: OpContext, bins: np.ndarray, dft_length: np.ndarray) -> tuple[int, int]:
    n_mel, n_dft = _scalar(ctx, bins, "num_mel_bins"), _scalar(ctx, dft_length, "dft_length")
    if n_mel < 1 or n_dft < 1:
        raise ctx.fail(f"num_mel_bins {n_mel} and dft_length {n_dft} must be positive")
    return n_dft // 2 + 1, n_mel


@register_op(
    "MelWeightMatrix",
    infer=lambda ctx: [(onnx_dtype_attr(ctx, "output_datatype", "float32"),
                        _mel_shape(ctx, ctx.const(0, "num_mel_bins"), ctx.const(1, "dft_length")))],
)
def mel_weight_matrix(ctx: OpContext, bins: np.ndarray, dft_length: np.ndarray, sample_rate: np.ndarray,
                      lower_hz: np.ndarray, upper_hz: np.ndarray) -> np.ndarray:
    n_spec, n_mel = _mel_shape(ctx, bins, dft_length)
    n_dft = _scalar(ctx, dft_length, "dft_length")
    rate = float(np.asarray(sample_rate).reshape(-1)[0])

    def to_mel(hz: float) -> float:
        return 2595 * np.log10(1 + hz / 700)

    low, high = to_mel(float(np.asarray(lower_hz).reshape(-1)[0])), to_mel(float(np.asarray(upper_hz).reshape(-1)[0]))
    # n_mel + 2 equally spaced mel points (step over n_mel + 2 intervals, as the spec defines it),
    # mapped back to Hz and then to DFT bin indices.
    mels = low + np.arange(n_mel + 2) * (high - low) / (n_mel + 2)
    hz = 700 * (10 ** (mels / 2595) - 1)
    edges = np.floor((n_dft + 1) * hz / rate).astype(np.int64)
    out = np.zeros((n_spec, n_mel))
    for i in range(n_mel):
        left, center, right = edges[i], edges[i + 1], edges[i + 2]
        if center == left:
            out[center, i] = 1
        else:
            rise = np.arange(left, center + 1)
            out[rise, i] = (rise - left) / (center - left)
        if right > center:
            fall = np.arange(center, right)
            out[fall, i] = (right - fall) / (right - center)
    return out.astype(onnx_dtype_attr(ctx, "output_datatype", "float32"))
