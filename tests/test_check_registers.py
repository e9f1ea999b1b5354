"""gpu.diagnostics.check_registers: every register count a lowering states is checked, and without a GPU it says so."""

import pytest

from gpu.diagnostics import check_registers
from megasim.algorithms.sparse.lowering import KERNEL_REGISTERS
from megasim.algorithms.winograd.lowering import GEMM_FAST_PATHS_BY_MATH, TRANSFORM_REGISTERS_BY_TILE


def test_every_stated_count_has_a_kernel_to_compile():
    winograd = check_registers.winograd_kernels()
    sparse = check_registers.sparse_kernels()
    assert len(winograd) == 3 * len(TRANSFORM_REGISTERS_BY_TILE) + len(GEMM_FAST_PATHS_BY_MATH["fp32"]) + 2
    assert len(sparse) == len(KERNEL_REGISTERS)
    stated = {(name, registers) for name, _threads, registers, _kernel, _sig in winograd + sparse}
    assert ("otrans F(4x4)", TRANSFORM_REGISTERS_BY_TILE[4][2]) in stated
    assert all(threads > 0 and kernel is not None for _n, threads, _r, kernel, _s in winograd + sparse)


def test_blocks_per_sm_follow_the_register_allocation():
    spec = check_registers.get_gpu("H200")
    # 128 threads: 40 registers -> 12 blocks, 48 -> 10, 62 and 64 -> 8 (allocated per warp in units of 256)
    assert [check_registers._blocks(spec, 128, r) for r in (40, 48, 62, 64, 80)] == [12, 10, 8, 8, 6]


def test_without_a_gpu_it_is_a_one_line_refusal(capsys):
    import numba
    if not numba.config.ENABLE_CUDASIM:
        pytest.skip("a real GPU is here: python -m gpu.diagnostics.check_registers checks it")
    assert check_registers.main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs a real CUDA GPU" in err
