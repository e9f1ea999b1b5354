"""Convolution problems, the layer catalogue and the free layer-spec syntax."""

from __future__ import annotations

import pytest

from megasim.errors import WorkloadError
from megasim.workloads import (CATALOGUE, DEFAULT_BATCH, TABLE2_NAMES, ConvProblem, layer_names,
                               network_layers, parse_layer)

# The megakernel paper's Table 2 as written in shared/WORKLOADS.md: name -> (K, C, H=W).
TABLE2 = {
    "resnet-1": (64, 64, 56), "resnet-2": (128, 128, 28), "resnet-3": (256, 256, 14), "resnet-4": (512, 512, 7),
    "yolov3-1": (64, 32, 128), "yolov3-2": (128, 64, 64), "yolov3-3": (256, 128, 32), "yolov3-4": (512, 256, 16),
    "yolov3-5": (1024, 512, 8), "vgg-1": (128, 128, 112), "vgg-2": (256, 256, 56), "vgg-3": (512, 512, 28),
    "densenet-1": (48, 192, 56),
}


def test_table2_names():
    assert len(TABLE2_NAMES) == 13
    assert set(TABLE2_NAMES) == set(TABLE2)


@pytest.mark.parametrize("name", sorted(TABLE2))
def test_table2_sizes(name):
    p = CATALOGUE[name]
    k, c, h = TABLE2[name]
    assert (p.n, p.c, p.k, p.h, p.w) == (64, c, k, h, h)
    assert (p.r, p.s, p.stride, p.padding) == (3, 3, 1, 1)
    assert (p.out_h, p.out_w) == (h, h)
    assert parse_layer(name) is p


# Layer counts and per-image GFLOP (2 x MACs) from WORKLOADS.md.
@pytest.mark.parametrize("net,count,gflop", [("vgg16", 13, 30.7), ("vgg19", 16, 39.0), ("resnet50", 16, None),
                                             ("densenet161", 78, None), ("im2win", 12, None)])
def test_network_layers(net, count, gflop):
    layers = network_layers(net)
    assert len(layers) == count
    assert all(p.n == DEFAULT_BATCH for p in layers)
    if gflop is not None:
        per_image = sum(p.direct_flops for p in layers) / DEFAULT_BATCH / 1e9
        assert per_image == pytest.approx(gflop, rel=0.005)


def test_network_layer_details():
    assert CATALOGUE["resnet50/layer2.0"].stride == 2 and CATALOGUE["resnet50/layer2.0"].h == 56
    assert CATALOGUE["vgg16/conv1_1"].c == 3
    conv1 = CATALOGUE["im2win/conv1"]
    assert (conv1.c, conv1.k, conv1.h, conv1.r, conv1.stride, conv1.padding) == (3, 96, 227, 11, 4, 0)
    assert conv1.out_h == 55


def test_unknown_network():
    with pytest.raises(WorkloadError, match="'alexnet'.*vgg16"):
        network_layers("alexnet")


def test_catalogue_names_unique_and_listed():
    assert len(layer_names()) == len(set(layer_names())) == len(CATALOGUE)


def test_free_spec_defaults():
    p = parse_layer("N=2,C=32,K=48,H=14,W=15")
    assert (p.n, p.c, p.k, p.h, p.w, p.r, p.s, p.stride, p.padding) == (2, 32, 48, 14, 15, 3, 3, 1, 1)
    assert (p.out_h, p.out_w) == (14, 15)
    assert p.input_bytes == 4 * 2 * 32 * 14 * 15
    assert p.output_bytes == 4 * 2 * 48 * 14 * 15
    assert p.weight_bytes == 4 * 48 * 32 * 9
    assert p.direct_flops == 2 * 2 * 48 * 14 * 15 * 32 * 9


def test_free_spec_keys_case_spaces_and_alias():
    p = parse_layer(" n = 1 , c=3, k=8, h=10, w=12, r=5, s=5, Stride=2, pad=0 ")
    assert (p.n, p.c, p.k, p.h, p.w, p.r, p.s, p.stride, p.padding) == (1, 3, 8, 10, 12, 5, 5, 2, 0)
    assert (p.out_h, p.out_w) == (3, 4)


