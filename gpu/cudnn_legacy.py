"""cuDNN's legacy convolution API through ctypes, on the libcudnn that PyTorch loaded.

PyTorch reaches cuDNN's algorithms only through its own heuristics or ``cudnn.benchmark``; naming
one (WINOGRAD_NONFUSED, FFT_TILING, ...) takes the legacy API: ``cudnnFindConvolutionForwardAlgorithmEx``
times every algorithm on real buffers and ``cudnnConvolutionForward`` runs a chosen one.
``CudnnConv`` wraps one NCHW float32 convolution (stride 1, dilation 1, cross-correlation, float32
compute) on torch tensors' ``data_ptr()``, its handle bound to torch's current stream.

Libraries (cuDNN 9): ``libcudnn.so.9`` is a shim that dispatches to ``libcudnn_graph.so.9`` (handle,
stream, error strings), ``libcudnn_ops.so.9`` (tensor and filter descriptors) and
``libcudnn_cnn.so.9`` (convolution descriptors, Find, Forward). We load the copies already mapped
into the process by torch (read from /proc/self/maps after ``torch.backends.cudnn.version()``), else
those in the ``nvidia/cudnn/lib`` or ``torch/lib`` directories, and resolve each symbol in the shim
first, then the sub-libraries; two different cuDNN copies in one process would not share handles.

Enum values are those of cudnn_graph.h / cudnn_cnn.h (cuDNN 8 and 9 agree on all used here; sources in
the comments). Status codes changed in cuDNN 9 (NOT_SUPPORTED is 3000 there, 9 in cuDNN 8), so
statuses are reported through ``cudnnGetErrorString`` and only SUCCESS = 0 is compared.
Every call's status is checked: a failure raises ``CudnnError`` with the function name and the string.
"""

from __future__ import annotations

import ctypes
import math
import os
from dataclasses import dataclass
from pathlib import Path

from megasim.errors import MegasimError

# cudnnConvolutionFwdAlgo_t (cudnn_cnn.h, cuDNN 9; cudnn.h before): IMPLICIT_GEMM = 0 ... COUNT = 8.
FWD_ALGOS: dict[str, int] = {
    "IMPLICIT_GEMM": 0, "IMPLICIT_PRECOMP_GEMM": 1, "GEMM": 2, "DIRECT": 3,
    "FFT": 4, "FFT_TILING": 5, "WINOGRAD": 6, "WINOGRAD_NONFUSED": 7,
}
FWD_ALGO_COUNT = 8
FWD_ALGO_NAMES: dict[int, str] = {v: k for k, v in FWD_ALGOS.items()}

# cudnnMathType_t (cudnn_graph.h): DEFAULT_MATH = 0 (float32 may use TF32 tensor cores on sm_80+),
# TENSOR_OP_MATH = 1, TENSOR_OP_MATH_ALLOW_CONVERSION = 2, FMA_MATH = 3 (FMA kernels only: no TF32).
MATH_TYPES: dict[str, int] = {"DEFAULT_MATH": 0, "TENSOR_OP_MATH": 1, "TENSOR_OP_MATH_ALLOW_CONVERSION": 2,
                              "FMA_MATH": 3}
MATH_TYPE_NAMES: dict[int, str] = {v: k for k, v in MATH_TYPES.items()}
# What CudnnConv's ``math`` argument selects. "tf32" is DEFAULT_MATH, as PyTorch sets for float32 when
# allow_tf32 is on; "fp32" is FMA_MATH, as PyTorch sets when it is off.
MATH_MODES: dict[str, int] = {"fp32": MATH_TYPES["FMA_MATH"], "tf32": MATH_TYPES["DEFAULT_MATH"]}

DATA_FLOAT = 0            # cudnnDataType_t CUDNN_DATA_FLOAT (DOUBLE = 1, HALF = 2)
TENSOR_NCHW = 0           # cudnnTensorFormat_t CUDNN_TENSOR_NCHW (NHWC = 1)
CROSS_CORRELATION = 1     # cudnnConvolutionMode_t (CONVOLUTION = 0)
STATUS_SUCCESS = 0        # cudnnStatus_t; all other codes differ between cuDNN 8 and 9

