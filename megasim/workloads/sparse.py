"""Sparse feature maps: the inputs of the ECR/PECR experiments.

The sparse-convolution paper feeds VGG-19 the feature maps of one ImageNet picture (its data set is
not reachable here, and no pretrained weights can be downloaded). megasim generates maps instead,
seeded and with the sparsity as a parameter, from two sources:

1. **Synthetic** (``sparse_feature_map``): nonzero values ``|N(0, 1)| + 0.05`` (positive, as after a
   ReLU, and never zero), and zeros placed

   - ``"uniform"``: each element independently, exactly ``round(sparsity * size)`` zeros per map
     (a random permutation picks them);
   - ``"clustered"``: spatial blobs, as ReLU leaves them in real networks: a smooth random field per
     (image, channel) (white noise averaged over ``cluster_px x cluster_px`` boxes, twice) is
     thresholded at its ``sparsity`` quantile, so the zeros come in patches of about ``cluster_px``
     pixels and the sparsity is again exact per map.

2. **ReLU-induced** (``relu_chain_maps``): a random image pushed through VGG-19's conv layers with
   random He-initialised weights, ReLU after each convolution and 2x2 max-pooling where VGG pools.
   The input of each conv layer (after its ReLU and pooling) is recorded. Random weights give about
   half zeros per layer, not the 0.7-0.9 of a trained network's deep layers (the paper's Fig. 2);
   ``bias`` (a constant added before each ReLU) moves that: negative biases give sparser maps.

The default workloads are VGG-19's 16 conv inputs (``vgg19_sparse_layers``) at batch 1 and at a
real batch (``DEFAULT_BATCHES``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from megasim.errors import WorkloadError
from megasim.workloads.catalogue import network_layers
from megasim.workloads.problem import ConvProblem

PATTERNS = ("uniform", "clustered")
DEFAULT_BATCHES = (1, 16)
# VGG-19's conv layers that a 2x2 / 2 max-pool follows.
VGG19_POOLED = ("vgg19/conv1_2", "vgg19/conv2_2", "vgg19/conv3_4", "vgg19/conv4_4", "vgg19/conv5_4")
VGG19_PADDING = 1


@dataclass(frozen=True)
class SparsitySpec:
    """How a synthetic map's zeros are drawn: the fraction of zeros, their pattern and the seed."""

    sparsity: float
    pattern: str = "uniform"
    cluster_px: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.sparsity, bool) or not isinstance(self.sparsity, (int, float)) \
                or not (0.0 <= self.sparsity <= 1.0):
            raise WorkloadError(f"sparsity={self.sparsity!r} is not allowed: it must be a number in [0, 1]")
        if self.pattern not in PATTERNS:
            raise WorkloadError(f"pattern={self.pattern!r} is not allowed (allowed: {', '.join(PATTERNS)})")
        if isinstance(self.cluster_px, bool) or not isinstance(self.cluster_px, int) or self.cluster_px < 1:
            raise WorkloadError(f"cluster_px={self.cluster_px!r} is not allowed: it must be a positive integer")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or not 0 <= self.seed < 2 ** 64:
            raise WorkloadError(f"seed={self.seed!r} is not allowed: it must be an integer from 0 to 2**64 - 1")


def _check_shape(shape) -> tuple[int, int, int, int]:
    if len(shape) != 4 or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1 for d in shape):
        raise WorkloadError(f"shape={tuple(shape)!r} is not allowed: it must be 4 positive integers (N, C, H, W)")
    return tuple(int(d) for d in shape)


def _box_blur(field: np.ndarray, size: int) -> np.ndarray:
    """Mean over size x size boxes (wrapping at the borders) of the last two axes."""
    from scipy import ndimage     # here, not at import: simulating a dense layer needs no SciPy
    return ndimage.uniform_filter(field, size=(1, 1, size, size), mode="wrap")


