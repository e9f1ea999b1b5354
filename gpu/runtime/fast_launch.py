"""A kernel launch whose arguments are packed once: for launches repeated on the same arrays.

Numba prepares every launch in Python: it types each argument, looks up the overload, and flattens
each array into its meminfo / parent / size / itemsize / data / shape / strides fields. For the
megakernel's 11 array arguments that host work is a few hundred microseconds per launch (its
calibrated ``megakernel_launch_ns``: 0.28-0.32 ms on the H200 host, against ~30 us for a 4-argument
kernel), longer than many fused runs themselves, so short launches measured the host, not the GPU.
``FrozenLaunch`` does that work once, at construction, for fixed arrays, grid, block and shared
memory; each call is then one ``cuLaunchKernel`` with a parameter block built once (``_RawLaunch``:
through ctypes on libcuda, the call's arguments ctypes objects made once per stream), or, for parameter
types that block does not know, one ``cuda.core.launch`` of the compiled kernel with the stored
arguments. The arrays must stay alive and unchanged in place (contents may change).

An array argument can be pointed at other memory of the same shape afterwards (``rebind(i, ptr)``: one
store into the parameter block, for inputs and outputs that change from call to call; ``raw()`` hands
the launch and those slots to a caller that patches and launches on its own), and a call can name the CUDA stream
it is enqueued on (a ``cuda.core.Stream``; ``stream_from_handle`` wraps another library's stream, e.g.
torch's ``torch.cuda.current_stream().cuda_stream``). Under the CUDA simulator a FrozenLaunch simply
calls the dispatcher each time, ``rebind`` takes the new array itself and streams are ignored.
"""

from __future__ import annotations

from numba import config, cuda

__all__ = ["FrozenLaunch"]


class FrozenLaunch:
    """``dispatcher[griddim, blockdim, 0, sharedmem](*args)``, prepared once; call it to launch."""

    def __init__(self, dispatcher, griddim, blockdim, sharedmem: int, args: tuple) -> None:
        self._args = tuple(args)        # keeps the arrays alive while the packed pointers are used
        self._dispatcher = dispatcher
        self._shape = (griddim, blockdim, 0, sharedmem)
        if config.ENABLE_CUDASIM:
            return
        from cuda.core import LaunchConfig, launch
        from numba.cuda._compat import CUDA_CORE_GE_1_0
        from numba.cuda.cudadrv import driver

        self._pointer_at: list[int | None] = []   # per argument: where its data pointer is in ``packed``
        try:  # Numba's own packing (private API of numba-cuda 0.30: checked here, not assumed)
            kernel = dispatcher.compile(tuple(dispatcher.typeof_pyval(a) for a in self._args))
            packed, writeback = [], []
            for ty, val in zip(kernel.argument_types, self._args):
                start = len(packed)
                kernel._prepare_args(ty, val, 0, writeback, packed)
                is_array = hasattr(val, "__cuda_array_interface__")
                if is_array and packed[start + 4] != val.__cuda_array_interface__["data"][0]:
                    raise AttributeError("the packed layout of an array argument changed (its data pointer moved)")
                self._pointer_at.append(start + 4 if is_array else None)
            cufunc = kernel._codelibrary.get_cufunc()
            stream = driver._to_core_stream(0)
        except AttributeError as err:
            import numba_cuda
            raise RuntimeError(f"gpu.runtime.fast_launch relies on numba-cuda 0.30's kernel internals; numba-cuda "
                               f"{numba_cuda.__version__} lacks one ({err})") from None
        if writeback:  # a host array would be copied back after every launch: not what this is for
            raise ValueError("FrozenLaunch needs device arrays (a host array argument was given)")
        grid = griddim if isinstance(griddim, tuple) else (griddim,)
        block = blockdim if isinstance(blockdim, tuple) else (blockdim,)
        coop = {"is_cooperative" if CUDA_CORE_GE_1_0 else "cooperative_launch": False}
        self._config = LaunchConfig(grid=grid, block=block, shmem_size=sharedmem, **coop)
        self._kernel = cufunc.kernel
        self._packed = packed
        self._stream = stream
        self._launch = launch
        self._raw = _RawLaunch.make(cufunc.kernel, grid, block, sharedmem, packed, kernel.argument_types)

    @property
    def arguments(self) -> tuple:
        """The launch's arguments as given (None where ``rebind`` released an array)."""
        return self._args

    def rebind(self, i: int, target) -> None:
        """Point array argument ``i`` at ``target``: on the GPU its device pointer (an int; same shape,
        dtype and strides as the array given at construction, alive until the launch has run), under the
        simulator the new array. The array given at construction is released."""
        if config.ENABLE_CUDASIM:
            args = list(self._args)
            args[i] = target
            self._args = tuple(args)
            return
        at = self._pointer_at[i]
        if at is None:
            raise ValueError(f"argument {i} of this launch is not an array")
        self._packed[at] = int(target)
        if self._raw is not None:
            self._raw.set_pointer(at, int(target))
        args = list(self._args)
        args[i] = None
        self._args = tuple(args)

    def raw(self, pointer_args: tuple = ()) -> tuple | None:
        """For callers that launch on stream handles themselves: (``launch(stream_handle)``, the ctypes slots
        holding the data pointers of array arguments ``pointer_args``, in that order: set a slot's ``value``
        to repoint the argument, as ``rebind`` does), or None where this launch has no raw parameter block
        (the simulator, or a parameter type it does not know: call the FrozenLaunch instead)."""
        raw = None if config.ENABLE_CUDASIM else self._raw
        if raw is None or any(self._pointer_at[i] is None for i in pointer_args):
            return None
        return raw, tuple(raw.values[self._pointer_at[i]] for i in pointer_args)

    def __call__(self, stream=None) -> None:
        """Enqueue the launch on ``stream`` (a cuda.core Stream; None: the legacy default stream)."""
        if config.ENABLE_CUDASIM:
            griddim, blockdim, _, sharedmem = self._shape
            self._dispatcher[griddim, blockdim, 0, sharedmem](*self._args)
            return
        if self._raw is not None:
            try:
                self._raw(0 if stream is None else int(stream.handle))
                return
            except (TypeError, AttributeError):     # a binding that takes the call otherwise: cuda.core's launch
                self._raw = None
        self._launch(self._stream if stream is None else stream, self._config, self._kernel, *self._packed)


