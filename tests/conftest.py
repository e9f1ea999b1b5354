"""Shared pytest setup.

Kernels under ``gpu/`` run on Numba's CUDA simulator unless NUMBA_ENABLE_CUDASIM is already set, e.g. to 0
(``gpu/on_device.sh`` sets 0: then the same tests run on the GPU). The variable must be set before numba is first
imported, hence here, at the top of the root conftest. Under the simulator, its shared-array allocation gets a lock
(``tests/cudasim_shared_lock.py``: a simulator race that made a CI run fail now and then), and its
block barrier waits on a condition instead of polling (``tests/cudasim_block_barrier.py``: the poll
held the GIL against the block's threads; the simulator tests run 1.3-2.4x faster without it).
"""

import os
import sys

import pytest

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
    from tests import cudasim_block_barrier, cudasim_shared_lock

    cudasim_shared_lock.install()
    cudasim_block_barrier.install()


@pytest.fixture(scope="module")
def fast_simulator_barriers():
    """Under Numba's CUDA simulator a short GIL switch interval lets a block's threads reach their barriers
    several times sooner (~8x on the Winograd tests). Kernel test modules opt in with
    ``pytest.mark.usefixtures("fast_simulator_barriers")``."""
    old = sys.getswitchinterval()
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        sys.setswitchinterval(2e-4)
    yield
    sys.setswitchinterval(old)