def zero_mask(shape, spec: SparsitySpec) -> np.ndarray:
    """Boolean mask (True = zero): exactly round(sparsity * C*H*W) zeros per image ("uniform") or
    round(sparsity * H*W) per (image, channel) map ("clustered")."""
    n, c, h, w = _check_shape(shape)
    rng = np.random.default_rng(spec.seed)
    if spec.pattern == "uniform":
        per = c * h * w
        zeros = round(spec.sparsity * per)
        mask = np.zeros((n, per), bool)
        for i in range(n):
            mask[i, rng.choice(per, zeros, replace=False, shuffle=False)] = True
        return mask.reshape(n, c, h, w)
    field = rng.standard_normal((n, c, h, w), dtype=np.float32)
    size = min(spec.cluster_px, h, w)
    field = _box_blur(_box_blur(field, size), size).reshape(n, c, h * w)
    zeros = round(spec.sparsity * h * w)
    if zeros == 0:
        return np.zeros((n, c, h, w), bool)
    # The zeros are the `zeros` lowest values of each map's field. Ties at the cut have probability zero
    # while a cluster is smaller than the map; one as large as the map (cluster_px >= H or W) blurs the
    # field flat, every value tied, and `field <= kth` zeroed the whole map (sparsity 0.5 ran as 1.0).
    # Tied values fill the count exactly: a contiguous run of them (raster order, wrapping, from a seeded
    # start), i.e. one cluster.
    kth = np.partition(field, zeros - 1, axis=2)[:, :, zeros - 1:zeros]
    mask = field <= kth
    for i, j in np.argwhere(mask.sum(axis=2) > zeros):       # maps with ties at the cut only
        below = field[i, j] < kth[i, j, 0]
        tied = np.flatnonzero(field[i, j] == kth[i, j, 0])
        keep = np.roll(tied, -int(rng.integers(len(tied))))[:zeros - int(below.sum())]
        mask[i, j] = below
        mask[i, j, keep] = True
    return mask.reshape(n, c, h, w)


def sparse_feature_map(shape, spec: SparsitySpec | float, dtype=np.float32) -> np.ndarray:
    """A seeded NCHW map with the zeros of `spec` (a SparsitySpec, or a sparsity for uniform zeros,
    seed 0) and positive nonzero values."""
    if not isinstance(spec, SparsitySpec):
        spec = SparsitySpec(spec)
    n, c, h, w = _check_shape(shape)
    values_rng = np.random.default_rng([spec.seed, 1])
    x = (np.abs(values_rng.standard_normal((n, c, h, w))) + 0.05).astype(dtype)
    x[zero_mask((n, c, h, w), spec)] = 0
    return x


def measured_sparsity(x: np.ndarray) -> float:
    """Fraction of exact zeros."""
    return float(np.count_nonzero(x == 0) / x.size) if x.size else 0.0


def vgg19_sparse_layers(batch: int = 1) -> tuple[ConvProblem, ...]:
    """VGG-19's 16 conv layers (3x3, stride 1, padding 1) at `batch`."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise WorkloadError(f"batch={batch!r} is not allowed: it must be a positive integer")
    return tuple(p.with_batch(batch) for p in network_layers("vgg19"))


def _conv_nchw(x: np.ndarray, w: np.ndarray, padding: int) -> np.ndarray:
    """Float32 stride-1 cross-correlation through im2col and one matrix product per image."""
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    p, q = h + 2 * padding - r + 1, wd + 2 * padding - s + 1
    cols = np.lib.stride_tricks.sliding_window_view(xp, (r, s), axis=(2, 3))   # n, c, p, q, r, s
    wm = w.reshape(k, c * r * s)
    out = np.empty((n, k, p, q), x.dtype)
    for i in range(n):
        col = cols[i].transpose(1, 2, 0, 3, 4).reshape(p * q, c * r * s)
        out[i] = (col @ wm.T).T.reshape(k, p, q)
    return out


def _maxpool2(x: np.ndarray) -> np.ndarray:
    n, c, h, w = x.shape
    h2, w2 = h // 2, w // 2
    return x[:, :, :2 * h2, :2 * w2].reshape(n, c, h2, 2, w2, 2).max(axis=(3, 5))


def relu_chain_maps(image_hw: int = 224, batch: int = 1, *, seed: int = 0, bias: float = 0.0,
                    layers: int = 16) -> dict[str, np.ndarray]:
    """The inputs of VGG-19's first `layers` conv layers for a random image (float32, NCHW), with
    random He-normal weights, ``ReLU(conv + bias)`` and VGG's 2x2 max-pools. Keys are the layer names
    ("vgg19/conv1_1", ...); conv1_1's input is the image itself (dense). A smaller `image_hw` (a
    multiple of 16 so that the four pools inside the first 16 layers divide it) makes it cheap."""
    if isinstance(image_hw, bool) or not isinstance(image_hw, int) or image_hw < 16 or image_hw % 16:
        raise WorkloadError(f"image_hw={image_hw!r} is not allowed: it must be a multiple of 16, >= 16")
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers <= 16:
        raise WorkloadError(f"layers={layers!r} is not allowed: it must be an integer in [1, 16]")
    problems = vgg19_sparse_layers(1)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, 3, image_hw, image_hw)).astype(np.float32)
    maps: dict[str, np.ndarray] = {}
    for p in problems[:layers]:
        maps[p.name] = x
        w = (rng.standard_normal((p.k, p.c, p.r, p.s)) * np.sqrt(2.0 / (p.c * p.r * p.s))).astype(np.float32)
        x = np.maximum(_conv_nchw(x, w, VGG19_PADDING) + np.float32(bias), 0.0).astype(np.float32)
        if p.name in VGG19_POOLED:
            x = _maxpool2(x)
    return maps
