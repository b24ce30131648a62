"""Signal processing: DFT (17, 20), STFT, BlackmanWindow, HammingWindow, HannWindow,
MelWeightMatrix.

Complex values travel as a trailing axis of length 2 (real, imaginary); a trailing axis of
length 1 is a real signal. Transforms run in the input's precision (single for float32 and the
narrower types, double for float64), so float32 results agree with a float32 FFT.
"""

from __future__ import annotations

import numpy as np

from onnxflow.ops._common import float_compute_dtype
from onnxflow.ops.registry import op
from onnxflow.values import np_dtype


def _as_complex(x: np.ndarray, what: str) -> tuple[np.ndarray, bool]:
    """Return the signal as real or complex values and whether it is complex."""
    work = float_compute_dtype(x.dtype)
    if x.shape[-1:] == (1,):
        return x[..., 0].astype(work), False
    if x.shape[-1:] == (2,):
        return x[..., 0].astype(work) + 1j * x[..., 1].astype(work), True
    raise ValueError(
        f"{what} must end in an axis of length 1 (real) or 2 (complex), found {x.shape}"
    )


def _from_complex(z: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1).astype(dtype)


def _scalar_int(value: np.ndarray | None, name: str) -> int | None:
    if value is None:
        return None
    if value.size != 1:
        raise ValueError(f"{name} must be a scalar, found shape {value.shape}")
    return int(value.reshape(-1)[0])


