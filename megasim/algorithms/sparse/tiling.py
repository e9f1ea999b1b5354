"""How the sparse (ECR, PECR) and dense direct convolution kernels cut their work into thread blocks.

This module is the contract between the Numba kernels in ``gpu/sparse.py`` and the model's lowering
in ``megasim.algorithms.sparse.lowering``: both take their block shape from here, so a prediction and a
measurement always describe the same grid.

Convolution kernels (``ecr`` and its dense twin ``direct``): a block owns ``pixels_per_block``
consecutive output pixels of the flattened (image, row, column) index, one thread each, and a tile of
``k_tile`` filters (each thread keeps ``k_tile`` accumulators). Grid x = pixel tiles (fastest), grid
y = filter tiles. The input channels are visited in chunks of ``c_chunk`` channels; per chunk the
block stages the chunk's weights in shared memory (``[c_chunk*R*S][weight_row_floats(k_tile)]``:
rows of k_tile + 4 floats when k_tile is a multiple of 4, read 4 filters at a time by one 128-bit load
and 16-byte aligned, else k_tile + 1; the padding spreads a warp's rows over the banks), then

- ``ecr``: each thread scans its window (c_chunk x R x S values), writes the nonzeros and their
  weight-row index into shared memory (``[c_chunk*R*S][pixels_per_block]`` float32 and int32), and
  multiplies each stored nonzero with its weight row (``k_tile`` multiply-adds); the zeros are
  never multiplied, the compression costs one scan of every window element;
- ``direct``: each thread multiplies every window element with its weight row (no scan, no skip).

Fused kernels (``pecr`` and its dense twin ``direct_fused``): a thread owns one pooled output, i.e. a
``pool x pool`` group of convolution outputs, read from one input patch of
``((pool-1)*stride + R) x ((pool-1)*stride + S)`` pixels per channel; it keeps ``pool*pool*k_tile``
accumulators and writes ``max(0, max(acc))`` (ReLU then max-pool). ``pecr`` compresses the patch's
nonzeros once per channel chunk (each nonzero then feeds every convolution output whose window holds
it), ``direct_fused`` walks every patch element.

The filter tile is chosen per problem: the largest of ``K_TILES`` whose grid still gives every SM
``min_blocks_per_sm`` blocks, so small maps at batch 1 keep the GPU busy.
"""

from __future__ import annotations

from dataclasses import dataclass

from megasim.errors import LoweringError
from megasim.workloads.problem import ConvProblem

CONV_KINDS = ("ecr", "direct")
FUSED_KINDS = ("pecr", "direct_fused")
KINDS = CONV_KINDS + FUSED_KINDS
PIXELS_PER_BLOCK = 128
CONV_K_TILES = (32, 16, 8, 4)
FUSED_K_TILES = (8, 4, 2)
WINDOW_ELEMENTS_PER_CHUNK = 36      # c_chunk * R * S (conv) or c_chunk * patch (fused) at most
MIN_BLOCKS_PER_SM = 2


def weight_row_floats(k_tile: int) -> int:
    """Floats per staged weight row: k_tile + 4 when the kernels read the row 4 filters at a time
    (k_tile a multiple of 4; rows stay 16-byte aligned), else k_tile + 1 (scalar reads)."""
    return k_tile + 4 if k_tile % 4 == 0 else k_tile + 1


