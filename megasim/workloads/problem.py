"""Convolution problems.

A ConvProblem is what to compute: a batch of N images with C input channels of H x W pixels,
convolved with K filters of R x S (stride, zero padding), giving N x K x P x Q outputs. It is
validated on construction, so every problem that exists is computable.
"""

from __future__ import annotations

from dataclasses import dataclass

from megasim.errors import WorkloadError

# The largest value of one dimension (N, C, K, H, W, R, S, stride, padding): the kernels' 32-bit indices.
MAX_DIMENSION = 2 ** 31 - 1


@dataclass(frozen=True)
class ConvProblem:
    n: int
    c: int
    k: int
    h: int
    w: int
    r: int = 3
    s: int = 3
    stride: int = 1
    padding: int = 1
    name: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise WorkloadError(f"layer name={self.name!r} is not allowed: give a string (or leave it out)")
        label = self.name or "layer"
        for attr in ("n", "c", "k", "h", "w", "r", "s", "stride"):
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                key = attr if attr == "stride" else attr.upper()     # the layer spec's own keys
                raise WorkloadError(f"{label}: {key}={value!r} is not allowed: it must be a positive integer")
        if isinstance(self.padding, bool) or not isinstance(self.padding, int) or self.padding < 0:
            raise WorkloadError(f"{label}: padding={self.padding!r} is not allowed: it must be an integer >= 0")
        for attr in ("n", "c", "k", "h", "w", "r", "s", "stride", "padding"):
            # the kernels index with 32-bit integers; stride=10**30 raised OverflowError in the sparse lowering
            if getattr(self, attr) > MAX_DIMENSION:
                key = attr if attr in ("stride", "padding") else attr.upper()
                raise WorkloadError(f"{label}: {key}={getattr(self, attr)} is not allowed: each dimension must be at "
                                    f"most {MAX_DIMENSION:,} (docs/errors.md)")
        if self.r > self.h + 2 * self.padding or self.s > self.w + 2 * self.padding:
            raise WorkloadError(
                f"{label}: filter {self.r}x{self.s} is larger than the padded input "
                f"{self.h + 2 * self.padding}x{self.w + 2 * self.padding}: R <= H+2*padding and S <= W+2*padding are allowed")

    @property
    def out_h(self) -> int:
        return (self.h + 2 * self.padding - self.r) // self.stride + 1

    @property
    def out_w(self) -> int:
        return (self.w + 2 * self.padding - self.s) // self.stride + 1

    @property
    def direct_flops(self) -> int:
        """FLOPs of the direct convolution (2 per multiply-accumulate)."""
        return 2 * self.n * self.k * self.out_h * self.out_w * self.c * self.r * self.s

    @property
    def input_bytes(self) -> int:
        return 4 * self.n * self.c * self.h * self.w

    @property
    def output_bytes(self) -> int:
        return 4 * self.n * self.k * self.out_h * self.out_w

    @property
    def weight_bytes(self) -> int:
        return 4 * self.k * self.c * self.r * self.s

    def with_batch(self, n: int) -> "ConvProblem":
        return ConvProblem(n, self.c, self.k, self.h, self.w, self.r, self.s, self.stride, self.padding, self.name)

    def spec_string(self) -> str:
        """The free-spec form that `parse_layer` reads back into an equal problem (without the name)."""
        return (f"N={self.n},C={self.c},K={self.k},H={self.h},W={self.w},R={self.r},S={self.s},"
                f"stride={self.stride},padding={self.padding}")
