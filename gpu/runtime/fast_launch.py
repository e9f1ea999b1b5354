"""A kernel launch whose arguments are packed once: for launches repeated on the same arrays.

Numba prepares every launch in Python: it types each argument, looks up the overload, and flattens
each array into its meminfo / parent / size / itemsize / data / shape / strides fields. For the
megakernel's 11 array arguments that host work is a few hundred microseconds per launch (its
calibrated ``megakernel_launch_ns``: 0.28-0.32 ms on the H200 host, against ~30 us for a 4-argument
kernel), longer than many fused runs themselves, so short launches measured the host, not the GPU.
``FrozenLaunch`` does that work once, at construction, for fixed arrays, grid, block and shared
memory; each call is then one ``cuda.core.launch`` of the compiled kernel with the stored
arguments. The arrays must stay alive and unchanged in place (contents may change).

An array argument can be pointed at other memory of the same shape afterwards (``rebind(i, ptr)``: one
list store, for inputs and outputs that change from call to call), and a call can name the CUDA stream
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
        args = list(self._args)
        args[i] = None
        self._args = tuple(args)

    def __call__(self, stream=None) -> None:
        """Enqueue the launch on ``stream`` (a cuda.core Stream; None: the legacy default stream)."""
        if config.ENABLE_CUDASIM:
            griddim, blockdim, _, sharedmem = self._shape
            self._dispatcher[griddim, blockdim, 0, sharedmem](*self._args)
            return
        self._launch(self._stream if stream is None else stream, self._config, self._kernel, *self._packed)


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
