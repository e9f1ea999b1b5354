"""Prepared convolutions: built once per (problem, implementation, device), then run many times with no
host work beyond launching the kernels.

    conv = prepare_conv2d(ConvProblem(64, 64, 64, 56, 56))   # the model's choice for this GPU, cached
    y = conv(x, w)                    # torch tensors or CUDA arrays, NCHW; enqueued, not waited for
    y = conv(x, w, out=y, stream=s)   # into a given output, on a given stream (a handle or cuda.core Stream)
    conv.check()                      # waits for the stream; raises if a megakernel wait gave up
    print(conv.choice.describe())     # what the model chose, among which candidates, with which spec

Building (``PreparedConv2d(problem, plan, layout=...)``) lowers the problem to its TaskGraph, orders it
(``megasim.plan.build``), prepares every launch through the GPU executor (``gpu.runtime.execute``: task
tables uploaded, kernels compiled, dependency counters and their pristine copies on the device) and
allocates the intermediate tensors (U, V, M). The first call packs each launch's arguments once
(``gpu.runtime.fast_launch.FrozenLaunch``). Every call then only checks its arguments' shapes, points the
launches' x, w and y arguments at the caller's memory (``FrozenLaunch.rebind``) and launches the kernels
on the caller's stream: no allocation (unless ``out`` is omitted), no host copy, no synchronisation, so a
call can be captured in a CUDA graph. A launch that only transforms the filter (the non-fused ftrans) is
skipped when w is the same torch tensor as the last call's and unmodified since (``_same_filter``: the
module's weights between optimiser steps); a megakernel transforms the filter on every call. A fused plan
that sets none of D_IG, D_GO and M runs Algorithm 1's recommended mapping (``recommended_params``), the
default of ``gpu.winograd.conv2d`` too, not the tightest one ``megasim.plan.build`` fills in for the model.

On the GPU, the call on device pointers (``launcher``: the PyTorch module's forward, and ``__call__`` on
a stream handle) replays the launches as one CUDA graph (``gpu.runtime.launch_graph.LaunchGraphs``: one
``cuGraphLaunch`` instead of one ``cuLaunchKernel`` per kernel) once the same (x, w, y) pointers come a
second time, as they do under torch's caching allocator; one set of graphs per sequence (with and without
the filter transform), at most 16 graphs each, least recently used dropped. The graphs hold the same
kernels with the same parameters, so results are the direct launches' bit for bit. Inside a CUDA graph
capture of the caller's (torch's current stream capturing), the kernels are launched into it directly,
the filter transform included, and the next call outside transforms the filter again (nothing ran during
the capture).

Layouts: "NCHW" tensors run the non-fused schedule on the NCHW transforms (``gpu.kernels.winograd.nchw``:
the layout change happens inside the input and output transforms, at no extra pass over memory); "NHWC"
(a channels_last torch tensor: logical NCHW, NHWC in memory) runs either schedule on the NHWC kernels.

A megakernel launch (fused schedule) reports a dependency wait that gave up in its control array. After
each launch the call enqueues a 4-byte copy of that error word into pinned host memory, and the next call
reads it before launching anything: a failure surfaces as ``MegakernelError`` at the next call (or at
``check()``, which waits for the stream), never silently, and without a per-call synchronisation.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
import numpy as np
from numba import config, cuda

from gpu.errors import KernelInputError, MegakernelError
from gpu.kernels.winograd import megakernel as mk
from gpu.runtime import executor as ex
from gpu.runtime.execute import PreparedRun
from gpu.runtime.fast_launch import stream_from_handle
from gpu.runtime.launch_graph import LaunchGraphs
from megasim.algorithms.winograd.implementation import candidate_plan
from megasim.algorithms.winograd.choice import (DEFAULT_MAX_REL_ERR, LAYOUTS, Choice, ChoiceCache, device_spec)
from megasim.algorithms.winograd.lowering import DEFAULT_TRANSFORM_PAIRS_PER_THREAD, check_supported
from megasim.plan import Plan, build, check_problem_size
from megasim.workloads.problem import ConvProblem


def _device_name() -> str:
    if config.ENABLE_CUDASIM:
        return "CUDA simulator"
    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


_CAPTURING: list = []


def _capturing() -> bool:
    """Whether torch's current stream is capturing a CUDA graph (torch imported on first use only)."""
    if not _CAPTURING:
        import torch
        _CAPTURING.append(getattr(torch._C, "_cuda_isCurrentStreamCapturing", torch.cuda.is_current_stream_capturing))
    return _CAPTURING[0]()


