"""NumPy kernels of the sliding-window ops over any number of spatial axes: convolution,
transposed convolution and pooling on channels-first data (N, C, *spatial).

Every kernel works on the trailing ``k`` axes, with ``padding`` as the ``k`` begin pads
followed by the ``k`` end pads (TVM's order: (top, left, bottom, right) in 2-D). The 2-D
ops and their 3-D counterparts run the same code, so they cannot disagree.

All kernels are vectorized over pixels (a Python loop runs only over kernel taps): the
reference interpreter runs small CNNs with them.
"""

from __future__ import annotations

import itertools
import math
import string
from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

Ints = Sequence[int]


def spatial_rank(padding: Ints) -> int:
    return len(padding) // 2


def pad_spatial(data: np.ndarray, padding: Ints, value: float, extra_end: Ints | None = None) -> np.ndarray:
    """Pad the trailing spatial axes; ``extra_end`` adds cells after the end pads (the
    ceil-mode windows of a pool that run past the padded input)."""
    rank = spatial_rank(padding)
    ends = [e + (extra_end[i] if extra_end else 0) for i, e in enumerate(padding[rank:])]
    if not any(padding[:rank]) and not any(ends):
        return data
    widths = [(0, 0)] * (data.ndim - rank) + list(zip(padding[:rank], ends))
    return np.pad(data, widths, mode="constant", constant_values=value)


