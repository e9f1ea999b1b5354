"""Predictions are bit-identical to the golden ones: 32 (layer, algorithm, schedule, params, spec) points.

tests/data/golden_predictions.json was written before the algorithms became plug-ins; every point must
still give the same taskgraph hash, schedule hash, task count and predicted time, to the last bit.
"""

import json
from pathlib import Path

import pytest

from megasim.hardware import get_gpu, load_spec
from megasim.plan import Plan, build, predict, predicted_time_us
from megasim.workloads import parse_layer

POINTS = json.loads((Path(__file__).parent / "data" / "golden_predictions.json").read_text())["points"]
CALIBRATED = Path(__file__).parent.parent / "megasim" / "hardware" / "calibrated"
# The spec files the points were written with, where the package's file has been recalibrated since.
# The H200 preset's file before it stated block_l2_bw_ratio (until then its L2 hits' per-block rate followed
# its DRAM bandwidth).
WRITTEN_WITH = {"h200.json": Path(__file__).parent / "data" / "golden_h200_spec.json",
                "H200": Path(__file__).parent / "data" / "golden_h200_preset.json"}


def _spec(name: str):
    if name in WRITTEN_WITH:
        return load_spec(WRITTEN_WITH[name])
    if not name.endswith(".json"):
        return get_gpu(name)
    return load_spec(CALIBRATED / name)


def _plan(point: dict) -> Plan:
    if point["algo"] == "winograd":
        return Plan.parse(point["schedule"], point["params"])
    op = point["op"]
    algorithm = op.removeprefix("unfused_")
    schedule = None
    if op.startswith("unfused_"):
        algorithm, schedule = {"ecr": "pecr", "direct": "direct_fused"}[algorithm], "unfused"
    text = f"sparsity={point['sparsity']},pattern={point['pattern']}"
    if point["k_tile"] is not None:
        text += f",k_tile={point['k_tile']}"
    return Plan.parse(schedule, text, algorithm=algorithm)


def test_there_are_at_least_30_points_over_both_families():
    assert len(POINTS) >= 30
    assert {p["algo"] for p in POINTS} == {"winograd", "sparse"}


@pytest.mark.parametrize("point", POINTS, ids=lambda p: f"{p['layer']}-{p.get('schedule', p.get('op'))}-{p['spec']}")
def test_prediction_is_bit_identical(point):
    problem = parse_layer(point["layer"], batch=point["batch"])
    spec = _spec(point["spec"])
    plan = _plan(point)
    graph, schedule, resolved = build(problem, plan, spec)
    result, _ = predict(problem, spec, plan)
    assert graph.hash == point["graph_hash"] == result.taskgraph_hash
    assert result.schedule_hash == point["schedule_hash"]
    assert result.num_tasks == point["tasks"]
    assert result.predicted_us == point["predicted_us"]
    if point["algo"] == "winograd":
        assert resolved.param_string().startswith(point["resolved"].split(",style=")[0].split(",blocks_per_sm")[0])
    else:
        assert predicted_time_us(result, resolved) == point["kernel_us"]
        assert resolved.params.k_tile == point["resolved_k_tile"]