class _RawLaunch:
    """One cuLaunchKernel call with its parameter block built once: every packed value in a ctypes slot
    of its own (8-byte for Numba's array fields and 64-bit scalars) and an array of pointers to them.
    The driver is called through ctypes on libcuda itself, with the call's arguments as ctypes objects
    made once per stream (no conversion per call); where libcuda cannot be loaded by ctypes, through
    cuda-python's binding (which converts its arguments on every call). cuda.core's ``launch`` converts
    every parameter on every call (~50 for a 5-array kernel). ``make`` returns None where a parameter's
    type is not one it knows, and the caller keeps cuda.core's launch."""

    def __init__(self, driver, handle, grid, block, sharedmem, values) -> None:
        import ctypes
        self.driver, self.handle = driver, handle
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.block = tuple(block) + (1,) * (3 - len(block))
        self.sharedmem = int(sharedmem)
        self.values = values
        self.pointers = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
        self.address = ctypes.addressof(self.pointers)
        self.streams: dict[int, object] = {}
        self.calls: dict[int, tuple] = {}      # stream handle -> the ctypes arguments of cuLaunchKernel
        self.cu_launch = _libcuda_launch()
        if self.cu_launch is not None:
            self.cu_handle = ctypes.c_void_p(int(handle))
            dims = [ctypes.c_uint(int(d)) for d in (*self.grid, *self.block, self.sharedmem)]
            self.dims = tuple(dims)
            self.params = ctypes.c_void_p(self.address)

    @classmethod
    def make(cls, kernel, grid, block, sharedmem, packed, argument_types):
        import ctypes
        from numba.core import types as nbtypes
        try:
            from cuda.bindings import driver
            handle = kernel.handle
        except (ImportError, AttributeError):
            return None
        if not all(isinstance(t, nbtypes.Array) or (isinstance(t, nbtypes.Integer) and t.bitwidth == 64)
                   for t in argument_types):
            return None            # other scalar types: cuda.core's launch knows their sizes
        values = []
        for v in packed:
            if isinstance(v, int):
                values.append(ctypes.c_int64(v))
            elif isinstance(v, (ctypes.c_int64, ctypes.c_uint64)):
                values.append(type(v)(v.value))
            else:
                return None
        return cls(driver, handle, grid, block, sharedmem, values)

    def set_pointer(self, at: int, value: int) -> None:
        self.values[at].value = value

    def __call__(self, stream_handle: int) -> None:
        if self.cu_launch is not None:
            args = self.calls.get(stream_handle)
            if args is None:
                import ctypes
                args = self.calls[stream_handle] = (self.cu_handle, *self.dims, ctypes.c_void_p(stream_handle),
                                                    self.params, None)
            err = self.cu_launch(*args)
            if err:
                raise RuntimeError(f"cuLaunchKernel failed: CUresult {err}")
            return
        stream = self.streams.get(stream_handle)
        if stream is None:
            stream = self.streams[stream_handle] = self.driver.CUstream(stream_handle)
        (err,) = self.driver.cuLaunchKernel(self.handle, *self.grid, *self.block, self.sharedmem, stream,
                                            self.address, 0)
        if err != self.driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuLaunchKernel failed: {err!r}")


_CU_LAUNCH: list = []


def _libcuda_launch():
    """libcuda's cuLaunchKernel as a ctypes function (None where the library does not load by that name)."""
    if not _CU_LAUNCH:
        import ctypes
        try:
            fn = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
            fn.restype = ctypes.c_int
        except (OSError, AttributeError):
            fn = None
        _CU_LAUNCH.append(fn)
    return _CU_LAUNCH[0]


def stream_from_handle(handle: int):
    """A cuda.core Stream on an existing CUDA stream handle (None under the simulator, which has no streams)."""
    if config.ENABLE_CUDASIM:
        return None
    from cuda.core import Stream
    return Stream.from_handle(int(handle))


def _selftest() -> None:  # pragma: no cover - run on a GPU: python -m gpu.runtime.fast_launch
    import time

    import numpy as np

    @cuda.jit
    def add_one(a, b, c, d, e, f, g, h, i, j, k):
        t = cuda.grid(1)
        if t < a.size:
            a[t] += 1.0

    arrs = [cuda.to_device(np.zeros(1000, np.float32)) for _ in range(11)]
    add_one[4, 256](*arrs)
    fl = FrozenLaunch(add_one, 4, 256, 0, tuple(arrs))
    for label, fn in (("numba", lambda: add_one[4, 256](*arrs)), ("frozen", fl)):
        cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(200):
            fn()
        cuda.synchronize()
        print(f"{label}: {(time.perf_counter() - t0) / 200 * 1e6:.1f} us per launch (host + device)")
    assert float(arrs[0].copy_to_host()[0]) == 401.0


if __name__ == "__main__":  # pragma: no cover
    _selftest()