def window_out_size(size: int, window: int, stride: int, dilation: int, pad_begin: int, pad_end: int,
                    ceil_mode: bool = False) -> int:
    """Output length of a window sliding over ``size`` cells padded by ``pad_begin`` and
    ``pad_end``. In ceil mode a last, partial window is kept if it starts inside the
    input or its begin padding (ONNX's rule; a window starting in the end padding only is
    dropped). The caller checks that the window fits the padded input at all."""
    span = dilation * (window - 1) + 1
    room = size + pad_begin + pad_end - span
    if not ceil_mode:
        return room // stride + 1
    out = -(-room // stride) + 1
    if (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def overhang(size: int, window: int, stride: int, dilation: int, pad_begin: int, pad_end: int,
             out: int) -> int:
    """How many cells the last of ``out`` windows runs past the padded input (ceil mode)."""
    span = dilation * (window - 1) + 1
    return max(0, (out - 1) * stride + span - (size + pad_begin + pad_end))


def _einsum_letters(rank: int) -> tuple[str, str]:
    """Letters for ``rank`` output-position axes and ``rank`` kernel-tap axes."""
    spare = [c for c in string.ascii_letters if c not in "ngco"]
    return "".join(spare[:rank]), "".join(spare[rank:2 * rank])


def windows(padded: np.ndarray, window: Ints, strides: Ints, dilation: Ints) -> np.ndarray:
    """A read-only view (N, C, *out_positions, *kernel_taps) of a padded array's windows."""
    rank = len(window)
    extent = tuple(d * (k - 1) + 1 for k, d in zip(window, dilation))
    view = sliding_window_view(padded, extent, axis=tuple(range(padded.ndim - rank, padded.ndim)))
    # keep every stride-th window position and every dilation-th tap inside a window
    picks = (slice(None),) * (padded.ndim - rank)
    picks += tuple(slice(None, None, s) for s in strides) + tuple(slice(None, None, d) for d in dilation)
    return view[picks]


def conv_nd(data: np.ndarray, weight: np.ndarray, strides: Ints, padding: Ints, dilation: Ints,
            groups: int) -> np.ndarray:
    """Grouped convolution: data (N, C, *spatial), weight (O, C/groups, *kernel); windows +
    one einsum (BLAS)."""
    rank = len(strides)
    batch, channels = data.shape[:2]
    out_channels, group_channels = weight.shape[:2]
    kernel = weight.shape[2:]
    view = windows(pad_spatial(data, padding, 0), kernel, strides, dilation)
    out_spatial = view.shape[2:2 + rank]
    grouped = view.reshape(batch, groups, channels // groups, *out_spatial, *kernel)
    kernels = weight.reshape(groups, out_channels // groups, group_channels, *kernel)
    positions, taps = _einsum_letters(rank)
    result = np.einsum(f"ngc{positions}{taps},goc{taps}->ngo{positions}", grouped, kernels, optimize=True)
    return result.reshape(batch, out_channels, *out_spatial).astype(data.dtype, copy=False)


def conv_transpose_nd(data: np.ndarray, weight: np.ndarray, strides: Ints, padding: Ints,
                      output_padding: Ints, dilation: Ints, groups: int) -> np.ndarray:
    """Transposed convolution: data (N, C, *spatial), weight (C, O/groups, *kernel).

    A scatter in float64: each kernel tap adds a strided copy of (data x tap weights) to
    the full output, whose begin/end ``padding`` is then cropped off.
    """
    rank = len(strides)
    batch, channels = data.shape[:2]
    in_spatial = data.shape[2:]
    group_out = weight.shape[1]
    kernel = weight.shape[2:]
    full = [s * (i - 1) + op + (k - 1) * d + 1
            for i, k, s, d, op in zip(in_spatial, kernel, strides, dilation, output_padding)]
    out = np.zeros((batch, groups, group_out, *full), dtype=np.float64)
    grouped = data.reshape(batch, groups, channels // groups, *in_spatial).astype(np.float64)
    kernels = weight.reshape(groups, channels // groups, group_out, *kernel).astype(np.float64)
    positions, _ = _einsum_letters(rank)
    for tap in itertools.product(*(range(k) for k in kernel)):
        contribution = np.einsum(f"ngc{positions},gco->ngo{positions}", grouped, kernels[(Ellipsis, *tap)])
        target = tuple(slice(t * d, t * d + s * (i - 1) + 1, s)
                       for t, d, s, i in zip(tap, dilation, strides, in_spatial))
        out[(slice(None),) * 3 + target] += contribution
    out = out.reshape(batch, groups * group_out, *full)
    crop = tuple(slice(b, f - e) for b, e, f in zip(padding[:rank], padding[rank:], full))
    return np.ascontiguousarray(out[(slice(None), slice(None), *crop)]).astype(data.dtype)


def _reduce_windows(padded: np.ndarray, window: Ints, strides: Ints, dilation: Ints, out: Ints,
                    combine: np.ufunc) -> np.ndarray:
    """Combine each window's cells with ``combine`` (np.maximum, np.add), one kernel tap
    at a time: a loop over the taps of whole-image strided slices, much faster than
    reducing a window view."""
    rank = len(window)
    result = None
    for tap in itertools.product(*(range(k) for k in window)):
        picks = tuple(slice(t * d, t * d + s * (o - 1) + 1, s)
                      for t, d, s, o in zip(tap, dilation, strides, out))
        cells = padded[(slice(None),) * (padded.ndim - rank) + picks]
        result = cells.copy() if result is None else combine(result, cells, out=result)
    return result


def pool_nd(data: np.ndarray, kind: str, pool_size: Ints, strides: Ints, dilation: Ints, padding: Ints,
            ceil_mode: bool = False, count_include_pad: bool = False) -> np.ndarray:
    """Max (``kind="max"``) or average pooling over the trailing spatial axes.

    Padded cells never win a max. The average divides by the window's real cells, or with
    ``count_include_pad`` by its cells inside the padded input: cells a ceil-mode window
    runs past the end padding count in neither (as onnxruntime).
    """
    rank = len(pool_size)
    sizes = data.shape[-rank:]
    out = [window_out_size(n, k, s, d, b, e, ceil_mode)
           for n, k, s, d, b, e in zip(sizes, pool_size, strides, dilation, padding[:rank], padding[rank:])]
    extra = [overhang(n, k, s, d, b, e, o) for n, k, s, d, b, e, o
             in zip(sizes, pool_size, strides, dilation, padding[:rank], padding[rank:], out)]
    if kind == "max":
        lowest = -np.inf if data.dtype.kind == "f" else np.iinfo(data.dtype).min
        return _reduce_windows(pad_spatial(data, padding, lowest, extra), pool_size, strides, dilation, out,
                               np.maximum)
    sums = _reduce_windows(pad_spatial(data, padding, 0, extra), pool_size, strides, dilation, out, np.add)
    if count_include_pad and not any(extra):
        counts = np.asarray(math.prod(pool_size), dtype=data.dtype)
    else:
        # count the cells each window covers: a padded map holding 1 where a cell counts
        # (the data, and with count_include_pad the padding too) and 0 elsewhere
        ones = np.ones((1, 1, *sizes), dtype=data.dtype)
        if count_include_pad:
            counted = pad_spatial(pad_spatial(ones, padding, 1), (0,) * (2 * rank), 0, extra)
        else:
            counted = pad_spatial(ones, padding, 0, extra)
        counts = _reduce_windows(counted, pool_size, strides, dilation, out, np.add)
    with np.errstate(invalid="ignore", divide="ignore"):  # a window of padding only is 0/0
        return (sums / counts).astype(data.dtype, copy=False)
