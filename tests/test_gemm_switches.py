"""The kernels' build choices: no environment variable changes what gpu/ compiles; each choice that lost its
measurement is gone, the adopted one is fixed in the code, and the ones kept for experiments are explicit
parameters of the build functions (gpu.kernels.winograd.device, gpu.kernels.winograd.megakernel)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

numba = pytest.importorskip("numba")
from numba import cuda  # (after conftest has chosen simulator or GPU)

if not (numba.config.ENABLE_CUDASIM or cuda.is_available()):
    pytest.skip("neither the CUDA simulator nor a CUDA GPU is available", allow_module_level=True)

from gpu.kernels.winograd import device as dev
from gpu.kernels.winograd import megakernel as mk

REPO = Path(__file__).resolve().parent.parent


def test_no_environment_reads_in_the_library():
    """megasim/ and gpu/ read no environment variable and name no MEGASIM_* one: what changes a build or a
    run is a parameter. Two exceptions read what the CUDA stack itself reads, never to choose behaviour:
    NVIDIA_TF32_OVERRIDE (cuDNN), recorded in the baselines' metadata (gpu/cudnn_legacy.py: tf32_override),
    and CUDA_VISIBLE_DEVICES (the driver), to name for `megasim validate --gpus` the devices its index
    means (megasim/cli/validate.py)."""
    found = []
    for path in sorted([*(REPO / "gpu").rglob("*"), *(REPO / "megasim").rglob("*")]):
        if path.suffix in (".py", ".sh") and path.is_file():
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(r"MEGASIM_|os\.environ|getenv", line) and not re.search(
                        r"NVIDIA_TF32_OVERRIDE|environ\.get\(\"CUDA_VISIBLE_DEVICES\"\)", line):
                    found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)
    assert not (REPO / "gpu" / "runtime" / "switches.py").exists()


def test_gemm_paths_are_the_adopted_builds():
    """t = 64: "a4" staging, 32-bit indices, 2 k-steps per pass; t = 32: "a4", 64-bit, rolled (the FP32 paths;
    docs/findings.md, which cites the H200 runs that chose them)."""
    assert dev.FAST_A == (32, 64, 16, 128, 4, "a", 4)
    assert dev.FAST_B == (64, 64, 16, 128, 2, "a", 4)
    want = {dev.FAST_A[:4]: dict(staging="a", stages=4, unroll=1, index_bits=64),
            dev.FAST_B[:4]: dict(staging="a", stages=4, unroll=2, index_bits=32)}
    for key, expect in want.items():
        layout = dev.fast_gemm_for(*key, gemm_math="fp32").layout
        assert {k: layout[k] for k in expect} == expect, key


def test_transform_strides_opaque_in_the_non_fused_kernels_only():
    """The F(2x2)/F(4x4) transforms take opaque strides in the non-fused transform kernels, not in the
    megakernels (``make_transform_tasks(..., opaque=...)``); the big tiles' code has one (opaque) form."""
    from gpu.kernels.winograd import transforms as t

    def pair_names(task):
        return sorted(c.cell_contents.py_func.__name__ for c in task.py_func.__closure__
                      if hasattr(c.cell_contents, "py_func") and "_pair_m" in c.cell_contents.py_func.__name__)

    assert pair_names(dev.itrans_task) == ["itrans_pair_m2", "itrans_pair_m4", "itrans_pair_m4"]
    assert pair_names(dev.make_transform_tasks(opaque=True)[1]) == [
        "itrans_pair_m2_opaque", "itrans_pair_m4_opaque", "itrans_pair_m4_opaque"]
    assert t._name("itrans", 4, True) == "itrans_pair_m4_opaque" and t._name("itrans", 6, True) == "itrans_pair_m6"
    # the non-fused transform kernels' tasks are the opaque ones
    kernel_tasks = [c.cell_contents for c in mk.itrans_kernel.py_func.__closure__
                    if hasattr(c.cell_contents, "py_func")]
    assert [pair_names(k) for k in kernel_tasks] == [["itrans_pair_m2_opaque", "itrans_pair_m4_opaque",
                                                      "itrans_pair_m4_opaque"]]


def test_register_caps_are_build_parameters():
    """The caps of the builds ``kernels_for`` returns are fixed (128, uncapped, 128); ``build_kernels`` takes
    others for experiments, as keywords."""
    assert (mk.MEGAKERNEL_MAX_REGISTERS, mk.PERSISTENT_MAX_REGISTERS, mk.GEMM_KERNEL_MAX_REGISTERS) == (128, None, 128)
    capped = mk.build_kernels("fp32", max_registers=168, persistent_max_registers=128, gemm_kernel_max_registers=0)
    assert isinstance(capped, mk.MathKernels) and capped.gemm_math == "fp32"
    general = mk.kernels_for("fp32")
    assert capped.megakernel is not general.megakernel and capped.gemm_kernel is not general.gemm_kernel
    if not numba.config.ENABLE_CUDASIM:     # the simulator's jit takes no cap
        assert capped.megakernel.targetoptions.get("max_registers") == 168
        assert general.megakernel.targetoptions.get("max_registers") == 128
        assert general.megakernel_persistent.targetoptions.get("max_registers") is None
