"""Shared pytest setup.

Kernels under ``gpu/`` run on Numba's CUDA simulator unless MEGASIM_REAL_GPU=1 (then the same tests
run on the GPU). The variable must be set before numba is first imported, hence here, at the top of
the root conftest.
"""

import os

if os.environ.get("MEGASIM_REAL_GPU") != "1":
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