LIB_NAMES = ("libcudnn.so.9", "libcudnn_graph.so.9", "libcudnn_ops.so.9", "libcudnn_cnn.so.9")


class CudnnError(MegasimError):
    """A cuDNN call failed, or cuDNN could not be found or loaded."""


class ConvFwdAlgoPerf(ctypes.Structure):
    """cudnnConvolutionFwdAlgoPerf_t (cudnn_cnn.h): 48 bytes on x86-64, ``memory`` at offset 16."""

    _fields_ = [
        ("algo", ctypes.c_int),
        ("status", ctypes.c_int),
        ("time", ctypes.c_float),          # milliseconds
        ("memory", ctypes.c_size_t),       # workspace bytes
        ("determinism", ctypes.c_int),
        ("mathType", ctypes.c_int),
        ("reserved", ctypes.c_int * 3),
    ]


@dataclass(frozen=True)
class AlgoResult:
    """One entry of Find's answer: ``status`` is cuDNN's string ("CUDNN_STATUS_SUCCESS" when usable)."""

    algo: str
    status: str
    time_ms: float
    memory_bytes: int
    math_type: str
    ok: bool


def algo_value(name: str) -> int:
    """The cudnnConvolutionFwdAlgo_t value of an algorithm name (with or without the C prefix)."""
    key = name.upper().removeprefix("CUDNN_CONVOLUTION_FWD_ALGO_")
    if key not in FWD_ALGOS:
        raise CudnnError(f"unknown cuDNN forward algorithm {name!r} (allowed: {', '.join(FWD_ALGOS)})")
    return FWD_ALGOS[key]


def algo_name(value: int) -> str:
    return FWD_ALGO_NAMES.get(int(value), f"ALGO_{int(value)}")


def best_ok(results: list[AlgoResult]) -> AlgoResult | None:
    """The fastest successful entry of a Find answer, or None."""
    ok = [r for r in results if r.ok and math.isfinite(r.time_ms)]
    return min(ok, key=lambda r: r.time_ms) if ok else None


def loaded_cudnn_dirs(maps_text: str) -> list[Path]:
    """Directories of the libcudnn*.so files listed in a /proc/<pid>/maps text, in first-seen order."""
    dirs: list[Path] = []
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        path = Path(parts[5].strip())
        if path.name.startswith("libcudnn") and ".so" in path.name and path.parent not in dirs:
            dirs.append(path.parent)
    return dirs


def _candidate_dirs() -> list[Path]:
    dirs: list[Path] = []
    try:
        dirs += loaded_cudnn_dirs(Path("/proc/self/maps").read_text())
    except OSError:
        pass
    try:
        import nvidia.cudnn as _nv  # the nvidia-cudnn-cu1x wheel torch depends on
        dirs += [Path(p) / "lib" for p in _nv.__path__]
    except ImportError:
        pass
    try:
        import torch
        dirs.append(Path(torch.__file__).parent / "lib")
    except ImportError:
        pass
    seen: list[Path] = []
    for d in dirs:
        if d not in seen and d.is_dir():
            seen.append(d)
    return seen


