"""The im2win and im2col tensors, and how the im2win kernels cut their work into thread blocks.

This module is the contract between the Numba kernels (``gpu/kernels/im2win``) and the model's
lowering (``megasim.algorithms.im2win.lowering``): both take their grids and layouts from here, so a
prediction and a measurement describe the same program.

**The im2win tensor** (Lu et al., Euro-Par 2023, Sec. 3.1, Eq. 2). The zero-padded input of one
image and channel, ``Hp x Wp`` with ``Hp = H + 2 pad`` and ``Wp = W + 2 pad``, is rewritten so
that for each output row ``m`` the ``R`` input rows that row reads (``m*stride + u``, ``u < R``)
are interleaved column by column: ``J[i, c, m, col*R + u] = Xpad[i, c, m*stride + u, col]``, shape
``(N, C, P, Wp*R)`` (``P = out_h``). Output ``(m, n)`` then reads one contiguous run of ``S*R``
values starting at ``n*stride*R``, ordered (filter column v, filter row u). The padding is written
into the tensor (zeros), so the convolution kernel never tests for it. The paper's Fig. 1 (C = H = W
= 3, R = S = 2, stride 1): 27 input values become 3 x 2 x 6 = 36 (``im2win_elements``) where im2col
has 4 x 12 = 48 (``im2col_elements``).

**The GEMM view** (Sec. 3.2). ``M = K`` (filters), ``N = N*P*Q`` (outputs of all images, flattened
(image, row, column)), ``K = C*R*S`` in the window's order ``k = c*R*S + v*R + u``: ``A[m, k]`` is
filter ``w[m, c, u, v]`` (read in place, no transformed copy), ``B[k, n] = J[i, c, p, q*stride*R +
v*R + u]``.

**The tiled kernel** (Alg. 3): a block owns an ``m_b x n_b`` output tile; its threads hold
``m_t x n_t`` register tiles (``threads = (m_b/m_t) * (n_b/n_t)``); it walks K in steps of ``k_b``,
each step's filter tile (``m_b x k_b``) and window tile (``k_b x n_b``) staged in shared memory,
double buffered (``prefetch``: the next step's global loads are issued before this step's multiply-adds).
One block per (filter tile, output tile), filter tile fastest (a 1-D grid; ``grid`` gives the two
counts), so the blocks in flight share window tiles.
Per step every thread loads ``ceil(m_b*k_b/threads)`` filter and ``ceil(k_b*n_b/threads)`` window
values, all at the one ``k`` of its lane (``threads`` a multiple of ``k_b``). The variants (the paper's ablation,
Sec. 4.4) are build parameters: ``basic`` is Alg. 2 (a ``BASIC_TILE x BASIC_TILE`` block, one output
per thread, no shared memory); ``no_microkernel`` has 1 x 1 register tiles; ``no_vector`` reads
its shared-memory fragments with 32-bit instead of 128-bit loads; ``no_prefetch`` has one stage
buffer (load, barrier, multiply-add, barrier). The kernel reads its per-k offsets from
``k_offsets`` (no division by R*S and R in its loop) and is built with ``register_cap(threads)``
registers per thread (at least two blocks and 12 warps per SM).

**The default tile** (what a plan gets without ``m_b``; ``gpu.im2win.conv2d`` without tile arguments):
``default_m_b``'s rule for ``m_b`` (64; 32 for ``no_microkernel``), ``n_b = 128``, ``k_b = 16``,
``m_t = n_t = 8`` (the plug-in's defaults).

**The transform kernel**: blocks of ``TRANSFORM_THREADS`` threads, each block writing
``TRANSFORM_ELEMENTS`` consecutive elements of J (flat order), one thread per element per pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from megasim.errors import MappingError
from megasim.workloads.problem import ConvProblem

FLOAT_BYTES = 4
VARIANTS = ("optimized", "basic", "no_microkernel", "no_vector", "no_prefetch")
# The optimized kernel's micro-kernel math: the FP32 pipe, or TF32 tensor cores by the 3xTF32 split (three m16n8k8
# MMAs per product, FP32-accurate; gpu.kernels.im2win.conv). Its threads are warps tiling the block's outputs as
# whole 16 x 8 MMA tiles.
MATHS = ("fp32", "3xtf32")
TRANSFORM_THREADS = 256
TRANSFORM_ELEMENTS = 4096       # elements of J one transform block writes (16 per thread)
BASIC_TILE = 32                 # Alg. 2: 32 x 32 threads, one output each
SHARED_PAD = 4                  # floats after each staged row: 16-byte aligned rows, spread banks
MAX_STATIC_SHARED_BYTES = 48 * 1024   # static shared memory per block (Numba's kernels declare it static)
STAGINGS = ("registers", "async")
DEFAULT_STAGING = "registers"   # the optimized kernel's staging (gpu.runtime.im2win_kernels)
ASYNC_STAGES = 3                # the cp.async ring's stages
REGISTER_FILE = 65536           # 32-bit registers per SM (every GPU megasim models: sm_70 .. sm_90)
BLOCKS_PER_SM_GOAL = 2          # the register cap's goal (register_cap): at least this many blocks ...
WARPS_PER_SM_GOAL = 12          # ... and at least this many warps per SM


def register_cap(threads: int) -> int:
    """The registers per thread the tiled kernel is built with unless told otherwise: as many as leave room
    for ``max(BLOCKS_PER_SM_GOAL, ceil(WARPS_PER_SM_GOAL * 32 / threads))`` blocks of ``threads`` on an SM,
    rounded down to 8, at most 255: 128 at 256 threads (2 blocks), 168 at 128 (3 blocks). One block of 8
    warps per SM cannot hide its own shared-memory and FMA latencies, nor can two of 4 (the 64 x 128 tile
    with its K loop written out takes 189 registers uncapped: 2 blocks per SM, measured 1.17x slower than at
    168 over the 12 bench layers, H200). Below 64 (blocks of more than 256 threads, which hold small register
    tiles) no cap: 255."""
    blocks = max(BLOCKS_PER_SM_GOAL, -(-WARPS_PER_SM_GOAL * 32 // threads))
    cap = REGISTER_FILE // (blocks * threads) // 8 * 8
    return 255 if cap < 64 else min(255, cap)


NO_MICROKERNEL_TILE = {"m_b": 32, "n_b": 32, "k_b": 8, "m_t": 1, "n_t": 1}    # that variant's default tile
DEFAULT_M_B_CHOICES = ((64,), (32,))     # what default_m_b may pick: (micro-kernel variants, no_microkernel)


DEFAULT_SM_COUNT = 132         # the H100's and H200's SMs (callers pass a device's; the rule does not use it)


def default_m_b(problem: ConvProblem, variant: str = "optimized", sm_count: int | None = None) -> int:
    """The filter tile ``m_b`` a plan gets when it names none (``Im2winParams(m_b=None)``, resolved by the
    plug-in; ``gpu.im2win`` passes the device's SM count, which this rule does not need): 32 for
    ``no_microkernel`` (its 1 x 1 register tiles, 32 x 32 threads), else 64. The 64 x 128 tile of 128
    threads at ``register_cap``'s 168 registers (3 blocks per SM) was within 2% of the best of 10 builds on
    11 of the 12 bench layers and 1.8% over all 12 (geomean; conv7, C*R*S = 27: 17% behind k_b = 8), the
    128 x 128 tile of 256 threads (2 blocks per SM) 1.24x behind
    (``experiments/results/nvidia-h200/im2win_calibration/im2win_tiles.csv``,
    ``experiments/results/nvidia-h200/im2win_calibration/im2win_tiles.json``)."""
    if variant == "no_microkernel":
        return 32
    return 64


def k_offsets(problem: ConvProblem, k_b: int):
    """int32 ``(2 * KDP,)``, ``KDP = ceil(C*R*S / k_b) * k_b``: per GEMM row ``k = c*R*S + v*R + u``, the
    filter's offset within a filter row (``c*R*S + u*S + v``) at ``[k]`` and the window's offset from a
    pixel's window start at channel 0 (``c*P*Wp*R + v*R + u``) at ``[KDP + k]``; 0 past C*R*S. The
    kernels read these instead of dividing k by R*S and R every step."""
    import numpy as np
    p = problem
    rs = p.r * p.s
    kd = p.c * rs
    kdp = -(-kd // k_b) * k_b
    k = np.arange(kd, dtype=np.int64)
    c, rem = k // rs, k % rs
    v, u = rem // p.r, rem % p.r
    out = np.zeros(2 * kdp, np.int32)
    out[:kd] = c * rs + u * p.s + v
    out[kdp:kdp + kd] = c * p.out_h * (p.w + 2 * p.padding) * p.r + rem
    return out


def im2win_shape(problem: ConvProblem) -> tuple[int, int, int, int]:
    """(N, C, P, Wp*R): the im2win tensor of the problem (module docstring)."""
    p = problem
    return (p.n, p.c, p.out_h, (p.w + 2 * p.padding) * p.r)


def im2win_elements(problem: ConvProblem) -> int:
    n, c, rows, cols = im2win_shape(problem)
    return n * c * rows * cols


def im2col_elements(problem: ConvProblem) -> int:
    """The im2col matrix: one row of C*R*S values per output pixel of every image."""
    p = problem
    return p.n * p.c * p.r * p.s * p.out_h * p.out_w


def gemm_dims(problem: ConvProblem) -> tuple[int, int, int]:
    """(M, N, K) of the GEMM view: filters, output pixels of all images, C*R*S."""
    p = problem
    return p.k, p.n * p.out_h * p.out_w, p.c * p.r * p.s


@dataclass(frozen=True)
class Im2winTiling:
    """The block shape of one im2win convolution kernel (module docstring). Checked on construction:
    a layout the kernels cannot run is a one-line MappingError naming the value."""

    m_b: int = 128
    n_b: int = 128
    k_b: int = 8
    m_t: int = 8
    n_t: int = 8
    variant: str = "optimized"
    math: str = "fp32"

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise MappingError(f"--param variant={self.variant!r} is not allowed (allowed: {', '.join(VARIANTS)})")
        if self.math not in MATHS:
            raise MappingError(f"--param math={self.math!r} is not allowed (allowed: {', '.join(MATHS)})")
        if self.math != "fp32" and self.variant != "optimized":
            raise MappingError(f"--param math={self.math} with variant={self.variant} is not allowed: the tensor-core "
                               f"micro-kernel is the optimized kernel's (variant=optimized)")
        if self.variant == "basic":
            return
        for name in ("m_b", "n_b", "k_b", "m_t", "n_t"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise MappingError(f"--param {name}={v!r} is not allowed: it must be a positive integer")
        if self.variant == "no_microkernel" and (self.m_t, self.n_t) != (1, 1):
            raise MappingError(f"--param variant=no_microkernel with m_t={self.m_t}, n_t={self.n_t} is not allowed: "
                               f"that variant has one output per thread (give m_t=1,n_t=1 and e.g. m_b=32,n_b=32)")
        if self.m_b % self.m_t or self.n_b % self.n_t:
            raise MappingError(f"--param m_b={self.m_b}, n_b={self.n_b} with m_t={self.m_t}, n_t={self.n_t} is not "
                               f"allowed: m_b must be a multiple of m_t and n_b of n_t")
        t = self.threads
        if not 32 <= t <= 1024 or t % 32:
            raise MappingError(f"--param m_b={self.m_b},n_b={self.n_b},m_t={self.m_t},n_t={self.n_t} gives {t} threads "
                               f"per block: allowed are multiples of 32 from 32 to 1024")
        if t % self.k_b:
            raise MappingError(f"--param k_b={self.k_b} is not allowed with {t} threads: the threads must be a multiple "
                               f"of k_b (each thread stages at one k of a step)")
        if self.math == "3xtf32" and not tensor_core_layout(self.m_b, self.n_b, self.k_b, t):
            raise MappingError(f"--param math=3xtf32 with m_b={self.m_b}, n_b={self.n_b}, k_b={self.k_b} and {t} threads "
                               f"is not allowed: k_b must be a multiple of 8 and the {t // 32} warps must tile "
                               f"{self.m_b} x {self.n_b} outputs as whole 16 x 8 MMA tiles")
        if self.shared_bytes > MAX_STATIC_SHARED_BYTES:
            raise MappingError(f"--param m_b={self.m_b},n_b={self.n_b},k_b={self.k_b} needs {self.shared_bytes:,} bytes "
                               f"of shared memory per block: at most {MAX_STATIC_SHARED_BYTES:,} are allowed")

    @property
    def tile_m(self) -> int:
        return BASIC_TILE if self.variant == "basic" else self.m_b

    @property
    def tile_n(self) -> int:
        return BASIC_TILE if self.variant == "basic" else self.n_b

    @property
    def threads(self) -> int:
        if self.variant == "basic":
            return BASIC_TILE * BASIC_TILE
        return (self.m_b // self.m_t) * (self.n_b // self.n_t)

    @property
    def stages(self) -> int:
        """Shared-memory stage buffers: 1 without prefetching, else 2 (double buffered through registers) or
        ``ASYNC_STAGES`` when ``DEFAULT_STAGING`` is the cp.async ring."""
        if self.variant == "no_prefetch":
            return 1
        return ASYNC_STAGES if DEFAULT_STAGING == "async" else 2

    @property
    def shared_bytes(self) -> int:
        if self.variant == "basic":
            return 0
        return self.stages * self.k_b * (self.m_b + SHARED_PAD + self.n_b + SHARED_PAD) * FLOAT_BYTES

    @property
    def registers(self) -> int:
        """Registers per thread, estimated: accumulators, one fragment of each operand, the staged loads
        with their two int32 bases, ~40 for indices, capped by ``register_cap`` (the kernel's build rule)."""
        if self.variant == "basic":
            return 32
        staged = -(-self.m_b * self.k_b // self.threads) - (-self.k_b * self.n_b // self.threads)
        return min(register_cap(self.threads), self.m_t * self.n_t + self.m_t + self.n_t + 3 * staged + 40)

    def grid(self, problem: ConvProblem) -> tuple[int, int]:
        """(filter tiles, output tiles) of the convolution kernel (its 1-D grid has their product, filter
        tile fastest)."""
        m, n, _ = gemm_dims(problem)
        return -(-m // self.tile_m), -(-n // self.tile_n)

    def k_steps(self, problem: ConvProblem) -> int:
        _, _, k = gemm_dims(problem)
        return k if self.variant == "basic" else -(-k // self.k_b)


def tensor_core_layout(m_b: int, n_b: int, k_b: int, threads: int) -> bool:
    """Whether the 3xTF32 micro-kernel can run a tile: k_b a multiple of 8 and ``threads / 32`` warps forming
    a grid WM x WN with m_b a multiple of 16 WM and n_b of 8 WN (``gpu.kernels.winograd.gemm_tc.warp_grid``)."""
    if k_b % 8 or threads % 32:
        return False
    warps = threads // 32
    return any(warps % wm == 0 and m_b % (16 * wm) == 0 and n_b % (8 * (warps // wm)) == 0
               for wm in range(1, warps + 1))


def transform_blocks(problem: ConvProblem) -> int:
    return -(-im2win_elements(problem) // TRANSFORM_ELEMENTS)
