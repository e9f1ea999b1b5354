"""The default calibration layers: what `megasim calibrate` measures when --layers is not given."""


def test_calibration_layers_are_none_of_the_validated_layers():
    """The default calibration layers parse, span few to many channels, and the few-channel shape is none
    of the paper's 13 layers (which validation predicts as held out, save resnet-1 and vgg-3)."""
    from megasim.calibration.measurements import CALIBRATION_LAYERS
    from megasim.workloads import TABLE2_NAMES, parse_layer
    problems = [parse_layer(name) for name in CALIBRATION_LAYERS]
    assert min(p.c for p in problems) <= 16 and max(p.c for p in problems) >= 512
    table2 = {(p.n, p.c, p.k, p.h, p.w) for p in map(parse_layer, TABLE2_NAMES)}
    extra = [p for name, p in zip(CALIBRATION_LAYERS, problems) if name not in TABLE2_NAMES]
    assert extra and all((p.n, p.c, p.k, p.h, p.w) not in table2 for p in extra)


def test_only_layers_cuts_every_per_layer_row():
    """--layers restricts a refit to those layers' runs: the single-kind rows and the per-layer rows in extra
    (mixed-kind runs, block end order, ticket rows) are cut; probe values and other extra entries are kept."""
    from megasim.calibration.measurements import Measurements
    m = Measurements(device="d", date="2026-01-01", preset="H200",
                     values={"dram_bw_gbps": {"value": 4000.0}},
                     kind_times=[{"layer": "a", "kind": "gemm", "median_ms": 0.1},
                                 {"layer": "b", "kind": "gemm", "median_ms": 0.2},
                                 {"layer": "a", "kind": "itrans", "median_ms": 0.3}],
                     extra={"mixed_kind_rows": [{"layer": "b", "kind": "itrans+gemm"}, {"layer": "a", "kind": "gemm+otrans"}],
                            "block_end_order": [{"layer": "b", "kind": "gemm"}],
                            "l2_chase_sweep": [{"mib": 1, "ns_per_load": 150.0}],
                            "occupancy_round": {"note": "kept"}})
    cut = m.only_layers(["a"])
    assert cut.layers == ("a",) and [r["kind"] for r in cut.kind_times] == ["gemm", "itrans"]
    assert cut.extra["mixed_kind_rows"] == [{"layer": "a", "kind": "gemm+otrans"}]
    assert cut.extra["block_end_order"] == []
    assert cut.extra["l2_chase_sweep"] == m.extra["l2_chase_sweep"] and cut.extra["occupancy_round"] == {"note": "kept"}
    assert cut.values == m.values and m.layers == ("a", "b")       # the original is untouched
    assert m.only_layers(m.layers) == m