class _Operand:
    """How a call's tensor becomes a device pointer (GPU) or an array (simulator), with its checks."""

    def __init__(self, name: str, shape: tuple[int, ...], layout: str) -> None:
        self.name, self.shape, self.layout = name, tuple(shape), layout
        self.memory_shape = shape if layout == "NCHW" else (shape[0], shape[2], shape[3], shape[1])

    def _torch_check(self, t) -> None:
        import torch
        if t.dtype != torch.float32:
            raise KernelInputError(f"{self.name} must be float32, got {t.dtype}")
        if tuple(t.shape) != self.shape:
            raise KernelInputError(f"{self.name} has shape {tuple(t.shape)}; this convolution was prepared for {self.shape}")
        fmt = torch.contiguous_format if self.layout == "NCHW" else torch.channels_last
        if not t.is_contiguous(memory_format=fmt):
            want = "contiguous (NCHW)" if self.layout == "NCHW" else "channels_last (NHWC in memory)"
            raise KernelInputError(f"{self.name} must be {want} for this {self.layout} convolution")

    def resolve(self, t):
        """The device pointer of ``t`` (GPU) or a NumPy view of its memory (simulator)."""
        if hasattr(t, "data_ptr") and hasattr(t, "is_contiguous"):       # a torch tensor
            self._torch_check(t)
            if config.ENABLE_CUDASIM:
                mem = t.detach() if self.layout == "NCHW" or t.dim() != 4 else t.detach().permute(0, 2, 3, 1)
                return mem.numpy()
            if not t.is_cuda:
                raise KernelInputError(f"{self.name} must be a CUDA tensor, got one on {t.device}")
            return t.data_ptr()
        if config.ENABLE_CUDASIM:
            a = np.asarray(t) if not hasattr(t, "copy_to_host") else t
        else:
            if not hasattr(t, "__cuda_array_interface__"):
                raise KernelInputError(f"{self.name} must be a CUDA array or tensor, got {type(t).__name__}")
            a = t if hasattr(t, "copy_to_host") else cuda.as_cuda_array(t)
        if tuple(a.shape) != self.memory_shape:
            raise KernelInputError(f"{self.name} has shape {tuple(a.shape)}; this {self.layout} convolution was "
                                   f"prepared for {self.memory_shape}")
        if np.dtype(a.dtype) != np.float32:
            raise KernelInputError(f"{self.name} must be float32, got {np.dtype(a.dtype)}")
        contiguous = a.flags["C_CONTIGUOUS"] if isinstance(a, np.ndarray) else a.is_c_contiguous()
        if not contiguous:
            raise KernelInputError(f"{self.name} must be C-contiguous")
        return a if config.ENABLE_CUDASIM else a.__cuda_array_interface__["data"][0]


