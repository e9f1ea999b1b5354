"""Checks of what the public GPU ops (``gpu.sparse``, ``gpu.im2win``) take: NumPy arrays or CUDA arrays
(Numba's, or any object with ``__cuda_array_interface__``), integers with a lower bound. Each failure is
one line naming the value and what is allowed, raised as the op's own error class (a KernelInputError)."""

from __future__ import annotations

import numpy as np
from numba import cuda

from gpu.errors import KernelInputError


def is_device_array(a) -> bool:
    """A Numba device array or any CUDA array (``__cuda_array_interface__``)."""
    return hasattr(a, "copy_to_host") or bool(getattr(cuda, "is_cuda_array", lambda _: False)(a))


def as_device(a):
    """``a`` as a Numba device array (another library's CUDA array is viewed, not copied)."""
    return a if hasattr(a, "copy_to_host") else cuda.as_cuda_array(a)


def check_int(name: str, value, low: int, error: type[KernelInputError] = KernelInputError) -> int:
    """``value`` as an int, refused unless an integer (not a bool) >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        what = "a positive integer" if low == 1 else f"an integer >= {low}"
        raise error(f"{name}={value!r} is not allowed: it must be {what}")
    return int(value)


def check_tensor(name: str, a, on_device: bool, error: type[KernelInputError] = KernelInputError):
    """``a`` (x or w of a convolution) as a NumPy array or a Numba device array, checked: both operands on
    the same side, 4-D, float32, no empty dimension, C-contiguous on the device."""
    if on_device != is_device_array(a):
        raise error(f"x and w must both be NumPy arrays or both device arrays; {name} is not")
    a = as_device(a) if on_device else np.asarray(a)
    if a.ndim != 4:
        raise error(f"{name} must be 4-D ({'N, C, H, W' if name == 'x' else 'K, C, R, S'}), "
                    f"got shape {tuple(a.shape)}")
    if np.dtype(a.dtype) != np.float32:
        raise error(f"{name} must be float32, got {np.dtype(a.dtype)} (convert it first: no implicit casts)")
    if min(a.shape) < 1:
        raise error(f"{name} has shape {tuple(a.shape)}: every dimension must be >= 1")
    if on_device and not a.is_c_contiguous():
        raise error(f"device array {name} must be C-contiguous")
    return a
