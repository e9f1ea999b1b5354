"""Import-time experiment switches of the GPU kernels (``MEGASIM_*`` environment variables).

Each switch keeps the old path of a kernel change that was A/B-timed (docs/winograd_gpu.md names the
measurement), so that the comparison can be re-run: the value is read once, when the kernel's module is
imported, because it decides what Numba compiles. A value outside the allowed ones stops the import with
a one-line error naming it.
"""

from __future__ import annotations

import os


def env_choice(name: str, allowed: tuple[str, ...], default: str) -> str:
    """The value of environment variable ``name`` (``default`` if unset), one of ``allowed``."""
    value = os.environ.get(name, default)
    if value not in allowed:
        raise ValueError(f"{name}={value!r}: want one of {allowed}")
    return value
