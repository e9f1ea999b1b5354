"""The Winograd megakernel and the four non-fused kernels (the paper's Sec. 4, Listings 1 and 2, and
the dependency-counter scheduler of Sec. 6, made safe as DESIGN.md requires).

Arrays shared by the kernels (filled by ``gpu.runtime.executor``):

- ``table`` int32 (L, TABLE_COLS): one row per map position of the launch: kind, group, index,
  the two counters it waits on, the counter it signals (-1 = none), the TaskGraph task id, and 1 if
  the task waits on no counter signalled in this launch (a root, for ready-queue dispatch).
- ``ctl`` int32 (CTL_SIZE,): per launch: the ticket counter, the map length, the dispatch mode,
  persistent flag and poll bound (written by the host), and the error record (written by the
  kernel; the host reads it after the launch and raises ``MegakernelError``).
- ``counters`` int32: the TaskGraph's dependency counters, set to ``counter_init`` before the
  first launch of a schedule (not between its launches: a GEMM in launch 3 still waits on the
  counter that launch 1's filter transforms counted down).
- ``prm`` int32 (NUM_PARAMS,): problem and config scalars (``gpu.kernels.winograd.device.P_*``).
- three int32 scalars after ``trace``: the launch's map length, dispatch and trace flag
  (``launch_scalars(ctl)``), copies of ``ctl``'s host-written fields that the GPU keeps in its constant
  bank, so that no block reads ``ctl`` before its ticket (docs/findings.md).

The kernels that run GEMM tasks (both megakernels and the non-fused GEMM kernel) are built once per GEMM
math around ``gpu.kernels.winograd.device.gemm_task_for(gemm_math)``: ``kernels_for(gemm_math)``, picked by a
WinogradConfig's ``gemm_math`` (the transform kernels are shared).

Memory-ordering protocol (only thread 0 of a block touches ``counters``):

  parent:  all threads write their results; ``syncthreads``; thread 0: ``threadfence`` (its
           release: the block's writes, ordered before it by the barrier, become visible device-wide
           before the decrement), then a ``red.relaxed.gpu`` add of -1 to ``counters[sig]``, whose old
           value thread 0 does not wait for (the ready queue needs the old value: ``atomic.sub``).
  child:   thread 0 first reads each counter with ``ld.acquire.gpu`` (``gpu.kernels.common.memory_fence.load_acquire``:
           an acquire by itself; reading 0 there, the child needs no fence); while one is not 0 it polls
           ``atomic.add(counters[c], 0)`` until it reads 0 (an atomic, so the compiler cannot hoist the
           load out of the loop and the value comes from L2), then ``threadfence`` (its acquire,
           pairing with the parent's fence); then ``syncthreads`` releases the block.
           A task that waits on nothing (input and filter transforms) needs no acquire and skips it.

The fence is ``gpu.kernels.common.memory_fence.dependency_fence()``: ``threadfence`` (fence.sc.gpu; the lighter
fence.acq_rel.gpu, which is all the protocol needs, measured no faster: that module's docstring).

This is the barrier-plus-single-fence pattern of CUDA's cooperative-groups grid sync
(``__syncthreads(); if (master) { __threadfence(); atomicAdd(...); spin; __threadfence(); }
__syncthreads();``), split into its release half (parent) and acquire half (child).

Ready-queue dispatch (``ctl[CTL_DISPATCH]`` = DISPATCH_READY, ``megasim.ready``): thread 0 takes
a queue slot with one ``atomic.add`` on the queue's head and polls the slot (an atomic read) until a
map position is written there; the position's counters are then read exactly as above (they read 0:
the task was queued only after its last parent's decrement), so the acquire half is the same. After a
task, thread 0's decrement returns the counter's old value; if it was 1, the whole block counts down the
pending counts of that counter's wait groups, and the thread that completes a group reserves slots at
the queue's tail and writes the group's positions, then fences. After a root, the block's last thread
queues the next root the same way.

Every wait is bounded by ``ctl[CTL_POLL_LIMIT]`` polls; on timeout thread 0 records the error (the
first one wins, by ``atomic.cas`` on the error code) and the block leaves without running or
signalling. Waiting blocks also give up once they see another block's error, so a failed launch ends
quickly instead of hanging.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from numba import config as numba_config
from numba import cuda, int32

from gpu.kernels.cache import persist
from gpu.kernels.common.memory_fence import dependency_fence, load_acquire, red_add
from gpu.kernels.common.trace import globaltimer, smid
from gpu.kernels.winograd.device import (BIG_TILES, FAST_B, FTRANS, GEMM, ITRANS, OTRANS, ftrans_task, gemm_task_for, itrans_task, make_transform_tasks, otrans_task)
from megasim.algorithms.winograd.lowering import GEMM_MATHS

# Task table columns.
T_KIND, T_GROUP, T_INDEX, T_WAIT0, T_WAIT1, T_SIGNAL, T_TASK, T_ROOT = 0, 1, 2, 3, 4, 5, 6, 7
TABLE_COLS = 8

# Control array layout.
CTL_TICKET, CTL_NTASKS, CTL_DISPATCH, CTL_PERSISTENT, CTL_POLL_LIMIT = 0, 1, 2, 3, 4
CTL_ERR_CODE, CTL_ERR_POS, CTL_ERR_TASK, CTL_ERR_COUNTER, CTL_ERR_VALUE = 5, 6, 7, 8, 9
CTL_TRACE = 10                # 1: record (claim, ready, end, SM, body done) of every map position into `trace`
# Ready-queue dispatch (megasim.ready): where the launch's ReadyLists and queue sit in ``counters``
# (absolute indices, written by the host), the queue's head and tail, the root ticket, the roots' count.
CTL_R_ROOTS, CTL_R_CPTR, CTL_R_CGROUPS, CTL_R_GPTR, CTL_R_GPOS, CTL_R_PEND, CTL_R_QUEUE = 11, 12, 13, 14, 15, 16, 17
# The queue's head, tail and root ticket are three entries of ``counters``, each on its own 128-byte line
# (CTL_R_HEAD, + LINE_INTS, + 2 LINE_INTS): every claim, release and root hits one of them.
CTL_R_HEAD, CTL_NROOTS = 18, 19
LINE_INTS = 32

CTL_SIZE = 24
# trace[pos] = claim_ns, ready_ns, end_ns, sm, done_ns (globaltimer / %smid): done is the end of the task's
# body (after the block's closing barrier), before thread 0's release fence and signal, so end - done
# is what the signal costs.
TRACE_COLS = 5

DISPATCH_TICKET, DISPATCH_BLOCKIDX, DISPATCH_READY = 0, 1, 2
# Static shared memory of a block: the claimed position, ok, and the row's kind, group, index and signal
# counter, and whether the launch uses the ready queue. Thread 0 reads the whole row beside its counters,
# before the acquire fence, and broadcasts it, folding "the map is used up" into ok, so that no thread reads
# ``table`` or ``ctl`` from global memory between the acquire and the signal (the acquire drops L1's lines,
# so each such read was an L2 round trip). H200, best mappings (nvidia-h200/probe_dispatch/ (in git at 871d7d7)):
# broadcasting the kind, group and index instead of every thread re-reading them made the fused runs 0.6% /
# 1.8% faster (FP32 / 3xTF32 GEMM); broadcasting the signal counter and the dispatch too, another 1.1% /
# 1.1-1.4% (probe_dispatch/tail/).
SH_INTS = 7
# The launch's map length, dispatch and trace flag come from the megakernel's three scalar arguments
# (``launch_scalars``), which the GPU keeps in its constant bank: read from ``ctl`` at a block's start they
# were an L2 round trip before the ticket (another block's acquire has dropped the line from L1); H200, 13
# best mappings, ticket dispatch: 1.6% (FP32) / 2.2% (3xTF32) faster (probe_dispatch/scalars/). ``ctl`` keeps
# its copies (the ready queue's claim and the trace read its map length).
ERR_NONE, ERR_WAIT_TIMEOUT, ERR_READY_TIMEOUT = 0, 1, 2
ERR_CHECK_EVERY = 64          # polls between looks at the error code while waiting


@cuda.jit(device=True)
def _wait_zero(counters, c, ctl, pos, task):
    """Thread 0: poll counter c until it is 0. Returns 1 when it is, 0 on timeout (recorded in ctl)
    or when another block has recorded an error."""
    limit = ctl[CTL_POLL_LIMIT]
    polls = 0
    while True:
        v = cuda.atomic.add(counters, c, 0)
        if v <= 0:
            return 1
        polls += 1
        if polls >= limit:
            if cuda.atomic.cas(ctl, CTL_ERR_CODE, ERR_NONE, ERR_WAIT_TIMEOUT) == ERR_NONE:
                ctl[CTL_ERR_POS] = pos
                ctl[CTL_ERR_TASK] = task
                ctl[CTL_ERR_COUNTER] = c
                ctl[CTL_ERR_VALUE] = v
            return 0
        if polls % ERR_CHECK_EVERY == 0 and cuda.atomic.add(ctl, CTL_ERR_CODE, 0) != ERR_NONE:
            return 0


@cuda.jit(device=True)
def _claim_ready(ctl, counters):
    """Thread 0, ready-queue dispatch: the map position in the next slot of the queue of runnable tasks
    (``counters[ctl[CTL_R_QUEUE] + i]``, -1 until written), polled until it is written; ctl[CTL_NTASKS]
    when every slot is taken (a persistent block leaves), or -1 after ``ctl[CTL_POLL_LIMIT]`` polls or
    another block's error. One atomic takes the slot, as a ticket does: every task passes through the
    queue once, so slot i is written when the i-th task becomes runnable."""
    limit = ctl[CTL_POLL_LIMIT]
    head = ctl[CTL_R_HEAD]
    h = cuda.atomic.add(counters, head, 1)
    if h >= ctl[CTL_NTASKS]:
        return ctl[CTL_NTASKS]
    slot = ctl[CTL_R_QUEUE] + h
    polls = 0
    while True:
        pos = cuda.atomic.add(counters, slot, 0)
        if pos >= 0:
            return pos
        polls += 1
        if polls >= limit:
            if cuda.atomic.cas(ctl, CTL_ERR_CODE, ERR_NONE, ERR_READY_TIMEOUT) == ERR_NONE:
                ctl[CTL_ERR_POS] = -1
                ctl[CTL_ERR_TASK] = -1
                ctl[CTL_ERR_COUNTER] = h
                ctl[CTL_ERR_VALUE] = cuda.atomic.add(counters, head + LINE_INTS, 0)
            return -1
        if polls % ERR_CHECK_EVERY == 0 and cuda.atomic.add(ctl, CTL_ERR_CODE, 0) != ERR_NONE:
            return -1


@cuda.jit(device=True)
def _queue_next_root(ctl, counters):
    """Thread 0, ready-queue dispatch, after a root task: queue the next root in map order, if any."""
    head = ctl[CTL_R_HEAD]
    r = cuda.atomic.add(counters, head + 2 * LINE_INTS, 1)
    if r < ctl[CTL_NROOTS]:
        t = cuda.atomic.add(counters, head + LINE_INTS, 1)
        counters[ctl[CTL_R_QUEUE] + t] = counters[ctl[CTL_R_ROOTS] + r]
        cuda.threadfence()


@cuda.jit(device=True)
def _release(ctl, counters, c):
    """Ready-queue dispatch, all threads of the block whose signal took counter c to zero: count down
    the pending counters of c's wait groups; the thread that completes a group reserves its slots at
    the queue's tail and writes the group's map positions there (megasim.ready)."""
    cptr = ctl[CTL_R_CPTR]
    cgroups = ctl[CTL_R_CGROUPS]
    gptr = ctl[CTL_R_GPTR]
    gpos = ctl[CTL_R_GPOS]
    pend = ctl[CTL_R_PEND]
    queue = ctl[CTL_R_QUEUE]
    j = counters[cptr + c] + cuda.threadIdx.x
    end = counters[cptr + c + 1]
    while j < end:
        g = counters[cgroups + j]
        if cuda.atomic.sub(counters, pend + g, 1) == 1:
            first = counters[gptr + g]
            n = counters[gptr + g + 1] - first
            base = cuda.atomic.add(counters, ctl[CTL_R_HEAD] + LINE_INTS, n)
            for i in range(n):
                counters[queue + base + i] = counters[gpos + first + i]
            cuda.threadfence()
        j += cuda.blockDim.x


@cuda.jit(device=True)
def _claim_and_wait(table, ctl, counters, first, ntasks_arg, dispatch_arg):
    """Thread 0: (the next map position of this block, 1 if its parents are done or 0 if the block must
    give up or the map is used up, the position's kind, group, index and signal counter, read with its
    counters before the acquire, and the launch's dispatch)."""
    dispatch = dispatch_arg
    if dispatch == DISPATCH_READY:
        pos = _claim_ready(ctl, counters)
        if pos < 0:
            return ctl[CTL_NTASKS], 0, -1, -1, -1, -1, dispatch
    elif dispatch == DISPATCH_BLOCKIDX:
        pos = cuda.blockIdx.x if first else ntasks_arg
    else:
        pos = cuda.atomic.add(ctl, CTL_TICKET, 1)
    ok = 1
    kind = -1
    g = -1
    idx = -1
    sig = -1
    if pos < ntasks_arg:
        kind = table[pos, T_KIND]   # the row's one line: read before the acquire fence drops it from L1
        g = table[pos, T_GROUP]
        idx = table[pos, T_INDEX]
        sig = table[pos, T_SIGNAL]
        task = table[pos, T_TASK]
        c0 = table[pos, T_WAIT0]
        c1 = table[pos, T_WAIT1]
        if c0 >= 0 or c1 >= 0:
            # first look at both counters together (two reads in flight, one L2 round trip when
            # the parents are done), then wait on whichever is not yet zero
            # (each read an acquire by itself: gpu.kernels.common.memory_fence.load_acquire)
            v0 = load_acquire(counters, c0) if c0 >= 0 else 0
            v1 = load_acquire(counters, c1) if c1 >= 0 else 0
            if v0 > 0:
                ok = _wait_zero(counters, c0, ctl, pos, task)
            if ok == 1 and v1 > 0:
                ok = _wait_zero(counters, c1, ctl, pos, task)
            if v0 > 0 or v1 > 0:
                dependency_fence()  # acquire after a wait: pairs with the parents' fence before their decrement
    else:
        ok = 0                      # the map is used up: the block ends without another look at ctl
    return pos, ok, kind, g, idx, sig, dispatch


# Register caps (``cuda.jit(max_registers=...)``; None: the compiler's choice), the defaults of ``build_kernels``,
# which takes others for experiments (``gpu.diagnostics.offline_compile --max-registers`` compiles at any cap).
# The per-task megakernel: 128, the most that lets 4 blocks of 128 threads share an SM (65536 / 512). Uncapped,
# ptxas took 176; at 128 it spills 44 bytes (ptxas -v, sm_90: ``python -m gpu.diagnostics.offline_compile
# megakernel``). The best fused mappings ran 6-14% faster than at 168 (3 blocks per SM) on four layers of the
# H200 (docs/findings.md; experiments/results/nvidia-h200/register_cap/): a
# transform block finds a slot beside three GEMM blocks.
MEGAKERNEL_MAX_REGISTERS = 128
# The persistent megakernel: uncapped (210 registers: 2 blocks per SM). Capped at 128 (4 blocks per SM; ptxas
# spills 336 / 1,228 bytes of stores / loads with the FP32 GEMM and 164 / 496 with 3xTF32) it ran 0.913x /
# 0.895x the per-task ticket time at the best mappings (H200, nvidia-h200/probe_dispatch/
# persistent/, in git at 871d7d7), so persistent launches were not built further.
PERSISTENT_MAX_REGISTERS = None
# The non-fused GEMM kernel compiles every GEMM path (gemm_task's run-time dispatch); uncapped, ptxas
# takes 154 registers for them (3 blocks per SM): capped like the megakernel at 128, 4 blocks of 128
# threads per SM, 4 bytes spilled (``python -m gpu.diagnostics.offline_compile gemm_kernel``).
GEMM_KERNEL_MAX_REGISTERS = 128


def _jit(max_registers):
    """``cuda.jit`` capped at ``max_registers`` (None or 0: uncapped; the CUDA simulator's jit takes no cap)."""
    return cuda.jit(max_registers=max_registers) if max_registers and not numba_config.ENABLE_CUDASIM else cuda.jit


@dataclass(frozen=True)
class MathKernels:
    """The kernels that run GEMM tasks, compiled for one GEMM math (``kernels_for``)."""

    gemm_math: str
    megakernel: object
    megakernel_persistent: object
    gemm_kernel: object


# Two builds of the megakernels per GEMM math. The general one holds every implementation path (F(2x2) and
# F(4x4) transforms, the t = 32, t = 64 and generic GEMMs, chosen at run time from ``prm``) and runs every launch
# unless asked (``megakernel_for(..., specialise=True)``); the specialised one only conv2d's default
# implementation (F(4x4), the t = 64 GEMM path, ``SPECIALISED``): ptxas sm_90 gives it 0 bytes of spills against
# 44 and the persistent build 168 registers against 210. Under ncu the general megakernel stalls for instructions
# 0.48 cycles per issue on resnet-1 (the kernels alone: 0.08-0.24). Measured against the general build, each
# time in one device call (H200, docs/findings.md;
# experiments/results/nvidia-h200/specialised_build/ and h200_gemm/index32/): 2.5% faster on resnet-1 and
# yolov3-1, 1-5% slower on the many-channel layers, 1.5% slower overall; so it is opt-in.
SPECIALISED = (4, FAST_B[:4])        # (m, (t, gemm_k_tile, gemm_k_step, gemm_threads))
# F(5x5), F(6x6) and F(7x7) run on builds of their own (``make_transform_tasks(m)``: its transforms, every GEMM path),
# megakernels and non-fused transform kernels alike, so that their 7 x 7, 8 x 8 and 9 x 9 tiles' registers cost the
# other tile sizes nothing.
OWN_BUILD_TILES = BIG_TILES


def _build_key(m: int) -> int:
    """The key of tile m's builds in ``_KERNELS`` / ``_TRANSFORM_KERNELS``: m for a tile with builds of its own,
    else 0 (the general build)."""
    return m if m in OWN_BUILD_TILES else 0


def specialised_for(config, specialise: bool = False) -> bool:
    """Whether a launch of this WinogradConfig runs the specialised megakernel build: only when asked
    (``specialise``) and only for ``SPECIALISED``'s implementation."""
    return bool(specialise) and (config.m, config.gemm_key) == SPECIALISED


def build_kernels(gemm_math: str, specialised: bool = False, gemm_kernel=None, m_fixed: int = 0, *,
                  max_registers: int | None = MEGAKERNEL_MAX_REGISTERS,
                  persistent_max_registers: int | None = PERSISTENT_MAX_REGISTERS,
                  gemm_kernel_max_registers: int | None = GEMM_KERNEL_MAX_REGISTERS) -> MathKernels:
    """The megakernels and the non-fused GEMM kernel around ``gpu.kernels.winograd.device.gemm_task_for(gemm_math)``
    (Numba compiles each on its first launch); ``specialised``: the megakernels compiled for ``SPECIALISED``
    alone; ``m_fixed``: the megakernels' transforms for that tile size alone (every GEMM path);
    ``gemm_kernel``: the non-fused GEMM kernel to share instead of building one. The register caps of the
    per-task megakernel, the persistent one and the GEMM kernel (None: uncapped) default to the module's
    ``*_MAX_REGISTERS``, the caps of the builds ``kernels_for`` returns; other caps are for experiments."""
    gemm_task = gemm_task_for(gemm_math)
    if specialised:
        mk_gemm_task = gemm_task_for(gemm_math, only_b=True)
        mk_ftrans_task, mk_itrans_task, mk_otrans_task = make_transform_tasks(SPECIALISED[0])
    elif m_fixed:
        mk_gemm_task = gemm_task
        mk_ftrans_task, mk_itrans_task, mk_otrans_task = make_transform_tasks(m_fixed)
    else:
        mk_gemm_task, mk_ftrans_task, mk_itrans_task, mk_otrans_task = gemm_task, ftrans_task, itrans_task, otrans_task

    @cuda.jit(device=True)
    def _claim_run_signal(first, sh, table, ctl, counters, prm, x, w, U, V, M, Y, trace, ntasks, dispatch,
                          trace_on):
        """One map position of the launch, by the whole block: thread 0 claims it (ticket, blockIdx or a
        ready-queue slot) and waits on its counters, broadcasting (position, ok) through ``sh``; all threads
        run the task; thread 0 signals (ready queue: then the block queues what the signal released, and
        after a root the next root). Returns 1 when a task ran (a persistent block claims again), 0 when the map is
        used up or the block must give up (an error is recorded in ``ctl``)."""
        tid = cuda.threadIdx.x
        tracing = trace_on != 0
        if tid == 0:
            t_claim = globaltimer() if tracing else 0
            pos, ok, kind, g, idx, sig, how = _claim_and_wait(table, ctl, counters, first, ntasks, dispatch)
            sh[0] = pos
            sh[1] = ok
            sh[2] = kind
            sh[3] = g
            sh[4] = idx
            sh[5] = sig
            sh[6] = 1 if how == DISPATCH_READY else 0
            if tracing and pos < ctl[CTL_NTASKS]:
                trace[pos, 0] = t_claim
                trace[pos, 1] = globaltimer()
                trace[pos, 3] = smid()
        cuda.syncthreads()
        pos = sh[0]
        if sh[1] == 0:
            return 0
        kind = sh[2]
        g = sh[3]
        idx = sh[4]
        if kind == GEMM:
            mk_gemm_task(g, idx, prm, V, U, M)
        elif kind == ITRANS:
            mk_itrans_task(g, idx, prm, x, V)
        elif kind == OTRANS:
            mk_otrans_task(g, idx, prm, M, Y)
        elif kind == FTRANS:
            mk_ftrans_task(g, idx, prm, w, U)
        cuda.syncthreads()  # every thread's writes of the task precede thread 0's fence
        ready = sh[6] == 1
        if tid == 0:
            if tracing:
                trace[pos, 4] = globaltimer()
            sig = sh[5]
            sh[0] = -1
            if sig >= 0:
                dependency_fence()  # release
                if ready:
                    if cuda.atomic.sub(counters, sig, 1) == 1:
                        sh[0] = sig     # this signal completed the counter: the block releases its waiters
                else:
                    red_add(counters, sig, -1)      # no old value to wait for (gpu.kernels.common.memory_fence.red_add)
            if tracing and not ready:
                trace[pos, 2] = globaltimer()
        if ready:
            cuda.syncthreads()
            if tid == cuda.blockDim.x - 1 and table[pos, T_ROOT] == 1:
                _queue_next_root(ctl, counters)     # another warp than thread 0's, beside the release
            if sh[0] >= 0:
                _release(ctl, counters, sh[0])
            if tracing:
                cuda.syncthreads()
                if tid == 0:
                    trace[pos, 2] = globaltimer()
        return 1

    @_jit(max_registers)
    def megakernel(table, ctl, counters, prm, x, w, U, V, M, Y, trace, ntasks, dispatch, trace_on):
        """Runs the launch's task map, one map position per block (per-task launches, Listing 1b): a
        grid of one block per position (ticket: block order does not matter; blockidx: block b runs
        position b, as in the paper).

        Block: 1-D, at least max(transform_threads, gemm_threads) threads; transform tasks use the first
        transform_threads, the GEMM uses all. Thread 0 claims the position (ticket: ``atomic.add`` on
        ``ctl[CTL_TICKET]``), waits on the task's counters and broadcasts (position, ok, kind, group, index,
        signal counter, dispatch) through 28 bytes of static shared memory; after the task, thread 0
        signals. Dynamic shared memory: ``gemm_shared_bytes`` (GEMM staging). Memory ordering: see the
        module docstring. ``ntasks``, ``dispatch``, ``trace_on``: ``launch_scalars(ctl)`` (int32).
        Tracing (``ctl[CTL_TRACE]``): thread 0 writes ``trace[pos]`` = (claim, ready, end) global-timer
        nanoseconds, the SM id and the end of the task's body (before the signal); ``trace`` needs a row per map position then (else one dummy row).

        A separate kernel from ``megakernel_persistent`` because the claim loop keeps ~40 more registers
        live (ptxas, sm_90: 128 (capped) against 216 per thread, i.e. 4 blocks of 128 threads per SM, not 2).
        """
        sh = cuda.shared.array(SH_INTS, int32)
        _claim_run_signal(True, sh, table, ctl, counters, prm, x, w, U, V, M, Y, trace, ntasks, dispatch, trace_on)


    @_jit(persistent_max_registers)
    def megakernel_persistent(table, ctl, counters, prm, x, w, U, V, M, Y, trace, ntasks, dispatch, trace_on):
        """As ``megakernel``, for persistent launches (``ctl[CTL_PERSISTENT]`` = 1): any number of blocks,
        each claiming positions by ticket until the map is used up."""
        sh = cuda.shared.array(SH_INTS, int32)
        # Every claim passes first=False (persistent launches claim by ticket only: the host refuses
        # dispatch='blockidx' with them) and the call sits in the loop's body, not its condition: the
        # earlier form (`while _claim_run_signal(first, ...) == 1: first = False`) compiled every task body
        # twice, 1284 FFMA instead of 642, and spilled ~300 registers (ptxas sm_90, 255 registers either way).
        running = 1
        while running == 1:
            running = _claim_run_signal(False, sh, table, ctl, counters, prm, x, w, U, V, M, Y, trace, ntasks,
                                        dispatch, trace_on)
            cuda.syncthreads()  # all threads have read sh before thread 0 rewrites it

    if gemm_kernel is None:
        @_jit(gemm_kernel_max_registers)
        def gemm_kernel(table, prm, V, U, M):
            """Non-fused batched GEMM: block b runs the gemm task in table row b.
            Block: gemm_threads threads. Dynamic shared memory: ``gemm_shared_bytes``. No counters."""
            b = cuda.blockIdx.x
            gemm_task(table[b, T_GROUP], table[b, T_INDEX], prm, V, U, M)

        persist(gemm_kernel, gemm_math, gemm_kernel_max_registers)
    build = (gemm_math, specialised, m_fixed)
    return MathKernels(gemm_math, persist(megakernel, *build, max_registers),
                       persist(megakernel_persistent, *build, persistent_max_registers), gemm_kernel)


def _build_all(gemm_math: str) -> dict:
    general = build_kernels(gemm_math)
    builds = {0: general, "specialised": build_kernels(gemm_math, True, general.gemm_kernel)}
    builds.update({m: build_kernels(gemm_math, gemm_kernel=general.gemm_kernel, m_fixed=m) for m in OWN_BUILD_TILES})
    return builds


_KERNELS = {math: _build_all(math) for math in GEMM_MATHS}


def kernels_for(gemm_math: str, specialised: bool = False, m: int = 4) -> MathKernels:
    """The GEMM-running kernels of a GEMM math (one of ``megasim.algorithms.winograd.lowering.GEMM_MATHS``) for tile size
    ``m`` (its own megakernels where m is in ``OWN_BUILD_TILES``); with ``specialised``, the megakernels compiled
    for ``SPECIALISED`` alone. Every build shares one non-fused GEMM kernel per math."""
    try:
        builds = _KERNELS[gemm_math]
    except KeyError:
        raise ValueError(f"gemm_math={gemm_math!r} is not allowed: it must be one of {GEMM_MATHS}") from None
    if specialised:
        return builds["specialised"]
    return builds[_build_key(m)]


def launch_scalars(ctl) -> tuple:
    """The megakernel's three scalar arguments for a launch with this (host) control array: its map length,
    dispatch and trace flag (int32)."""
    return np.int32(ctl[CTL_NTASKS]), np.int32(ctl[CTL_DISPATCH]), np.int32(ctl[CTL_TRACE])


def megakernel_for(ctl, gemm_math: str, config=None, specialise: bool = False):
    """The megakernel that runs a launch with this (host) control array, GEMM math and WinogradConfig:
    with ``specialise``, the specialised build where the config is ``SPECIALISED`` (``specialised_for``); else
    the general one (or tile m's own build, ``OWN_BUILD_TILES``)."""
    kernels = kernels_for(gemm_math, config is not None and specialised_for(config, specialise), config.m if config else 4)
    return kernels.megakernel_persistent if ctl[CTL_PERSISTENT] else kernels.megakernel


RESTORE_THREADS = 256


@cuda.jit
def restore_kernel(dst_a, src_a, dst_b, src_b):
    """dst_a[:] = src_a and dst_b[:] = src_b (int32): the per-run reset of the dependency counters and
    a launch's control array from their pristine device copies, as one small kernel (with its
    arguments packed once it costs the host ~8 us; two copies issued through Numba cost ~0.35 ms).
    Grid: ceil(max(size) / RESTORE_THREADS) blocks of RESTORE_THREADS."""
    i = cuda.grid(1)
    if i < dst_a.size:
        dst_a[i] = src_a[i]
    if i < dst_b.size:
        dst_b[i] = src_b[i]


persist(restore_kernel)


@dataclass(frozen=True)
class TransformKernels:
    """The non-fused transform kernels of one build (``transform_kernels_for``)."""

    ftrans_kernel: object
    itrans_kernel: object
    otrans_kernel: object


def _build_transform_kernels(m_fixed: int = 0) -> TransformKernels:
    """The three non-fused transform kernels around ``make_transform_tasks(m_fixed)`` (0: F(4x4) and F(2x2) chosen
    at run time), their strides opaque (``make_transform_tasks(..., opaque=True)``; the megakernels' are not:
    ``gpu.kernels.winograd.device``, "opaque strides")."""
    k_ftrans_task, k_itrans_task, k_otrans_task = make_transform_tasks(m_fixed, opaque=True)

    @cuda.jit
    def ftrans_kernel(table, prm, w, U):
        """Non-fused filter transform: block b runs the ftrans task in table row b.
        Block: transform_threads threads (more are idle). No shared memory, no counters."""
        b = cuda.blockIdx.x
        k_ftrans_task(table[b, T_GROUP], table[b, T_INDEX], prm, w, U)

    @cuda.jit
    def itrans_kernel(table, prm, x, V):
        """Non-fused input transform: block b runs the itrans task in table row b.
        Block: transform_threads threads (more are idle). No shared memory, no counters."""
        b = cuda.blockIdx.x
        k_itrans_task(table[b, T_GROUP], table[b, T_INDEX], prm, x, V)

    @cuda.jit
    def otrans_kernel(table, prm, M, Y):
        """Non-fused output transform: block b runs the otrans task in table row b.
        Block: transform_threads threads (more are idle). No shared memory, no counters."""
        b = cuda.blockIdx.x
        k_otrans_task(table[b, T_GROUP], table[b, T_INDEX], prm, M, Y)

    return TransformKernels(persist(ftrans_kernel, m_fixed), persist(itrans_kernel, m_fixed),
                            persist(otrans_kernel, m_fixed))


_TRANSFORM_KERNELS = {0: _build_transform_kernels(), **{m: _build_transform_kernels(m) for m in OWN_BUILD_TILES}}
# The general build's, by name (gpu.diagnostics.offline_compile, gpu.diagnostics.diagnose).
ftrans_kernel = _TRANSFORM_KERNELS[0].ftrans_kernel
itrans_kernel = _TRANSFORM_KERNELS[0].itrans_kernel
otrans_kernel = _TRANSFORM_KERNELS[0].otrans_kernel


def transform_kernels_for(m: int) -> TransformKernels:
    """The non-fused transform kernels that run tile size ``m``: its own build where m is in
    ``OWN_BUILD_TILES``, else the general one."""
    return _TRANSFORM_KERNELS[_build_key(m)]
