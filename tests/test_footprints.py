"""Each algorithm's modelled footprint (``Algorithm.footprint``: what ``megasim simulate`` reports as extra
memory) against the device tensors its GPU workspace allocates beyond input, filter and output (run under
Numba's CUDA simulator: allocation only, nothing launched)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from numba import cuda

from gpu.runtime.execute import PreparedRun
from megasim.plan import Plan, build
from megasim.workloads import parse_layer

CASES = [   # (problem, algorithm, schedule, --param)
    ("N=2,C=5,K=7,H=9,W=11", "winograd", "fused", "tile=2"),
    ("N=2,C=5,K=7,H=9,W=11", "winograd", "nonfused", "tile=4"),
    ("N=1,C=6,K=8,H=10,W=10", "direct", "kernel", ""),
    ("N=1,C=6,K=8,H=10,W=10", "ecr", "kernel", "sparsity=0.5"),
    ("N=1,C=6,K=8,H=12,W=12", "pecr", "fused", "sparsity=0.5,pool=2x2"),
    ("N=1,C=6,K=8,H=12,W=12", "pecr", "unfused", "sparsity=0.5,pool=2x2"),
    ("N=1,C=6,K=8,H=12,W=12", "direct_fused", "unfused", "pool=2x2"),
    ("N=2,C=3,K=5,H=9,W=9,R=3,S=3,stride=2,padding=1", "im2win", None, ""),
]


def _device_arrays(ws) -> list:
    fields = vars(ws) if not dataclasses.is_dataclass(ws) else {f.name: getattr(ws, f.name) for f in dataclasses.fields(ws)}
    return [v for v in fields.values() if hasattr(v, "copy_to_host")]


@pytest.mark.parametrize("spec,algo,schedule,params", CASES)
def test_footprint_is_what_the_workspace_allocates(spec, algo, schedule, params):
    problem = parse_layer(spec)
    graph, sched, plan = build(problem, Plan.parse(schedule, params or None, algorithm=algo))
    run = PreparedRun(problem, plan, graph, sched)
    x_shape = (problem.n, problem.h, problem.w, problem.c) if run.table.input_layout == "NHWC" \
        else (problem.n, problem.c, problem.h, problem.w)
    x = cuda.to_device(np.ones(x_shape, np.float32))
    w = cuda.to_device(np.ones((problem.k, problem.c, problem.r, problem.s), np.float32))
    ws = run.workspace(x, w)
    out = run.output(ws)
    seen, extra = set(), 0
    for a in _device_arrays(ws):
        if a is x or a is w or a is out or id(a) in seen:
            continue
        seen.add(id(a))
        extra += a.nbytes
    footprint = plan.algo.footprint(problem, plan.params, plan.schedule)
    assert footprint is not None
    assert sum(footprint.values()) == extra
