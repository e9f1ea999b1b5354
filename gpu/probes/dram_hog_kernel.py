"""A DRAM bandwidth hog: a kernel that streams a large buffer on a few SMs while other kernels are timed.

Why (issue 3): the calibrated model says the megakernel's fusion would pay 1.25x on a GPU with about a
quarter of the H200's DRAM bandwidth beside the same SMs (``experiments.studies.fusion.fusion_vs_dram``), but no such
GPU is lent. A hog on S SMs takes DRAM bandwidth away from the kernels on the other 132 - S, so the
fused and the non-fused pipelines can be timed where DRAM is scarce, and the model's extrapolation
tested rather than asserted.

What the hog is:
- S blocks, one per SM. Each block takes its SM's whole register file (``max_registers`` 64 and as
  many warps as 64K registers hold, up to 32), so no other kernel's block fits beside it: the timed
  kernels run on the other SMs. ``census`` checks this on the GPU (blocks of a small kernel launched
  under the hog record their SM; none may land on a hog SM).
- Every thread keeps ``HOG_LOADS`` 128-bit loads in flight over a buffer far larger than the L2
  (1 GiB), round after round. The loads are ``ld.global.cs`` (cache streaming: evict-first in L1
  and L2), so the hog's lines are the first to leave the L2 and the timed kernels keep their reuse.
- ``stream_dram=False`` makes an idle hog: the same blocks sleep instead of loading, so the timed
  kernels lose the same SMs and no DRAM bandwidth (it separates the two effects).
- It runs on a torch stream (non-blocking: it does not synchronise with the legacy default stream,
  where every timed kernel runs) until a stop flag in device memory is set by a one-thread kernel
  enqueued on the default stream behind the timed work, or until ``max_seconds`` of the GPU's global
  timer have passed (a bound, never a hang; ``HogStats.timed_out`` says so).
- ``HogStats``: the SMs it ran on, its rounds, its seconds, the DRAM bandwidth it took, and
  ``covered``: every hog block was running from before the first kernel enqueued inside the ``with``
  to after the last (two one-thread kernels on the default stream read the GPU's global timer at the
  window's ends). Why it is checked: a kernel of whole-SM blocks queued behind a stream of small
  blocks waits until an SM empties, so ``__enter__`` waits (host polling mapped memory) until all of
  the hog's blocks have started before it returns.

Timing beside it: ``gpu.runtime.timing.time_cuda`` waits on the default stream only, so it times the kernels
while the hog runs; anything that synchronises the whole device (``torch.cuda.synchronize``,
``cuda.synchronize``) would wait for the hog until its time bound, so use neither inside the hog.

    with DramHog(sms=32) as hog:
        stats = time_cuda(fn)
    hog.stats.gbps
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numba import config, cuda, float32, int32, types

from gpu.errors import KernelInputError
from gpu.kernels.common.trace import globaltimer, smid

HOG_LOADS = 12                  # 128-bit loads in flight per thread (48 registers of data)
HOG_MAX_REGISTERS = 64          # with HOG_LOADS, a block of 32 warps fills the 64K register file
HOG_BUFFER_BYTES = 1 << 30      # far larger than the L2 (50-60 MB): every round comes from DRAM
REGISTERS_PER_SM = 65536
REGISTER_UNIT = 256             # registers are allocated per warp in units of 256
START_TIMEOUT_S = 10.0
IDLE_ROUND_NS = 100_000         # an idle hog's round: one sleep (it checks the stop flag between them)
CENSUS_THREADS = 32             # the census kernel's block: smaller than any block megasim launches


def _streaming_load4():
    from llvmlite import ir
    from numba.core.extending import intrinsic

    f32 = ir.FloatType()
    struct = ir.LiteralStructType([f32] * 4)

    @intrinsic
    def load4_cs(typingctx, a, i):
        """a.flat[i .. i + 3] by one ld.global.cs.v4.f32 (evict-first in L1 and L2); i a multiple of 4."""
        if not (isinstance(a, types.Array) and a.dtype == types.float32 and isinstance(i, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            data = context.make_array(sig.args[0])(context, builder, value=args[0]).data
            idx = context.cast(builder, args[1], sig.args[1], types.intp)
            ptr = builder.ptrtoint(builder.gep(data, [idx], inbounds=True), ir.IntType(64))
            asm = ir.InlineAsm(ir.FunctionType(struct, [ir.IntType(64)]),
                               "ld.global.cs.v4.f32 {$0, $1, $2, $3}, [$4];", "=f,=f,=f,=f,l", side_effect=True)
            vec = builder.call(asm, [ptr])
            parts = [builder.extract_value(vec, k) for k in range(4)]
            return context.make_tuple(builder, sig.return_type, parts)

        return types.UniTuple(types.float32, 4)(a, i), codegen

    return load4_cs


# (The CUDA simulator's jit takes no max_registers.)
_hog_jit = cuda.jit if config.ENABLE_CUDASIM else cuda.jit(max_registers=HOG_MAX_REGISTERS)

if config.ENABLE_CUDASIM:
    from gpu.kernels.common.vector_access import py_load4 as _load4_cs
else:
    _load4_cs = _streaming_load4()


@_hog_jit
def _hog(a, stop, max_ns, out, info):
    """Stream ``a`` round after round until ``stop[0]`` or ``max_ns``; info[block] = sm, start, end, rounds."""
    s_stop = cuda.shared.array(1, int32)
    tid = cuda.threadIdx.x
    b = cuda.blockIdx.x
    t0 = globaltimer()
    if tid == 0:
        info[b, 0] = smid()
        info[b, 1] = t0
        cuda.threadfence_system()
    stride = cuda.gridsize(1)
    units = a.size // 4
    acc = float32(0.0)
    rounds = 0
    while True:
        if tid == 0:
            s_stop[0] = 0
            if cuda.atomic.add(stop, 0, 0) != 0 or globaltimer() - t0 > max_ns:
                s_stop[0] = 1
        cuda.syncthreads()
        if s_stop[0] != 0:
            break
        cuda.syncthreads()
        j = cuda.grid(1)
        while j + (HOG_LOADS - 1) * stride < units:
            for k in range(HOG_LOADS):
                x0, x1, x2, x3 = _load4_cs(a, 4 * (j + k * stride))
                acc += (x0 + x1) + (x2 + x3)
            j += HOG_LOADS * stride
        while j < units:
            x0, x1, x2, x3 = _load4_cs(a, 4 * j)
            acc += (x0 + x1) + (x2 + x3)
            j += stride
        rounds += 1
    out[cuda.grid(1)] = acc
    if tid == 0:
        info[b, 2] = globaltimer()
        info[b, 3] = rounds
        cuda.threadfence_system()


@_hog_jit
def _hog_idle(a, stop, max_ns, stream_dram, out, info):
    """The idle hog (run with ``stream_dram`` 0): a round is a sleep, the blocks hold their SMs and touch no
    memory. It keeps ``_hog``'s load loop (never run) so that it takes as many registers, 64, and so the
    whole register file. Why a second kernel and not a flag in ``_hog``: with the flag, the streaming
    hog took less DRAM bandwidth and varied between runs (copy beside 64 SMs: 2133 and 4271 GB/s on one
    H200, against 1294 in two runs of ``_hog`` on two others)."""
    s_stop = cuda.shared.array(1, int32)
    tid = cuda.threadIdx.x
    b = cuda.blockIdx.x
    t0 = globaltimer()
    if tid == 0:
        info[b, 0] = smid()
        info[b, 1] = t0
        cuda.threadfence_system()
    stride = cuda.gridsize(1)
    units = a.size // 4
    acc = float32(0.0)
    rounds = 0
    while True:
        if tid == 0:
            s_stop[0] = 0
            if cuda.atomic.add(stop, 0, 0) != 0 or globaltimer() - t0 > max_ns:
                s_stop[0] = 1
        cuda.syncthreads()
        if s_stop[0] != 0:
            break
        cuda.syncthreads()
        if stream_dram == 0:
            cuda.nanosleep(IDLE_ROUND_NS)
            rounds += 1
            continue
        j = cuda.grid(1)
        while j + (HOG_LOADS - 1) * stride < units:
            for k in range(HOG_LOADS):
                x0, x1, x2, x3 = _load4_cs(a, 4 * (j + k * stride))
                acc += (x0 + x1) + (x2 + x3)
            j += HOG_LOADS * stride
        while j < units:
            x0, x1, x2, x3 = _load4_cs(a, 4 * j)
            acc += (x0 + x1) + (x2 + x3)
            j += stride
        rounds += 1
    out[cuda.grid(1)] = acc
    if tid == 0:
        info[b, 2] = globaltimer()
        info[b, 3] = rounds
        cuda.threadfence_system()


@cuda.jit
def _set_flag(flag):
    flag[0] = 1


@cuda.jit
def _mark(marks, slot):
    marks[slot] = globaltimer()


@cuda.jit
def _census(out):
    if cuda.threadIdx.x == 0:
        out[cuda.blockIdx.x] = smid()


def hog_threads(regs_per_thread: int) -> int:
    """Threads of one hog block: as many warps as the register file holds (at most 32), so that the
    register file is full and no other block fits on the SM."""
    if regs_per_thread < 1:
        raise KernelInputError(f"regs_per_thread={regs_per_thread!r} is not allowed: it must be >= 1")
    per_warp = -(-regs_per_thread * 32 // REGISTER_UNIT) * REGISTER_UNIT
    return min(32, REGISTERS_PER_SM // per_warp) * 32


def registers_left(regs_per_thread: int) -> int:
    """Registers a hog SM has left for other blocks (0 when the hog fills the file)."""
    per_warp = -(-regs_per_thread * 32 // REGISTER_UNIT) * REGISTER_UNIT
    return REGISTERS_PER_SM - hog_threads(regs_per_thread) // 32 * per_warp


@dataclass(frozen=True)
class HogStats:
    sms_requested: int
    sms_used: int                 # distinct SMs the blocks ran on (== requested: one block per SM)
    threads_per_block: int
    regs_per_thread: int
    registers_left_per_sm: int
    rounds: int                   # full passes over the buffer (the slowest block's)
    seconds: float                # first block's start to last block's end (GPU global timer)
    gbps: float                   # rounds x buffer bytes / seconds
    timed_out: bool               # stopped by max_seconds, not by the flag
    covered: bool                 # every hog block ran from before the window's first mark to after its last
    sm_ids: tuple[int, ...]

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


class DramHog:
    """Context manager: the hog runs on ``sms`` SMs from ``__enter__`` to ``__exit__`` (see the module)."""

    def __init__(self, sms: int, *, stream_dram: bool = True, buffer_bytes: int = HOG_BUFFER_BYTES,
                 max_seconds: float = 120.0) -> None:
        n_sm = cuda.get_current_device().MULTIPROCESSOR_COUNT
        if isinstance(sms, bool) or not isinstance(sms, int) or not 1 <= sms < n_sm:
            raise KernelInputError(f"sms={sms!r} is not allowed: the hog needs 1 .. {n_sm - 1} SMs of this GPU's {n_sm}")
        if not (isinstance(max_seconds, (int, float)) and 0 < max_seconds <= 600):
            raise KernelInputError(f"max_seconds={max_seconds!r} is not allowed: it must be in (0, 600]")
        if buffer_bytes < (1 << 26) or buffer_bytes % 16:
            raise KernelInputError(f"buffer_bytes={buffer_bytes!r} is not allowed: at least 64 MiB, a multiple of 16")
        import torch
        self.sms, self.max_seconds, self.buffer_bytes = sms, float(max_seconds), int(buffer_bytes)
        self.stream_dram = bool(stream_dram)
        self._torch = torch
        self._buf = torch.empty(self.buffer_bytes // 4, dtype=torch.float32, device="cuda").uniform_()
        torch.cuda.current_stream().synchronize()
        self._a = cuda.as_cuda_array(self._buf)
        self._stop = cuda.to_device(np.zeros(1, np.int32))
        self._info = cuda.mapped_array((sms, 4), np.int64)
        self._host_info = np.ndarray.view(self._info, np.ndarray)   # the same host memory, as a numpy array
        self._marks = cuda.mapped_array(2, np.int64)
        probe_out = cuda.device_array(1, np.float32)
        self._kernel = _hog if self.stream_dram else _hog_idle
        args = (self._a, self._stop, 1, probe_out, self._info) if self.stream_dram else \
            (self._a, self._stop, 1, 0, probe_out, self._info)
        self.regs = int(self._kernel.compile(tuple(self._kernel.typeof_pyval(v) for v in args)).regs_per_thread)
        self.threads = hog_threads(self.regs)
        self._out = cuda.device_array(sms * self.threads, np.float32)
        # Load the helper kernels now: loading a module while the hog runs waits for the hog to end
        # (measured: a first call inside the ``with`` ran only after the hog's time bound).
        _mark[1, 1](self._marks, 0)
        _set_flag[1, 1](cuda.device_array(1, np.int32))
        _census[1, CENSUS_THREADS](cuda.device_array(1, np.int32))
        cuda.synchronize()
        self.stats: HogStats | None = None

    def __enter__(self) -> "DramHog":
        torch = self._torch
        self._stop.copy_to_device(np.zeros(1, np.int32))
        self._host_info[:] = 0
        np.ndarray.view(self._marks, np.ndarray)[:] = 0
        self._stream = torch.cuda.Stream()          # torch's streams are non-blocking
        nstream = cuda.external_stream(self._stream.cuda_stream)
        max_ns = int(self.max_seconds * 1e9)
        if self.stream_dram:
            _hog[self.sms, self.threads, nstream](self._a, self._stop, max_ns, self._out, self._info)
        else:
            _hog_idle[self.sms, self.threads, nstream](self._a, self._stop, max_ns, 0, self._out, self._info)
        t_end = time.monotonic() + START_TIMEOUT_S
        while not np.all(self._host_info[:, 1] != 0):
            if time.monotonic() > t_end:
                self._finish()
                raise KernelInputError(f"the DRAM hog's {self.sms} blocks did not all start within {START_TIMEOUT_S} s "
                                       "(is the GPU busy with work that never ends?)")
            time.sleep(1e-4)
        _mark[1, 1](self._marks, 0)      # on the default stream: the timed work's window opens here
        return self

    def census(self, blocks: int) -> int:
        """How many of ``blocks`` small blocks, launched on the default stream while the hog runs, land on a
        hog SM (0: the hog's SMs are its own). Synchronises the default stream only."""
        out = cuda.device_array(blocks, np.int32)
        _census[blocks, CENSUS_THREADS](out)
        self._torch.cuda.current_stream().synchronize()
        mine = set(int(s) for s in self._host_info[:, 0])
        return int(sum(int(s) in mine for s in out.copy_to_host()))

    def _finish(self) -> None:
        _set_flag[1, 1](self._stop)
        self._stream.synchronize()

    def __exit__(self, *exc) -> None:
        _mark[1, 1](self._marks, 1)      # behind the timed work on the default stream: its window closes
        self._finish()
        self._torch.cuda.current_stream().synchronize()
        info = np.array(self._host_info)
        marks = np.array(np.ndarray.view(self._marks, np.ndarray))
        seconds = (int(info[:, 2].max()) - int(info[:, 1].min())) * 1e-9
        rounds = int(info[:, 3].min())
        self.stats = HogStats(
            sms_requested=self.sms, sms_used=len(set(info[:, 0].tolist())), threads_per_block=self.threads,
            regs_per_thread=self.regs, registers_left_per_sm=registers_left(self.regs), rounds=rounds,
            seconds=seconds,
            gbps=rounds * self.buffer_bytes / seconds / 1e9 if seconds > 0 and self.stream_dram else 0.0,
            timed_out=seconds >= self.max_seconds * 0.999,
            covered=bool(0 < marks[0] and int(info[:, 1].max()) <= marks[0] <= marks[1] <= int(info[:, 2].min())),
            sm_ids=tuple(sorted(set(info[:, 0].tolist()))))

    def release(self) -> None:
        """Free the hog's buffer."""
        self._a = self._buf = None
