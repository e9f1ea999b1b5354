"""The tasks' L2 discards (gpu/l2_discard.py, MEGASIM_L2_DISCARD=on) drop only what nobody reads again.

Under the simulator a discarded line is poisoned with NaN, so a discard before the last read shows as a
NaN output. MEGASIM_L2_DISCARD is read when gpu/ is imported, so the runs with it on go in a subprocess.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") != "1", reason="simulator only")

SCRIPT = r"""
import json, sys
import numpy as np
from tests import cudasim_block_barrier, cudasim_shared_lock   # (as conftest does for the tests themselves)
cudasim_shared_lock.install()
cudasim_block_barrier.install()
from numba import cuda
from gpu import executor as ex
from gpu.l2_discard import L2_DISCARD
from gpu.prepared import PreparedSchedule
from gpu.winograd import reference
from megasim.lowering.winograd import WinogradConfig
from megasim.mapping import algorithm1, default_params
from megasim.plan import winograd_nonfused
from megasim.workloads.problem import ConvProblem

out = {"discard": L2_DISCARD}
for n, c, k, h, w in json.loads(sys.argv[1]):
    p = ConvProblem(n=n, c=c, k=k, h=h, w=w)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((k, c, 3, 3)).astype(np.float32)
    ref = reference(x, wt)
    for schedule in ("fused", "nonfused"):
        plan = ex.make_plan(p, WinogradConfig(m=4, tiles_per_group=32, transform_pairs_per_thread=1))
        sched = (algorithm1(plan.graph, default_params(plan.graph, 1)) if schedule == "fused"
                 else winograd_nonfused(plan.graph))
        prep = PreparedSchedule(plan, sched, kernels="megakernel" if schedule == "fused" else "per_kind")
        ws = ex.workspace(plan, cuda.to_device(np.ascontiguousarray(x.transpose(0, 2, 3, 1))), cuda.to_device(wt))
        prep.run(ws)
        y = ws.Y.copy_to_host().transpose(0, 3, 1, 2)
        out[f"{c},{k},{schedule}"] = {
            "rel_err": float(np.linalg.norm(y - ref) / np.linalg.norm(ref)),
            "v_nan": float(np.isnan(ws.V.copy_to_host()).mean()), "m_nan": float(np.isnan(ws.M.copy_to_host()).mean())}
print("RESULT " + json.dumps(out))
"""

# (N, C, K, H, W), F(4x4) with 32 tiles per group: an 8 x 8 image gives 4 tiles.
SHAPES = [(1, 32, 32, 8, 8),     # K = 32: one GEMM column (its GEMM is V's only reader); tiles x K = 128
          (1, 8, 96, 8, 8),      # K = 96: two GEMM columns read each V row, so V stays; M discarded
          (1, 9, 10, 7, 6)]      # tiles x C = 36, tiles x K = 40: no whole line, no discard


def _run(discard: str) -> dict:
    env = {**os.environ, "MEGASIM_L2_DISCARD": discard, "NUMBA_ENABLE_CUDASIM": "1"}
    res = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(SHAPES)], env=env, capture_output=True,
                         text=True, timeout=900, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert res.returncode == 0, res.stderr[-3000:]
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_discards_drop_only_dead_lines_and_keep_the_result():
    on = _run("on")
    assert on["discard"] is True
    for key, r in on.items():
        if key != "discard":
            assert r["rel_err"] < 1e-5, (key, r)
    for schedule in ("fused", "nonfused"):
        assert on[f"32,32,{schedule}"]["v_nan"] == 1.0 and on[f"32,32,{schedule}"]["m_nan"] == 1.0
        assert on[f"8,96,{schedule}"]["v_nan"] == 0.0 and on[f"8,96,{schedule}"]["m_nan"] == 1.0
        assert on[f"9,10,{schedule}"]["v_nan"] == 0.0 and on[f"9,10,{schedule}"]["m_nan"] == 0.0


def test_the_switch_is_checked():
    env = {**os.environ, "MEGASIM_L2_DISCARD": "maybe", "NUMBA_ENABLE_CUDASIM": "1"}
    res = subprocess.run([sys.executable, "-c", "import gpu.l2_discard"], env=env, capture_output=True, text=True,
                         timeout=300, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert res.returncode != 0 and "MEGASIM_L2_DISCARD='maybe'" in res.stderr


def test_simulator_discard_poisons_one_aligned_line():
    from gpu.l2_discard import LINE_FLOATS, py_discard_line
    a = np.arange(96, dtype=np.float32).reshape(3, 32)
    py_discard_line(a, 32)
    assert np.isnan(a[1]).all() and not np.isnan(a[[0, 2]]).any()
    with pytest.raises(AssertionError, match="want a whole, aligned line"):
        py_discard_line(a, LINE_FLOATS + 1)
