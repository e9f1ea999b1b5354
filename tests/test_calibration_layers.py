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