class CudnnLib:
    """The loaded cuDNN libraries and typed entry points (``lib.fn("cudnnCreate")``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.libs: list[tuple[str, ctypes.CDLL]] = []
        self.load_errors: list[str] = []     # a sub-library that fails to load is only a fallback lost
        for name in LIB_NAMES:
            path = directory / name
            if path.exists():
                try:
                    self.libs.append((name, ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)))
                except OSError as exc:
                    self.load_errors.append(f"{path}: {exc}")
        if not self.libs:
            raise CudnnError(f"no loadable cuDNN 9 library ({', '.join(LIB_NAMES)}) in {directory}"
                             + (f": {'; '.join(self.load_errors)}" if self.load_errors else ""))
        self._fns: dict[str, object] = {}
        get_err = self.fn("cudnnGetErrorString", [ctypes.c_int], ctypes.c_char_p, checked=False)
        self._err = get_err
        self.version = int(self.fn("cudnnGetVersion", [], ctypes.c_size_t, checked=False)())

    def fn(self, name: str, argtypes: list, restype=ctypes.c_int, *, checked: bool = True):
        """The C function ``name``; with ``checked`` its status is checked (CudnnError on failure)."""
        key = name if checked else name + "/raw"
        if key in self._fns:
            return self._fns[key]
        for _, lib in self.libs:
            try:
                cfn = getattr(lib, name)
                break
            except AttributeError:
                continue
        else:
            raise CudnnError(f"{name} not found in {', '.join(n for n, _ in self.libs)} under {self.directory}")
        cfn.argtypes = argtypes
        cfn.restype = restype
        if checked:
            def call(*args, _cfn=cfn, _name=name):
                status = _cfn(*args)
                if status != STATUS_SUCCESS:
                    raise CudnnError(f"{_name} failed: {self.error_string(status)} (status {status})")
                return status
            self._fns[key] = call
        else:
            self._fns[key] = cfn
        return self._fns[key]

    def error_string(self, status: int) -> str:
        s = self._err(int(status))
        return s.decode() if s else f"cuDNN status {status}"


_LIB: CudnnLib | None = None


def load() -> CudnnLib:
    """Load torch's cuDNN (once per process). CudnnError if torch, CUDA or cuDNN is missing."""
    global _LIB
    if _LIB is not None:
        return _LIB
    try:
        import torch
    except ImportError as exc:
        raise CudnnError("the cuDNN baselines need PyTorch (its bundled cuDNN is the one used)") from exc
    if not torch.cuda.is_available():
        raise CudnnError("the cuDNN baselines need a CUDA device; torch.cuda.is_available() is False")
    if not torch.backends.cudnn.is_available():
        raise CudnnError("torch reports cuDNN unavailable (torch.backends.cudnn.is_available() is False)")
    torch_version = torch.backends.cudnn.version()   # also makes torch load its libcudnn
    errors = []
    for d in _candidate_dirs():
        try:
            lib = CudnnLib(d)
        except CudnnError as exc:
            errors.append(str(exc))
            continue
        if torch_version is not None and lib.version != torch_version:
            errors.append(f"{d}: cuDNN {lib.version} differs from torch's {torch_version}")
            continue
        _LIB = lib
        return lib
    raise CudnnError("could not load torch's cuDNN 9 libraries: " + ("; ".join(errors) or "no candidate directory"))


_P = ctypes.c_void_p
_I = ctypes.c_int


