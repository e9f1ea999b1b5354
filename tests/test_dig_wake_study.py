"""experiments.studies.dig_wake.wake_from_traces on a trace written from the model's own run: the wake it reads
is the model's (one atomic round trip), and both sides agree on every count."""

import gzip

import numpy as np

from experiments.studies.dig_wake.wake_from_traces import summarize
from megasim.hardware import get_gpu
from megasim.plan import Plan, build
from megasim.sim import simulate
from megasim.workloads import parse_layer

LAYER, PARAMS = "N=2,C=16,K=32,H=16,W=16", "D_IG=1,D_GO=40,M=1"


def test_the_model_read_as_a_trace_gives_the_models_wake(tmp_path):
    spec = get_gpu("H100")
    graph, schedule, _ = build(parse_layer(LAYER), Plan.parse("fused", PARAMS))
    sim = simulate(graph, schedule, spec)
    s0 = np.nanmin(sim.claim_ns)
    rows = np.column_stack([np.arange(graph.num_tasks), graph.kind, sim.claim_ns - s0, sim.ready_ns - s0,
                            sim.end_ns - s0, sim.sm, sim.end_ns - s0])
    path = tmp_path / "t.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write("task,kind,start_ns,ready_ns,end_ns,sm,done_ns\n")
        np.savetxt(f, rows, fmt="%.6f", delimiter=",")
    out = summarize(LAYER, PARAMS, str(path), spec)
    assert out["measured"]["waits"] == out["model"]["waits"]
    for waits in out["model"]["waits"].values():
        if waits["waited"]:
            assert abs(waits["wake_median_ns"] - spec.atomic_latency_ns) < 1.0
    assert out["span_us"]["model"] > 0
