"""The built-in layer catalogue (shared/WORKLOADS.md) and the free layer-spec syntax.

Names:
- the megakernel paper's Table 2: ``resnet-1`` ... ``resnet-4``, ``yolov3-1`` ... ``yolov3-5``,
  ``vgg-1`` ... ``vgg-3``, ``densenet-1`` (3x3, stride 1, padding 1, batch 64);
- network layers: ``vgg16/conv3_2``, ``vgg19/conv4_4``, ``resnet50/layer3.2``, ``yolov3/conv52_3``,
  ``densenet161/block3`` ... (3x3 convolutions at 224x224 / 416x416 inputs, batch 64 unless given);
- the im2win paper's 12 layers: ``im2win/conv1`` ... ``im2win/conv12`` (no padding, batch 64; the
  paper's names ``Conv1`` ... ``Conv12`` are accepted too: a name that is, in any case, the part after
  the ``/`` of exactly one catalogue name stands for it);
- free specs: ``N=64,C=64,K=64,H=56,W=56`` (R, S, stride, padding default to 3, 3, 1, 1).
"""

from __future__ import annotations

import dataclasses
import re

from megasim.errors import WorkloadError
from megasim.workloads.problem import MAX_DIMENSION, ConvProblem

DEFAULT_BATCH = 64

# (name, K, C, H=W): the megakernel paper's Table 2.
_TABLE2 = [
    ("resnet-1", 64, 64, 56), ("resnet-2", 128, 128, 28), ("resnet-3", 256, 256, 14), ("resnet-4", 512, 512, 7),
    ("yolov3-1", 64, 32, 128), ("yolov3-2", 128, 64, 64), ("yolov3-3", 256, 128, 32), ("yolov3-4", 512, 256, 16),
    ("yolov3-5", 1024, 512, 8), ("vgg-1", 128, 128, 112), ("vgg-2", 256, 256, 56), ("vgg-3", 512, 512, 28),
    ("densenet-1", 48, 192, 56),
]
TABLE2_NAMES = tuple(name for name, *_ in _TABLE2)


def _vgg(depth: int) -> list[tuple[str, int, int, int, int]]:
    """(name, C, K, H, stride) of VGG-16/19's 3x3 convolutions at 224x224."""
    stages = [(64, 224, 2), (128, 112, 2), (256, 56, 3 if depth == 16 else 4),
              (512, 28, 3 if depth == 16 else 4), (512, 14, 3 if depth == 16 else 4)]
    layers, c_in = [], 3
    for stage, (k, h, count) in enumerate(stages, start=1):
        for i in range(1, count + 1):
            layers.append((f"vgg{depth}/conv{stage}_{i}", c_in, k, h, 1))
            c_in = k
    return layers


def _resnet50() -> list[tuple[str, int, int, int, int]]:
    layers = []
    for stage, (ch, h, count) in enumerate([(64, 56, 3), (128, 28, 4), (256, 14, 6), (512, 7, 3)], start=1):
        for i in range(count):
            if i == 0 and stage > 1:  # v1.5: the stride-2 3x3 is in the first block, on the larger map
                layers.append((f"resnet50/layer{stage}.{i}", ch, ch, 2 * h, 2))
            else:
                layers.append((f"resnet50/layer{stage}.{i}", ch, ch, h, 1))
    return layers


def _yolov3() -> list[tuple[str, int, int, int, int]]:
    layers = [("yolov3/conv0", 3, 32, 416, 1)]
    blocks = [(32, 64, 208, 1), (64, 128, 104, 2), (128, 256, 52, 8), (256, 512, 26, 8), (512, 1024, 13, 4)]
    for b, (c, k, h, count) in enumerate(blocks, start=1):
        layers.append((f"yolov3/down{b}", c, k, 2 * h, 2))
        for i in range(1, count + 1):
            layers.append((f"yolov3/res{b}_{i}", c, k, h, 1))
    for b, (c, k, h) in enumerate([(512, 1024, 13), (256, 512, 26), (128, 256, 52)], start=1):
        for i in range(1, 4):
            layers.append((f"yolov3/head{b}_{i}", c, k, h, 1))
    return layers


def _densenet161() -> list[tuple[str, int, int, int, int]]:
    layers = []
    for block, (h, count) in enumerate([(56, 6), (28, 12), (14, 36), (7, 24)], start=1):
        for i in range(1, count + 1):
            layers.append((f"densenet161/block{block}_{i}", 192, 48, h, 1))
    return layers


# (name, C, K, H=W, R, stride): the im2win paper's 12 layers, no padding (its Table 2; every output
# size there checked against (H - R) // stride + 1: 55, 56, 111, 109, 20, 10, 222, 110, 54, 26, 12, 5).
_IM2WIN = [
    ("conv1", 3, 96, 227, 11, 4), ("conv2", 3, 96, 231, 11, 4), ("conv3", 3, 64, 227, 7, 2),
    ("conv4", 64, 64, 224, 7, 2), ("conv5", 96, 256, 24, 5, 1), ("conv6", 256, 512, 12, 3, 1),
    ("conv7", 3, 64, 224, 3, 1), ("conv8", 64, 128, 112, 3, 1), ("conv9", 64, 64, 56, 3, 1),
    ("conv10", 128, 128, 28, 3, 1), ("conv11", 256, 256, 14, 3, 1), ("conv12", 512, 512, 7, 3, 1),
]


