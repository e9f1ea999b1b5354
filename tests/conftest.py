"""Shared pytest setup.

Kernels under ``gpu/`` run on Numba's CUDA simulator unless MEGASIM_REAL_GPU=1 (then the same tests
run on the GPU). The variable must be set before numba is first imported, hence here, at the top of
the root conftest. Under the simulator, its shared-array allocation gets a lock
(``tests/cudasim_shared_lock.py``: a simulator race that made a CI run fail now and then).
"""

import os

if os.environ.get("MEGASIM_REAL_GPU") != "1":
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
    from tests import cudasim_shared_lock

    cudasim_shared_lock.install()