class CudnnConv:
    """One NCHW float32 convolution (R x S filters, 3 x 3 by default; ``stride`` in both directions)
    through cuDNN's legacy API.

        conv = CudnnConv(n, c, k, h, w, padding=1, math="fp32")
        results = conv.find(x, w, y)            # every algorithm, timed by cuDNN
        conv.forward(x, w, y, "WINOGRAD_NONFUSED")

    ``math``: "fp32" (CUDNN_FMA_MATH: no tensor cores, no TF32) or "tf32" (CUDNN_DEFAULT_MATH: float32
    convolutions may use TF32 tensor cores on sm_80+, unless NVIDIA_TF32_OVERRIDE=0). x, w, y are
    contiguous float32 CUDA torch tensors of shapes (n, c, h, w), (k, c, r, s), (n, k, p, q).
    The workspace is a torch uint8 tensor, grown on demand, at most ``workspace_limit_bytes``.
    """

    def __init__(self, n: int, c: int, k: int, h: int, w: int, *, r: int = 3, s: int = 3, padding: int = 1,
                 math: str = "fp32", workspace_limit_bytes: int = 8 << 30, stride: int = 1) -> None:
        if math not in MATH_MODES:
            raise CudnnError(f"math={math!r} is not allowed (allowed: {', '.join(MATH_MODES)})")
        self.lib = lib = load()            # CudnnError without torch, CUDA or cuDNN
        import torch
        self._torch = torch
        self.math = math
        self.math_type = MATH_MODES[math]
        self.shape_x, self.shape_w = (n, c, h, w), (k, c, r, s)
        self.workspace_limit_bytes = int(workspace_limit_bytes)
        self._workspace = None
        self._found: dict[int, AlgoResult] = {}
        self._ws_sizes: dict[int, int | None] = {}
        self.handle, self.x_desc, self.y_desc, self.w_desc, self.conv_desc = _P(), _P(), _P(), _P(), _P()
        lib.fn("cudnnCreate", [ctypes.POINTER(_P)])(ctypes.byref(self.handle))
        self._bind_stream()
        lib.fn("cudnnCreateTensorDescriptor", [ctypes.POINTER(_P)])(ctypes.byref(self.x_desc))
        lib.fn("cudnnCreateTensorDescriptor", [ctypes.POINTER(_P)])(ctypes.byref(self.y_desc))
        lib.fn("cudnnCreateFilterDescriptor", [ctypes.POINTER(_P)])(ctypes.byref(self.w_desc))
        lib.fn("cudnnCreateConvolutionDescriptor", [ctypes.POINTER(_P)])(ctypes.byref(self.conv_desc))
        set_t4 = lib.fn("cudnnSetTensor4dDescriptor", [_P, _I, _I, _I, _I, _I, _I])   # desc, format, dtype, n,c,h,w
        set_t4(self.x_desc, TENSOR_NCHW, DATA_FLOAT, n, c, h, w)
        lib.fn("cudnnSetFilter4dDescriptor", [_P, _I, _I, _I, _I, _I, _I])(          # desc, dtype, format, k,c,h,w
            self.w_desc, DATA_FLOAT, TENSOR_NCHW, k, c, r, s)
        lib.fn("cudnnSetConvolution2dDescriptor", [_P, _I, _I, _I, _I, _I, _I, _I, _I])(
            self.conv_desc, padding, padding, stride, stride, 1, 1, CROSS_CORRELATION, DATA_FLOAT)
        self._set_math(self.math_type)
        dims = [_I() for _ in range(4)]
        lib.fn("cudnnGetConvolution2dForwardOutputDim", [_P, _P, _P] + [ctypes.POINTER(_I)] * 4)(
            self.conv_desc, self.x_desc, self.w_desc, *[ctypes.byref(d) for d in dims])
        self.shape_y = tuple(d.value for d in dims)
        set_t4(self.y_desc, TENSOR_NCHW, DATA_FLOAT, *self.shape_y)

    # -- helpers ---------------------------------------------------------------------------------
    def _bind_stream(self) -> None:
        stream = self._torch.cuda.current_stream().cuda_stream
        self.lib.fn("cudnnSetStream", [_P, _P])(self.handle, _P(stream))

    def _set_math(self, math_type: int) -> None:
        self.lib.fn("cudnnSetConvolutionMathType", [_P, _I])(self.conv_desc, int(math_type))

    def _check_tensors(self, x, w, y) -> None:
        torch = self._torch
        for name, t, shape in (("x", x, self.shape_x), ("w", w, self.shape_w), ("y", y, self.shape_y)):
            if not isinstance(t, torch.Tensor) or not t.is_cuda or t.dtype != torch.float32:
                raise CudnnError(f"{name} must be a float32 CUDA torch tensor")
            if tuple(t.shape) != tuple(shape) or not t.is_contiguous():
                raise CudnnError(f"{name} must be contiguous with shape {tuple(shape)}, got {tuple(t.shape)}")

    def _workspace_ptr(self, nbytes: int):
        if nbytes > self.workspace_limit_bytes:
            raise CudnnError(f"workspace of {nbytes} bytes exceeds workspace_limit_bytes={self.workspace_limit_bytes}")
        if nbytes == 0:
            return _P(0)
        if self._workspace is None or self._workspace.numel() < nbytes:
            self._workspace = None
            self._workspace = self._torch.empty(nbytes, dtype=self._torch.uint8, device="cuda")
        return _P(self._workspace.data_ptr())

    def workspace_size(self, algo: str | int) -> int | None:
        """Workspace bytes of an algorithm, or None where cuDNN does not support it for this problem."""
        value = algo_value(algo) if isinstance(algo, str) else int(algo)
        if value in self._ws_sizes:
            return self._ws_sizes[value]
        size = ctypes.c_size_t()
        raw = self.lib.fn("cudnnGetConvolutionForwardWorkspaceSize", [_P, _P, _P, _P, _P, _I,
                                                                       ctypes.POINTER(ctypes.c_size_t)], checked=False)
        status = raw(self.handle, self.x_desc, self.w_desc, self.conv_desc, self.y_desc, value, ctypes.byref(size))
        self._ws_sizes[value] = int(size.value) if status == STATUS_SUCCESS else None
        return self._ws_sizes[value]

    # -- the API -----------------------------------------------------------------------------------
    def find(self, x, w, y) -> list[AlgoResult]:
        """cudnnFindConvolutionForwardAlgorithmEx over all algorithms, with a workspace as large as the
        largest supported algorithm needs (capped by workspace_limit_bytes). Overwrites y."""
        self._check_tensors(x, w, y)
        self._bind_stream()
        sizes = [self.workspace_size(v) for v in range(FWD_ALGO_COUNT)]
        ws_bytes = max([s for s in sizes if s is not None and s <= self.workspace_limit_bytes], default=0)
        ws = self._workspace_ptr(ws_bytes)
        perf = (ConvFwdAlgoPerf * FWD_ALGO_COUNT)()
        returned = _I()
        self._set_math(self.math_type)
        self.lib.fn("cudnnFindConvolutionForwardAlgorithmEx",
                    [_P, _P, _P, _P, _P, _P, _P, _P, _I, ctypes.POINTER(_I), ctypes.POINTER(ConvFwdAlgoPerf),
                     _P, ctypes.c_size_t])(
            self.handle, self.x_desc, _P(x.data_ptr()), self.w_desc, _P(w.data_ptr()), self.conv_desc,
            self.y_desc, _P(y.data_ptr()), FWD_ALGO_COUNT, ctypes.byref(returned), perf, ws, ws_bytes)
        self._torch.cuda.synchronize()
        results = []
        for p in perf[:returned.value]:
            ok = p.status == STATUS_SUCCESS
            res = AlgoResult(algo_name(p.algo), self.lib.error_string(p.status),
                             float(p.time) if ok else math.nan, int(p.memory),
                             MATH_TYPE_NAMES.get(p.mathType, str(p.mathType)), ok)
            results.append(res)
            if ok:
                self._found[p.algo] = res
        return results

    def forward(self, x, w, y, algo: str | int) -> None:
        """y = conv(x, w) with the named algorithm (enqueued on torch's current stream). The math type is
        the one Find reported for that algorithm when find() ran, else this object's math mode."""
        value = algo_value(algo) if isinstance(algo, str) else int(algo)
        self._check_tensors(x, w, y)
        found = self._found.get(value)
        self._set_math(MATH_TYPES.get(found.math_type, self.math_type) if found else self.math_type)
        ws_bytes = self.workspace_size(value)
        if ws_bytes is None:
            raise CudnnError(f"{algo_name(value)} is not supported for x{self.shape_x} w{self.shape_w} "
                             "(cudnnGetConvolutionForwardWorkspaceSize failed)")
        ws = self._workspace_ptr(ws_bytes)
        self._bind_stream()
        alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        self.lib.fn("cudnnConvolutionForward", [_P, _P, _P, _P, _P, _P, _P, _I, _P, ctypes.c_size_t, _P, _P, _P])(
            self.handle, ctypes.byref(alpha), self.x_desc, _P(x.data_ptr()), self.w_desc, _P(w.data_ptr()),
            self.conv_desc, value, ws, ws_bytes, ctypes.byref(beta), self.y_desc, _P(y.data_ptr()))

    def close(self) -> None:
        if getattr(self, "lib", None) is None:
            return
        lib, self.lib = self.lib, None
        for fn, desc in (("cudnnDestroyTensorDescriptor", self.x_desc), ("cudnnDestroyTensorDescriptor", self.y_desc),
                         ("cudnnDestroyFilterDescriptor", self.w_desc),
                         ("cudnnDestroyConvolutionDescriptor", self.conv_desc), ("cudnnDestroy", self.handle)):
            if desc.value:
                lib.fn(fn, [_P])(desc)
        self._workspace = None

    def __enter__(self) -> "CudnnConv":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def tf32_override() -> str | None:
    """NVIDIA_TF32_OVERRIDE as set in the environment (0 disables TF32 everywhere), for the metadata."""
    return os.environ.get("NVIDIA_TF32_OVERRIDE")