class PreparedConv2d:
    """One convolution, ready to run repeatedly (module docstring). ``plan``: a Winograd Plan (schedule and
    parameters); ``layout``: "NCHW" (non-fused schedules only) or "NHWC"; ``choice``: the model's Choice
    this plan came from, kept for inspection."""

    def __init__(self, problem: ConvProblem, plan: Plan, *, layout: str = "NCHW", choice: Choice | None = None,
                 poll_limit: int = ex.DEFAULT_POLL_LIMIT) -> None:
        if not isinstance(problem, ConvProblem):
            raise KernelInputError(f"problem must be a ConvProblem, got {type(problem).__name__}")
        if layout not in LAYOUTS:
            raise KernelInputError(f"layout={layout!r} is not allowed (allowed: {', '.join(LAYOUTS)})")
        if not isinstance(plan, Plan) or plan.algorithm != "winograd":
            raise KernelInputError(f"plan must be a Winograd Plan, got {plan!r}")
        check_supported(problem)
        check_problem_size(problem)
        self.problem, self.layout, self.choice = problem, layout, choice
        if plan.schedule == "fused":
            # no mapping given: the GPU API's default (gpu.winograd.conv2d's), Algorithm 1's recommended
            # parameters, not build's tightest ones (which measure 14-21% slower; docs/findings.md)
            plan = candidate_plan(problem, plan, plan.params.transform_pairs_per_thread
                                  or DEFAULT_TRANSFORM_PAIRS_PER_THREAD["fused"])
        graph, schedule, self.plan = build(problem, plan)
        self._run = PreparedRun(problem, self.plan, graph, schedule,
                                options={"layout": layout, "poll_limit": poll_limit})
        p = problem
        self._x = _Operand("x", (p.n, p.c, p.h, p.w), layout)
        self._w = _Operand("w", (p.k, p.c, p.r, p.s), "NCHW")
        self._y = _Operand("out", (p.n, p.k, p.out_h, p.out_w), layout)
        self._launches: list = []          # FrozenLaunch per step, built at the first call
        self._slots: tuple = ()            # (operand index, launch, argument index) to rebind per call
        self._megakernels = [pl for pl in self._run.launches if getattr(pl, "pl", None) is not None and pl.pl.size]
        self._errors = cuda.pinned_array(max(1, len(self._megakernels)), np.int32) if self._megakernels else None
        if self._errors is not None:
            self._errors[:] = mk.ERR_NONE
        self._streams: dict[int, object] = {}
        self._lock = threading.Lock()
        self._last_w, self._last_key = None, None      # the filter U was last transformed from
        self._fast_last = [None, None, None]           # the same, as the raw launcher keeps it
        self._launcher = None
        self._graphs = None                            # the launcher's LaunchGraphs per launch sequence

    def _first_call(self, x, w, y) -> None:
        def as_array(a, operand):
            if config.ENABLE_CUDASIM or hasattr(a, "copy_to_host"):
                return a
            if hasattr(a, "detach"):        # torch: its memory order (NHWC for channels_last), no autograd
                a = a.detach()
                if operand.layout == "NHWC" and a.dim() == 4:
                    a = a.permute(0, 2, 3, 1)
            return cuda.as_cuda_array(a)
        xs, ws_, ys = (as_array(a, op) for a, op in ((x, self._x), (w, self._w), (y, self._y)))
        ws = ex.workspace(self._run.state.plan, xs, ws_, ys)
        launches, slots, filter_only = [], [], []
        for fn, args in self._run.steps(ws):
            if args:
                raise KernelInputError("a step of this run is not a packed launch")   # the Winograd table packs all
            touches = set()
            for i, a in enumerate(fn.arguments):
                for k, mine in enumerate((ws.x, ws.w, ws.Y)):
                    if a is mine:
                        slots.append((k, fn, i))
                        touches.add(k)
            launches.append(fn)
            filter_only.append(touches == {1})
        self._run._steps.clear()           # the workspace's x, w, y are the caller's: keep no reference to them
        self._slots, self._filter_only = tuple(slots), tuple(filter_only)
        self._launcher = self._make_launcher(launches)
        self._launches = launches          # last: ``ready`` says the call is packed

    def _make_launcher(self, launches: list):
        """The call ``launch(x_ptr, w_ptr, y_ptr, w, stream_handle)`` on raw parameter blocks
        (``FrozenLaunch.raw``), or None (the simulator, or a launch without one)."""
        if config.ENABLE_CUDASIM:
            return None
        raws, slots = [], [[], [], []]
        for fn in launches:
            args = [i for k, f, i in self._slots if f is fn]
            got = fn.raw(tuple(args))
            if got is None:
                return None
            raws.append(got[0])
            for (k, f, i), slot in zip([s for s in self._slots if s[1] is fn], got[1]):
                slots[k].append(slot)
        x_slots, w_slots, y_slots = (tuple(s) for s in slots)
        every = tuple(raws)
        no_filter = tuple(r for r, f in zip(raws, self._filter_only) if not f)
        lock, errors = self._lock, self._errors
        raise_pending, copy_errors = self._raise_pending, self._copy_errors
        last = self._fast_last             # the filter U holds: the tensor, its version, its address

        def recorder(seq):
            def record(stream):
                for step in seq:
                    step(stream)
                if errors is not None:
                    copy_errors(stream)
            return record
        record_every, record_no_filter = recorder(every), recorder(no_filter)
        if LaunchGraphs.available():       # one CUDA graph per sequence and (x, w, y) pointers
            graphs_every = LaunchGraphs(record_every)
            graphs_no_filter = graphs_every if no_filter == every else LaunchGraphs(record_no_filter)
            self._graphs = (graphs_every, graphs_no_filter)
        else:
            graphs_every = graphs_no_filter = None

        def launch(xp, wp, yp, w, stream):
            if errors is not None:
                raise_pending()
            with lock:
                for slot in x_slots:
                    slot.value = xp
                for slot in w_slots:
                    slot.value = wp
                for slot in y_slots:
                    slot.value = yp
                version = getattr(w, "_version", None)
                if _capturing():           # a capture of the caller's: launched into it, the filter transformed
                    last[:] = (None, None, None)     # nothing runs now, so U holds no new transform after it
                    self._last_w, self._last_key = None, None
                    record_every(stream)
                elif version is not None and w is last[0] and version == last[1] and wp == last[2]:
                    if graphs_no_filter is None or not graphs_no_filter.launch((xp, wp, yp), stream):
                        record_no_filter(stream)
                else:
                    last[:] = (w, version, wp) if version is not None else (None, None, None)
                    self._last_w, self._last_key = None, None
                    if graphs_every is None or not graphs_every.launch((xp, wp, yp), stream):
                        record_every(stream)
        return launch

    def _stream(self, stream):
        if stream is None or stream == 0 or config.ENABLE_CUDASIM:
            return None                 # the legacy default stream
        if isinstance(stream, int):
            s = self._streams.get(stream)
            if s is None:
                s = self._streams[stream] = stream_from_handle(stream)
            return s
        return stream

    def _raise_pending(self) -> None:
        if self._errors is None:
            return
        if config.ENABLE_CUDASIM:
            for i, pl in enumerate(self._megakernels):
                self._errors[i] = pl.pl.d_ctl.copy_to_host()[mk.CTL_ERR_CODE]
        bad = np.flatnonzero(self._errors != mk.ERR_NONE)
        if bad.size:
            codes = self._errors.copy()
            self._errors[:] = mk.ERR_NONE
            pl = self._megakernels[int(bad[0])]
            ctl = pl.pl.d_ctl.copy_to_host()
            ctl[mk.CTL_ERR_CODE] = codes[int(bad[0])]
            ex._raise_kernel_error(self._run.state.plan, ctl, pl.pl.launch.name)
            raise MegakernelError(f"launch {pl.pl.launch.name!r}: kernel reported error code {int(codes[bad[0]])}")

    def __call__(self, x, w, out=None, *, stream=None):
        """Enqueue y = conv(x, w) on ``stream`` (a CUDA stream handle, a cuda.core Stream, or None: the legacy
        default stream) and return y (``out``, or a new array: a torch tensor for torch inputs)."""
        if out is None:
            out = self.new_output(x)
        targets = (self._x.resolve(x), self._w.resolve(w), self._y.resolve(out))
        if not self._launches:
            with self._lock:
                if not self._launches:
                    self._first_call(x, w, out)
        self.enqueue(targets, w, stream)
        return out

    def enqueue(self, targets: tuple, w, stream=None) -> None:
        """Launch on already checked operands: ``targets`` = (x, w, y) device pointers (GPU) or arrays
        (simulator), ``w`` the filter object (for ``_same_filter``). The first call must have been made
        through ``__call__`` (it packs the launches). For callers that checked the operands themselves,
        such as the PyTorch module."""
        launcher = self._launcher
        if launcher is not None and (stream is None or isinstance(stream, int)):
            launcher(targets[0], targets[1], targets[2], w, stream or 0)
            return
        self._raise_pending()
        s = self._stream(stream)
        with self._lock:
            for k, fn, i in self._slots:
                fn.rebind(i, targets[k])
            same_filter = self._same_filter(w, targets[1])
            self._fast_last[:] = (None, None, None)
            for fn, filter_only in zip(self._launches, self._filter_only):
                if not (filter_only and same_filter):
                    fn(s)
            if self._errors is not None and not config.ENABLE_CUDASIM:
                self._copy_errors(s)

    @property
    def launcher(self):
        """After the first call on the GPU: ``launch(x_ptr, w_ptr, y_ptr, w, stream_handle)``, the call for
        callers that checked the operands themselves (such as the PyTorch module's forward): it points the
        launches at the three device pointers and launches them on the stream handle (the filter transform
        skipped as in ``enqueue``). None under the simulator or before the first call."""
        return self._launcher

    @property
    def filter_shape(self) -> tuple[int, int, int, int]:
        """The filter's shape this convolution was prepared for: (K, C, R, S)."""
        return self._w.shape

    @property
    def ready(self) -> bool:
        """Whether the launches are packed (after the first call): ``enqueue`` may be used."""
        return bool(self._launches)

    def _same_filter(self, w, target) -> bool:
        """Whether U already holds the transform of ``w``: the same torch tensor as the last call's (held, so
        its memory cannot have been reused), at the same address and unmodified since (its version counter:
        in-place updates such as an optimiser step advance it). Other arrays: never assumed."""
        version = getattr(w, "_version", None)
        key = (target if not isinstance(target, np.ndarray) else id(target), version)
        same = version is not None and w is self._last_w and key == self._last_key
        self._last_w, self._last_key = (w, key) if version is not None else (None, None)
        if not config.ENABLE_CUDASIM and version is not None and _capturing():
            # a graph replays later, after weight updates; nothing runs now, so U holds no new transform
            self._last_w, self._last_key = None, None
            return False
        return same

    def _copy_errors(self, s) -> None:
        from cuda.bindings import driver
        handle = 0 if s is None else (s if isinstance(s, int) else int(s.handle))
        host = self._errors.ctypes.data
        for i, pl in enumerate(self._megakernels):
            src = pl.pl.d_ctl.__cuda_array_interface__["data"][0] + 4 * mk.CTL_ERR_CODE
            driver.cuMemcpyDtoHAsync(host + 4 * i, src, 4, handle)

    def new_output(self, x):
        """An uninitialised output for input ``x``: a torch tensor (this layout's memory format) for a torch
        input, else a Numba device array (a NumPy array under the simulator)."""
        p = self.problem
        shape = (p.n, p.k, p.out_h, p.out_w)
        if hasattr(x, "data_ptr") and hasattr(x, "new_empty"):
            import torch
            fmt = torch.contiguous_format if self.layout == "NCHW" else torch.channels_last
            return torch.empty(shape, dtype=torch.float32, device=x.device, memory_format=fmt)
        mem = self._y.memory_shape
        return np.empty(mem, np.float32) if config.ENABLE_CUDASIM else cuda.device_array(mem, np.float32)

    def check(self, stream=None) -> None:
        """Wait for ``stream`` (None: the whole device) and raise MegakernelError if a launch of an earlier
        call reported a dependency wait that gave up."""
        if not config.ENABLE_CUDASIM:
            s = self._stream(stream)
            if s is None:
                cuda.synchronize()
            else:
                s.sync()
        self._raise_pending()

    def describe(self) -> str:
        head = f"{self.problem.spec_string()} {self.layout}: {self.plan.schedule} {self.plan.param_string()}"
        return head if self.choice is None else self.choice.describe()


