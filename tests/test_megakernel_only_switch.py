"""MEGASIM_MEGAKERNEL_ONLY=m4t64 (gpu.megakernel, session 27's experiment): the megakernel compiled for
conv2d's default implementation alone is still correct, and a launch of another configuration is refused
with one line, not run on a kernel that lacks its code. In a subprocess (the switch is read at import),
under the CUDA simulator."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cudasim

SCRIPT = r'''
import numpy as np
from gpu.errors import KernelInputError
from gpu.winograd import conv2d
from megasim.lowering.winograd import WinogradConfig
from megasim.lowering.winograd_math import direct_conv2d_reference
rng = np.random.default_rng(11)
x = rng.standard_normal((1, 3, 6, 7)).astype(np.float32)      # H, W not multiples of the tile
w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
ref = direct_conv2d_reference(x, w)
y = conv2d(x, w, schedule="fused")
print("fused", np.linalg.norm(y - ref) / np.linalg.norm(ref))
y = conv2d(x, w, schedule="nonfused", m=2)                     # the per-kind kernels keep every path
print("nonfused_m2", np.linalg.norm(y - ref) / np.linalg.norm(ref))
for kw in ({"m": 2}, {"config": WinogradConfig(tiles_per_group=32, transform_pairs_per_thread=4)}):
    try:
        conv2d(x, w, schedule="fused", **kw)
        print("ran", kw)
    except KernelInputError as exc:
        print("refused", str(exc).splitlines()[0][:60])
'''


def test_specialised_megakernel_is_correct_and_refuses_other_configs():
    env = dict(os.environ, MEGASIM_MEGAKERNEL_ONLY="m4t64", NUMBA_ENABLE_CUDASIM="1")
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env,
                         cwd=Path(__file__).resolve().parent.parent, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in run.stdout.splitlines())
    assert float(lines["fused"]) <= 1e-4 and float(lines["nonfused_m2"]) <= 1e-4
    assert run.stdout.count("refused MEGASIM_MEGAKERNEL_ONLY=m4t64 compiles the megakernel") == 2, run.stdout


def test_unknown_value_is_refused_at_import():
    env = dict(os.environ, MEGASIM_MEGAKERNEL_ONLY="m2", NUMBA_ENABLE_CUDASIM="1")
    run = subprocess.run([sys.executable, "-c", "import gpu.megakernel"], capture_output=True, text=True, env=env,
                         cwd=Path(__file__).resolve().parent.parent, timeout=300, check=False)
    assert run.returncode != 0 and "MEGASIM_MEGAKERNEL_ONLY='m2': want one of ('all', 'm4t64')" in run.stderr
