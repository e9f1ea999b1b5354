"""The megakernel's specialised build (gpu.kernels.winograd.megakernel.SPECIALISED, session 27; opt-in): with
MEGASIM_MEGAKERNEL_SPECIALISE=auto a launch of conv2d's default implementation runs the build compiled for it
alone and any other implementation the general build; with "off" (the default) every launch runs the general
build. Both builds are checked for correctness here under the simulator."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

numba = pytest.importorskip("numba")
from numba import cuda  # (after conftest has chosen simulator or GPU)

if not (numba.config.ENABLE_CUDASIM or cuda.is_available()):
    pytest.skip("neither the CUDA simulator nor a CUDA GPU is available", allow_module_level=True)

from gpu.kernels.winograd import megakernel as mk
from megasim.algorithms.winograd.lowering import WinogradConfig

pytestmark = pytest.mark.cudasim
REPO = Path(__file__).resolve().parent.parent


def ctl(persistent: int = 0) -> np.ndarray:
    c = np.zeros(mk.CTL_SIZE, np.int32)
    c[mk.CTL_PERSISTENT] = persistent
    return c


@pytest.mark.parametrize("math", ["fp32", "3xtf32"])
def test_default_implementation_runs_the_specialised_build(math, monkeypatch):
    monkeypatch.setattr(mk, "SPECIALISE", "auto")
    spec, general = mk.kernels_for(math, True), mk.kernels_for(math)
    assert spec.megakernel is not general.megakernel
    assert spec.gemm_kernel is general.gemm_kernel                       # one non-fused GEMM kernel
    cfg = WinogradConfig(transform_pairs_per_thread=4, gemm_math=math)
    assert mk.specialised_for(cfg)
    assert mk.megakernel_for(ctl(), math, cfg) is spec.megakernel
    assert mk.megakernel_for(ctl(1), math, cfg) is spec.megakernel_persistent
    for other in (WinogradConfig(m=2, gemm_math=math), WinogradConfig(tiles_per_group=32, gemm_math=math),
                  WinogradConfig(gemm_k_tile=32, gemm_math=math)):
        assert mk.megakernel_for(ctl(), math, other) is general.megakernel, other
    assert mk.megakernel_for(ctl(), math) is general.megakernel           # no config: the general build


def test_specialised_build_is_correct(monkeypatch):
    monkeypatch.setattr(mk, "SPECIALISE", "auto")
    from gpu.winograd import conv2d
    from megasim.algorithms.winograd.winograd_math import direct_conv2d_reference
    rng = np.random.default_rng(27)
    x = rng.standard_normal((1, 3, 6, 7)).astype(np.float32)         # H, W not multiples of the tile
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    ref = direct_conv2d_reference(x, w)
    assert mk.specialised_for(WinogradConfig(transform_pairs_per_thread=4))
    for kw in ({}, {"m": 2}):                                          # specialised, then general
        y = conv2d(x, w, schedule="fused", **kw)
        assert np.linalg.norm(y - ref) / np.linalg.norm(ref) <= 1e-4, kw


def test_general_build_by_default_and_bad_values():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env.pop("MEGASIM_MEGAKERNEL_SPECIALISE", None)
    code = ("from gpu import megakernel as mk; from megasim.algorithms.winograd.lowering import WinogradConfig; import numpy as np; "
            "c = np.zeros(mk.CTL_SIZE, np.int32); "
            "print(mk.megakernel_for(c, 'fp32', WinogradConfig()) is mk.kernels_for('fp32').megakernel)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO,
                         timeout=300, check=False)
    assert run.returncode == 0 and run.stdout.strip() == "True", run.stderr[-1500:]
    env["MEGASIM_MEGAKERNEL_SPECIALISE"] = "m4"
    run = subprocess.run([sys.executable, "-c", "import gpu.kernels.winograd.megakernel"], capture_output=True, text=True, env=env,
                         cwd=REPO, timeout=300, check=False)
    assert run.returncode != 0 and "MEGASIM_MEGAKERNEL_SPECIALISE='m4': want one of ('off', 'auto')" in run.stderr