@pytest.mark.parametrize("text", ["N=1,C=3,K=8,H=10,W=12,R=5,S=5,stride=2,padding=0", "resnet-3", "im2win/conv1"])
def test_spec_string_round_trip(text):
    p = parse_layer(text)
    q = parse_layer(p.spec_string())
    assert (q.n, q.c, q.k, q.h, q.w, q.r, q.s, q.stride, q.padding) == (p.n, p.c, p.k, p.h, p.w, p.r, p.s,
                                                                           p.stride, p.padding)


def test_batch_override():
    p = parse_layer("resnet-1", batch=2)
    assert p.n == 2 and p.c == 64 and p.name == "resnet-1"
    assert CATALOGUE["resnet-1"].n == 64      # the catalogue entry is untouched
    assert parse_layer("N=4,C=1,K=1,H=3,W=3", batch=1).n == 1


@pytest.mark.parametrize("text,needle", [
    ("N=0,C=3,K=8,H=10,W=10", "N=0"),
    ("N=1,C=-3,K=8,H=10,W=10", "C=-3"),
    ("N=1,C=3,K=0,H=10,W=10", "K=0"),
    ("N=1,C=3,K=8,H=10,W=10,stride=0", ": stride=0 is not allowed"),
    ("N=1,C=3,K=8,H=10,W=10,padding=-1", "padding=-1"),
    ("N=1,C=3,K=8,H=2,W=10,R=7,S=3,padding=1", "7x3"),
    ("N=1,C=3,K=8,H=10,W=2,R=3,S=5,padding=0", "3x5"),
    ("N=1,C=3,K=8,H=10,W", "'W'"),
    ("N=1,C=3,K=8,H=10,W=ten", "'W=ten'"),
    ("N=1,C=3,K=8,H=10,W=1.5", "'W=1.5'"),
    ("N=1,C=3,K=8,H=10,W=10,X=3", "'X'"),
    ("N=1,C=3,K=8,H=10,W=10,N=2", "'N' given twice"),
    ("N=1,C=3,K=8,H=10", "lacks W"),
    ("resnet-99", "'resnet-99'"),
    ("N=\u0666\u0664,C=3,K=8,H=10,W=10", "'N=\u0666\u0664'"),     # Arabic-Indic digits, which int() reads as 64
    ("N=1,C=3,K=8,H=\uff11\uff10,W=10", "'H=\uff11\uff10'"),     # fullwidth digits
])
def test_bad_layer_specs(text, needle):
    with pytest.raises(WorkloadError) as err:
        parse_layer(text)
    msg = str(err.value)
    assert needle in msg and "\n" not in msg


@pytest.mark.parametrize("batch", [0, -2, True, 2.0])
def test_bad_batch(batch):
    with pytest.raises(WorkloadError, match=f"batch={batch!r}"):
        parse_layer("resnet-1", batch=batch)


def test_problem_constructor_checks():
    with pytest.raises(WorkloadError, match="H=0"):
        ConvProblem(1, 1, 1, 0, 1)
    with pytest.raises(WorkloadError, match="N=1.0"):
        ConvProblem(1.0, 1, 1, 3, 3)  # type: ignore[arg-type]
    # The filter may equal the padded input exactly.
    p = ConvProblem(1, 1, 1, 1, 1, 3, 3, 1, 1)
    assert (p.out_h, p.out_w) == (1, 1)


@pytest.mark.parametrize("attr", ["n", "c", "k", "h", "w", "r", "s", "stride", "padding"])
def test_problem_dimensions_above_the_32_bit_limit_are_refused(attr):
    """ConvProblem(..., stride=10**30) raised OverflowError in the sparse lowering (a traceback)."""
    kwargs = dict(n=1, c=1, k=1, h=8, w=8, r=3, s=3, stride=1, padding=1)
    kwargs[attr] = 2 ** 31
    key = attr if attr in ("stride", "padding") else attr.upper()
    with pytest.raises(WorkloadError, match=f"{key}=2147483648 is not allowed: each dimension must be at most"):
        ConvProblem(**kwargs)
    kwargs[attr] = 2 ** 31 - 1 if attr in ("stride", "padding") else 1
    ConvProblem(**kwargs)
