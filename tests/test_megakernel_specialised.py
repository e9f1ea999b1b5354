"""The megakernel's specialised build (gpu.kernels.winograd.megakernel.SPECIALISED; opt-in, an explicit parameter):
with ``specialise=True`` (``megakernel_for``, ``run_schedule``, ``PreparedSchedule``) a launch of conv2d's default
implementation runs the build compiled for it alone and any other implementation the general build; by default
every launch runs the general build. Both builds are checked for correctness here under the simulator."""

from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba")
from numba import cuda  # (after conftest has chosen simulator or GPU)

if not (numba.config.ENABLE_CUDASIM or cuda.is_available()):
    pytest.skip("neither the CUDA simulator nor a CUDA GPU is available", allow_module_level=True)

from gpu.kernels.winograd import megakernel as mk
from megasim.algorithms.winograd.lowering import WinogradConfig

pytestmark = pytest.mark.cudasim


def ctl(persistent: int = 0) -> np.ndarray:
    c = np.zeros(mk.CTL_SIZE, np.int32)
    c[mk.CTL_PERSISTENT] = persistent
    return c


@pytest.mark.parametrize("math", ["fp32", "3xtf32"])
def test_default_implementation_runs_the_specialised_build_when_asked(math):
    spec, general = mk.kernels_for(math, True), mk.kernels_for(math)
    assert spec.megakernel is not general.megakernel
    assert spec.gemm_kernel is general.gemm_kernel                       # one non-fused GEMM kernel
    cfg = WinogradConfig(transform_pairs_per_thread=4, gemm_math=math)
    assert mk.specialised_for(cfg, specialise=True)
    assert mk.megakernel_for(ctl(), math, cfg, specialise=True) is spec.megakernel
    assert mk.megakernel_for(ctl(1), math, cfg, specialise=True) is spec.megakernel_persistent
    for other in (WinogradConfig(m=2, gemm_math=math), WinogradConfig(tiles_per_group=32, gemm_math=math),
                  WinogradConfig(gemm_k_tile=32, gemm_math=math)):
        assert not mk.specialised_for(other, specialise=True), other
        assert mk.megakernel_for(ctl(), math, other, specialise=True) is general.megakernel, other
    assert mk.megakernel_for(ctl(), math, specialise=True) is general.megakernel   # no config: the general build


@pytest.mark.parametrize("math", ["fp32", "3xtf32"])
def test_general_build_by_default(math):
    general = mk.kernels_for(math)
    cfg = WinogradConfig(transform_pairs_per_thread=4, gemm_math=math)
    assert not mk.specialised_for(cfg)
    assert mk.megakernel_for(ctl(), math, cfg) is general.megakernel
    assert mk.megakernel_for(ctl(1), math, cfg) is general.megakernel_persistent


def test_specialised_build_is_correct(monkeypatch):
    from gpu.runtime import executor as ex
    from gpu.runtime.prepared import PreparedSchedule
    from megasim.algorithms.winograd.algorithm1 import algorithm1, recommended_params
    from megasim.algorithms.winograd.winograd_math import direct_conv2d_reference
    from megasim.workloads.problem import ConvProblem
    launched = []
    real = mk.megakernel_for
    monkeypatch.setattr(mk, "megakernel_for", lambda *a, **k: launched.append(real(*a, **k)) or launched[-1])
    rng = np.random.default_rng(27)
    x = rng.standard_normal((1, 3, 6, 7)).astype(np.float32)         # H, W not multiples of the tile
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    ref = direct_conv2d_reference(x, w)
    problem = ConvProblem(1, 3, 5, 6, 7)
    for m, build in ((4, mk.kernels_for("fp32", True)), (2, mk.kernels_for("fp32"))):   # specialised, then general
        plan = ex.make_plan(problem, WinogradConfig(m=m, transform_pairs_per_thread=4))
        schedule = algorithm1(plan.graph, recommended_params(plan.graph))
        for prepared in (False, True):
            ws = ex.workspace(plan, cuda.to_device(np.ascontiguousarray(x.transpose(0, 2, 3, 1))), cuda.to_device(w))
            launched.clear()
            if prepared:
                prep = PreparedSchedule(plan, schedule, specialise=True)
                prep.run(ws)
                prep.check()
            else:
                ex.run_schedule(plan, schedule, ws, specialise=True)
            assert launched and all(k is build.megakernel for k in launched), (m, prepared)
            y = ws.Y.copy_to_host().transpose(0, 3, 1, 2)
            assert np.linalg.norm(y - ref) / np.linalg.norm(ref) <= 1e-4, (m, prepared)