def _dft(
    x: np.ndarray, dft_length: int | None, axis: int, inverse: int, onesided: int
) -> np.ndarray:
    """The DFT along ``axis`` (which counts the trailing complex axis in the rank)."""
    rank = x.ndim
    if not (-rank <= axis <= rank - 2) or axis == -1:
        raise ValueError(
            f"axis must be in [-{rank}, -2] or [0, {rank - 2}] for an input of rank {rank}, "
            f"found {axis}"
        )
    axis %= rank
    z, is_complex = _as_complex(x, "DFT input")
    n = dft_length
    if n is None:
        n = 2 * (z.shape[axis] - 1) if onesided and inverse else z.shape[axis]
    if n < 1:
        raise ValueError(f"dft_length must be positive, found {n}")
    if onesided and inverse:
        return np.fft.irfft(z, n=n, axis=axis)[..., None].astype(x.dtype)
    if inverse:
        return _from_complex(np.fft.ifft(z, n=n, axis=axis), x.dtype)
    if onesided and not is_complex:
        spectrum = np.fft.rfft(z, n=n, axis=axis)
    else:
        spectrum = np.fft.fft(z, n=n, axis=axis)
        if onesided:
            spectrum = np.take(spectrum, np.arange(n // 2 + 1), axis=axis)
    return _from_complex(spectrum, x.dtype)


@op("DFT", 17)
def dft_17(
    x: np.ndarray,
    dft_length: np.ndarray | None = None,
    *,
    axis: int = 1,
    inverse: int = 0,
    onesided: int = 0,
) -> np.ndarray:
    """DFT along the ``axis`` attribute (default 1, the first axis after the batch)."""
    return _dft(x, _scalar_int(dft_length, "dft_length"), axis, inverse, onesided)


@op("DFT", 20)
def dft(
    x: np.ndarray,
    dft_length: np.ndarray | None = None,
    axis: np.ndarray | None = None,
    *,
    inverse: int = 0,
    onesided: int = 0,
) -> np.ndarray:
    """DFT along the ``axis`` input (default -2, the last signal axis)."""
    chosen = _scalar_int(axis, "axis")
    n = _scalar_int(dft_length, "dft_length")
    return _dft(x, n, -2 if chosen is None else chosen, inverse, onesided)


@op("STFT", 17)
def stft(
    signal: np.ndarray,
    frame_step: np.ndarray,
    window: np.ndarray | None = None,
    frame_length: np.ndarray | None = None,
    *,
    onesided: int = 1,
) -> np.ndarray:
    """Short-time Fourier transform: [batch, frames, bins, 2]."""
    z, is_complex = _as_complex(signal, "STFT signal")
    step = _scalar_int(frame_step, "frame_step")
    length = _scalar_int(frame_length, "frame_length")
    if window is not None:
        if length is not None and window.shape != (length,):
            raise ValueError(f"window must have shape ({length},), found {window.shape}")
        length = window.shape[0]
    length = z.shape[1] if length is None else length
    if step is None or step < 1 or not 1 <= length <= z.shape[1]:
        raise ValueError(
            f"need frame_step >= 1 and 1 <= frame_length <= signal length {z.shape[1]}, found "
            f"frame_step {step} and frame_length {length}"
        )
    n_frames = (z.shape[1] - length) // step + 1
    starts = np.arange(n_frames)[:, None] * step
    frames = z[:, starts + np.arange(length)[None, :]]  # (batch, frames, length)
    if window is not None:
        frames = frames * window.astype(frames.real.dtype)
    if onesided and not is_complex:
        spectrum = np.fft.rfft(frames, axis=-1)
    else:
        spectrum = np.fft.fft(frames, axis=-1)
        if onesided:
            spectrum = spectrum[..., : length // 2 + 1]
    return _from_complex(spectrum, signal.dtype)


def _window(
    size: np.ndarray, periodic: int, output_datatype: int, terms: list[float]
) -> np.ndarray:
    """A cosine-sum window sum_k (-1)^k a_k cos(2 pi k n / N) of length ``size``, where N is
    ``size`` (periodic) or ``size - 1`` (symmetric); a symmetric window of length 1 is [1]."""
    n = _scalar_int(size, "size")
    if n is None or n < 0:
        raise ValueError(f"size must be a non-negative scalar, found {size}")
    if n == 1 and not periodic:
        return np.ones(1, dtype=np_dtype(output_datatype))
    phase = 2 * np.pi * np.arange(n) / (n if periodic else n - 1)
    w = sum((-1) ** k * a * np.cos(k * phase) for k, a in enumerate(terms))
    return np.asarray(w).astype(np_dtype(output_datatype))


@op("HannWindow", 17)
def hann_window(size: np.ndarray, *, output_datatype: int = 1, periodic: int = 1) -> np.ndarray:
    """Hann window 0.5 - 0.5 cos(2 pi n / N)."""
    return _window(size, periodic, output_datatype, [0.5, 0.5])


@op("HammingWindow", 17)
def hamming_window(size: np.ndarray, *, output_datatype: int = 1, periodic: int = 1) -> np.ndarray:
    """Hamming window 25/46 - 21/46 cos(2 pi n / N)."""
    return _window(size, periodic, output_datatype, [25 / 46, 21 / 46])


@op("BlackmanWindow", 17)
def blackman_window(size: np.ndarray, *, output_datatype: int = 1, periodic: int = 1) -> np.ndarray:
    """Blackman window 0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)."""
    return _window(size, periodic, output_datatype, [0.42, 0.5, 0.08])


@op("MelWeightMatrix", 17)
def mel_weight_matrix(
    num_mel_bins: np.ndarray,
    dft_length: np.ndarray,
    sample_rate: np.ndarray,
    lower_edge_hertz: np.ndarray,
    upper_edge_hertz: np.ndarray,
    *,
    output_datatype: int = 1,
) -> np.ndarray:
    """Triangular mel filterbank, [dft_length // 2 + 1, num_mel_bins], peaks of 1."""
    bins, n_fft, rate = (int(v) for v in (num_mel_bins, dft_length, sample_rate))
    low, high = float(lower_edge_hertz), float(upper_edge_hertz)
    if bins < 1 or n_fft < 1 or rate < 1 or not 0 <= low < high:
        raise ValueError(
            f"need positive num_mel_bins, dft_length, sample_rate and 0 <= lower < upper edge, "
            f"found {bins}, {n_fft}, {rate}, {low}, {high}"
        )
    low_mel, high_mel = (2595 * np.log10(1 + f / 700) for f in (low, high))
    mels = low_mel + np.arange(bins + 2) * (high_mel - low_mel) / (bins + 2)
    hertz = 700 * (10 ** (mels / 2595) - 1)
    edges = np.floor((n_fft + 1) * hertz / rate).astype(np.int64)
    k = np.arange(n_fft // 2 + 1)[:, None]
    lower, center, upper = edges[None, :-2], edges[None, 1:-1], edges[None, 2:]
    rising = (k - lower) / np.maximum(center - lower, 1)
    falling = (upper - k) / np.maximum(upper - center, 1)
    w = np.where((k >= lower) & (k <= center), rising, 0.0)
    w = np.where((k > center) & (k < upper), falling, w)
    w = np.where((k == center) & (center == lower), 1.0, w)
    return w.astype(np_dtype(output_datatype))