_PREPARED: OrderedDict[tuple, PreparedConv2d] = OrderedDict()
# Prepared convolutions kept (least recently used dropped first): each holds its intermediates (U, V, M)
# on the device; a module that holds one keeps it alive regardless.
KEEP_PREPARED = 64
_PREPARED_LOCK = threading.Lock()
_CHOICES: dict[str, ChoiceCache] = {}


def choose_plan(problem: ConvProblem, *, layout: str = "NCHW", max_rel_err: float = DEFAULT_MAX_REL_ERR,
                gemm_math: str = "fp32", cache_path=None) -> Choice:
    """The model's choice for ``problem`` on the current GPU (``megasim.algorithms.winograd.choice``), from the
    choice cache at ``cache_path`` (default ~/.cache/megasim/winograd_choices.json) or made and stored there."""
    key = str(cache_path)
    cache = _CHOICES.get(key)
    if cache is None:
        cache = _CHOICES[key] = ChoiceCache(cache_path)
    spec, reason = device_spec(_device_name())
    return cache.choose(problem, spec, layout=layout, max_rel_err=max_rel_err, gemm_math=gemm_math, spec_reason=reason)


def prepare_conv2d(problem: ConvProblem, plan: Plan | None = None, *, layout: str = "NCHW",
                   max_rel_err: float = DEFAULT_MAX_REL_ERR, gemm_math: str = "fp32", cache_path=None,
                   poll_limit: int = ex.DEFAULT_POLL_LIMIT) -> PreparedConv2d:
    """The PreparedConv2d of ``problem`` on the current device, built once and kept: ``plan`` None takes the
    model's choice (``choose_plan``), a Plan overrides it (a non-fused plan's default transform pairs apply)."""
    if not isinstance(problem, ConvProblem):
        raise KernelInputError(f"problem must be a ConvProblem, got {type(problem).__name__}")
    choice = None
    if plan is None:
        choice = choose_plan(problem, layout=layout, max_rel_err=max_rel_err, gemm_math=gemm_math,
                             cache_path=cache_path)
        plan = choice.plan
    elif not isinstance(plan, Plan):
        raise KernelInputError(f"plan must be a megasim Plan or None, got {type(plan).__name__}")
    device = -1 if config.ENABLE_CUDASIM else cuda.get_current_device().id
    key = (problem, plan, layout, device, poll_limit)
    with _PREPARED_LOCK:
        conv = _PREPARED.get(key)
        if conv is None:
            conv = _PREPARED[key] = PreparedConv2d(problem, plan, layout=layout, choice=choice, poll_limit=poll_limit)
            while len(_PREPARED) > KEEP_PREPARED:
                _PREPARED.popitem(last=False)
        else:
            _PREPARED.move_to_end(key)
    return conv


def clear_prepared() -> None:
    """Forget every prepared convolution (frees their device memory once no caller holds one)."""
    with _PREPARED_LOCK:
        _PREPARED.clear()


__all__ = ["PreparedConv2d", "choose_plan", "clear_prepared", "prepare_conv2d"]