@dataclass(frozen=True)
class PoolSpec:
    """Max-pooling after ReLU: a ``size x size`` window moved by ``stride``, no padding (floor mode)."""

    size: int = 2
    stride: int = 2

    def __post_init__(self) -> None:
        for name in ("size", "stride"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise LoweringError(f"pool {name}={v!r} is not allowed: it must be a positive integer")


@dataclass(frozen=True)
class SparseTiling:
    """The block shape of one sparse or dense direct convolution kernel launch."""

    kind: str
    pixels_per_block: int
    k_tile: int
    c_chunk: int
    window_elements: int       # per channel: R*S (conv kinds) or the patch size (fused kinds)
    pool: PoolSpec | None = None

    @property
    def threads(self) -> int:
        return self.pixels_per_block

    @property
    def chunk_elements(self) -> int:
        """Window elements one thread visits per channel chunk."""
        return self.c_chunk * self.window_elements

    def weight_rows(self, problem: ConvProblem) -> int:
        return self.c_chunk * problem.r * problem.s

    def shared_bytes(self, problem: ConvProblem) -> int:
        """Static shared memory of one block: staged weights, plus the compressed window for the
        sparse kinds (values float32 + weight-row indices int32)."""
        weights = self.weight_rows(problem) * weight_row_floats(self.k_tile) * 4
        if self.kind in ("ecr", "pecr"):
            return weights + self.chunk_elements * self.pixels_per_block * 8
        return weights

    def accumulators(self) -> int:
        pool = self.pool.size * self.pool.size if self.pool is not None else 1
        return pool * self.k_tile


def conv_out_hw(problem: ConvProblem) -> tuple[int, int]:
    return problem.out_h, problem.out_w


def pooled_hw(problem: ConvProblem, pool: PoolSpec) -> tuple[int, int]:
    """Pooled output size (floor mode); an error when the convolution output is smaller than the window."""
    p, q = problem.out_h, problem.out_w
    if p < pool.size or q < pool.size:
        raise LoweringError(f"pool size {pool.size} is not allowed for a {p}x{q} convolution output: "
                            f"it must be <= {min(p, q)} (the max-pool window after ReLU: parameter pool, default 2x2)")
    return (p - pool.size) // pool.stride + 1, (q - pool.size) // pool.stride + 1


def patch_hw(problem: ConvProblem, pool: PoolSpec) -> tuple[int, int]:
    """Input patch one fused thread reads per channel."""
    return (pool.size - 1) * problem.stride + problem.r, (pool.size - 1) * problem.stride + problem.s


def outputs_per_image(problem: ConvProblem, kind: str, pool: PoolSpec | None) -> int:
    if kind in CONV_KINDS:
        return problem.out_h * problem.out_w
    ph, pw = pooled_hw(problem, pool)
    return ph * pw


def grid(problem: ConvProblem, tiling: SparseTiling) -> tuple[int, int]:
    """(pixel tiles, filter tiles) of the launch."""
    pixels = problem.n * outputs_per_image(problem, tiling.kind, tiling.pool)
    return -(-pixels // tiling.pixels_per_block), -(-problem.k // tiling.k_tile)


def choose_tiling(problem: ConvProblem, kind: str, sm_count: int, *, pool: PoolSpec | None = None,
                  k_tile: int | None = None) -> SparseTiling:
    """The tiling of `kind` for `problem` on a GPU of `sm_count` SMs (k_tile forced if given)."""
    if kind not in KINDS:
        raise LoweringError(f"kind {kind!r} is not allowed (allowed: {', '.join(KINDS)})")
    fused = kind in FUSED_KINDS
    if fused and pool is None:
        pool = PoolSpec()
    if not fused and pool is not None:
        raise LoweringError(f"kind {kind!r} takes no pool (pool is for {', '.join(FUSED_KINDS)})")
    if fused:
        ph, pw = patch_hw(problem, pool)
        per_channel = ph * pw
        pooled_hw(problem, pool)
    else:
        per_channel = problem.r * problem.s
    if per_channel > WINDOW_ELEMENTS_PER_CHUNK:
        raise LoweringError(f"a {per_channel}-element window per channel is not allowed: the kernels hold at most "
                            f"{WINDOW_ELEMENTS_PER_CHUNK} (R*S, or the pooled patch, must be <= {WINDOW_ELEMENTS_PER_CHUNK})")
    c_chunk = max(1, min(problem.c, WINDOW_ELEMENTS_PER_CHUNK // per_channel))
    allowed = FUSED_K_TILES if fused else CONV_K_TILES
    if k_tile is not None:
        if k_tile not in allowed:
            raise LoweringError(f"k_tile={k_tile!r} is not allowed for {kind} (allowed: {', '.join(map(str, allowed))})")
        chosen = k_tile
    else:
        chosen = allowed[-1]
        for kt in allowed:            # largest first
            if kt > 2 * problem.k and kt != allowed[-1]:
                continue              # a tile more than twice K wastes most of its accumulators
            t = SparseTiling(kind, PIXELS_PER_BLOCK, kt, c_chunk, per_channel, pool)
            tiles_p, tiles_k = grid(problem, t)
            if tiles_p * tiles_k >= MIN_BLOCKS_PER_SM * sm_count:
                chosen = kt
                break
    return SparseTiling(kind, PIXELS_PER_BLOCK, chosen, c_chunk, per_channel, pool)
