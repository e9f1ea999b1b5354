"""The four networks of the paper's Fig. 11 as PyTorch modules: VGG-16, ResNet-50 and DenseNet-161 from
torchvision, and YOLOv3 (Darknet-53 and its three detection heads) defined here, since torchvision has
none. Weights are torchvision's random initialisation (no download): the benchmarks measure time and
agreement between implementations, not accuracy.

YOLOv3 (Redmon and Farhadi, 2018), input 416 x 416: Darknet-53 (a 3x3 convolution, then five stages each
a stride-2 3x3 convolution and 1, 2, 8, 8, 4 residual blocks of a 1x1 and a 3x3 convolution), every
convolution followed by batch norm and LeakyReLU(0.1); three heads at 13 x 13, 26 x 26 and 52 x 52, each
five convolutions alternating 1x1 and 3x3, a 3x3 and a 1x1 convolution to 255 channels (3 anchors x 85),
the coarser head's features upsampled and concatenated with the stage's. Its 3x3 stride-1 convolutions
are the catalogue's ``yolov3/*`` layers (``megasim.workloads.catalogue``).
"""

from __future__ import annotations

import torch
from torch import nn

NETWORKS = ("vgg16", "resnet50", "yolov3", "densenet161")
INPUT_SIZE = {"vgg16": 224, "resnet50": 224, "densenet161": 224, "yolov3": 416}


def _cbl(c_in: int, c_out: int, k: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, k, stride, k // 2, bias=False), nn.BatchNorm2d(c_out),
                         nn.LeakyReLU(0.1, inplace=True))


class _Residual(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.body = nn.Sequential(_cbl(c, c // 2, 1), _cbl(c // 2, c, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


def _stage(c_in: int, c_out: int, blocks: int) -> nn.Sequential:
    return nn.Sequential(_cbl(c_in, c_out, 3, 2), *[_Residual(c_out) for _ in range(blocks)])


class _Head(nn.Module):
    def __init__(self, c_in: int, c: int, outputs: int = 255) -> None:
        super().__init__()
        self.body = nn.Sequential(_cbl(c_in, c, 1), _cbl(c, 2 * c, 3), _cbl(2 * c, c, 1), _cbl(c, 2 * c, 3),
                                  _cbl(2 * c, c, 1))
        self.out = nn.Sequential(_cbl(c, 2 * c, 3), nn.Conv2d(2 * c, outputs, 1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        feat = self.body(x)
        return feat, self.out(feat)


class YOLOv3(nn.Module):
    """Darknet-53 and three heads; forward returns the three detection maps (13, 26, 52 at 416 input)."""

    def __init__(self, outputs: int = 255) -> None:
        super().__init__()
        self.stem = _cbl(3, 32, 3)
        self.stage1, self.stage2 = _stage(32, 64, 1), _stage(64, 128, 2)
        self.stage3, self.stage4, self.stage5 = _stage(128, 256, 8), _stage(256, 512, 8), _stage(512, 1024, 4)
        self.head1 = _Head(1024, 512, outputs)
        self.lat1, self.head2 = _cbl(512, 256, 1), _Head(512 + 256, 256, outputs)
        self.lat2, self.head3 = _cbl(256, 128, 1), _Head(256 + 128, 128, outputs)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.stage2(self.stage1(self.stem(x)))
        c3 = self.stage3(x)
        c4 = self.stage4(c3)
        c5 = self.stage5(c4)
        f1, y1 = self.head1(c5)
        f2, y2 = self.head2(torch.cat([self.up(self.lat1(f1)), c4], 1))
        _, y3 = self.head3(torch.cat([self.up(self.lat2(f2)), c3], 1))
        return y1, y2, y3


def build_network(name: str) -> nn.Module:
    """One of NETWORKS, randomly initialised."""
    if name == "yolov3":
        return YOLOv3()
    import torchvision.models as tvm
    builders = {"vgg16": tvm.vgg16, "resnet50": tvm.resnet50, "densenet161": tvm.densenet161}
    if name not in builders:
        raise ValueError(f"network {name!r} is not allowed (allowed: {', '.join(NETWORKS)})")
    return builders[name](weights=None)