def _build_catalogue() -> dict[str, ConvProblem]:
    cat: dict[str, ConvProblem] = {}

    def add(problem: ConvProblem) -> None:
        if problem.name in cat:
            raise RuntimeError(f"layer {problem.name!r} registered twice")
        cat[problem.name] = problem

    for name, k, c, h in _TABLE2:
        add(ConvProblem(DEFAULT_BATCH, c, k, h, h, name=name))
    for name, c, k, h, stride in _vgg(16) + _vgg(19) + _resnet50() + _yolov3() + _densenet161():
        add(ConvProblem(DEFAULT_BATCH, c, k, h, h, stride=stride, padding=1, name=name))
    for name, c, k, h, r, stride in _IM2WIN:
        add(ConvProblem(DEFAULT_BATCH, c, k, h, h, r, r, stride, 0, name=f"im2win/{name}"))
    return cat


CATALOGUE: dict[str, ConvProblem] = _build_catalogue()

_SPEC_KEYS = {"N": "n", "C": "c", "K": "k", "H": "h", "W": "w", "R": "r", "S": "s",
              "STRIDE": "stride", "PADDING": "padding", "PAD": "padding"}
_REQUIRED = ("N", "C", "K", "H", "W")


def layer_names() -> tuple[str, ...]:
    return tuple(CATALOGUE)


def network_layers(network: str) -> tuple[ConvProblem, ...]:
    """All catalogue layers of one network prefix, e.g. 'vgg16' or 'densenet161'."""
    layers = tuple(p for name, p in CATALOGUE.items() if name.startswith(network + "/"))
    if not layers:
        nets = sorted({name.split("/")[0] for name in CATALOGUE if "/" in name})
        raise WorkloadError(f"unknown network {network!r} (allowed: {', '.join(nets)})")
    return layers


def _parse_free_spec(text: str, source: str = "layer") -> ConvProblem:
    values: dict[str, int] = {}
    for item in text.split(","):
        item = item.strip()
        m = re.fullmatch(r"([A-Za-z]+)\s*=\s*(-?[0-9]+)", item)   # ASCII digits: int() read N=٦٤ as 64
        if not m:
            raise WorkloadError(f"malformed {source} spec item {item!r} in {text!r}: write KEY=INT, e.g. N=64,C=64,K=64,H=56,W=56")
        key = m.group(1).upper()
        if key not in _SPEC_KEYS:
            raise WorkloadError(f"unknown key {m.group(1)!r} in {source} spec {text!r} (allowed: N, C, K, H, W, R, S, stride, padding)")
        if _SPEC_KEYS[key] in values:
            raise WorkloadError(f"key {m.group(1)!r} given twice in {source} spec {text!r}")
        values[_SPEC_KEYS[key]] = int(m.group(2))
    missing = [k for k in _REQUIRED if _SPEC_KEYS[k] not in values]
    if missing:
        raise WorkloadError(f"{source} spec {text!r} lacks {', '.join(missing)} (N, C, K, H, W are required)")
    too_big = [k.upper() if len(k) == 1 else k for k, v in values.items() if v > MAX_DIMENSION]
    if too_big:
        raise WorkloadError(f"{source} spec {text!r}: {too_big[0]}={values[_SPEC_KEYS[too_big[0].upper()]]} is not allowed: each "
                            f"dimension must be at most {MAX_DIMENSION:,} (docs/errors.md)")
    return ConvProblem(name=text, **values)


def _short_matches(text: str) -> list[str]:
    """The catalogue names whose part after the '/' is `text`, case ignored (``Conv5`` -> im2win/conv5)."""
    if "/" in text:
        return []
    return [name for name in CATALOGUE if "/" in name and name.split("/", 1)[1].lower() == text.lower()]


def parse_layer(text: str, batch: int | None = None, source: str = "layer") -> ConvProblem:
    """A catalogue name or a free spec, optionally with its batch replaced; `source` names where the
    text came from in errors (a flag, a file and its field)."""
    if not isinstance(text, str):
        raise WorkloadError(f"{source} {text!r} is not allowed: give a layer name (megasim layers) or a spec "
                            f"such as N=64,C=64,K=64,H=56,W=56, as a string")
    if len(text) > 1000:
        raise WorkloadError(f"{source} {text[:40]!r}... ({len(text)} characters) is not allowed: a layer is at "
                            f"most 1000 characters")
    text = text.strip()
    if "=" in text:
        problem = _parse_free_spec(text, source)
    elif text in CATALOGUE:
        problem = CATALOGUE[text]
    elif len(short := _short_matches(text)) == 1:
        problem = CATALOGUE[short[0]]
    elif short:         # conv1_1: vgg16/conv1_1 and vgg19/conv1_1
        raise WorkloadError(f"unknown {source} {text!r}: it names more than one catalogue layer (allowed: "
                            f"{', '.join(short)} -- see `megasim layers`)")
    else:
        close = [n for n in CATALOGUE if n.startswith(text.split("/")[0])][:6] or list(TABLE2_NAMES)
        raise WorkloadError(
            f"unknown {source} {text!r} (allowed: a catalogue name such as {', '.join(close)} -- see "
            f"`megasim layers` -- or a spec such as N=64,C=64,K=64,H=56,W=56)")
    if batch is not None:
        if isinstance(batch, bool) or not isinstance(batch, int) or batch <= 0:
            raise WorkloadError(f"batch={batch!r} is not allowed: it must be a positive integer (the layer's N)")
        # a free spec is named by its text, which states another N: name it as it runs (a sweep's
        # `batch = 4` ran "N=8,..." at N=4 under the label N=8)
        renamed = "=" in text and batch != problem.n
        problem = problem.with_batch(batch)
        if renamed:
            problem = dataclasses.replace(problem, name=problem.spec_string())
    return problem
