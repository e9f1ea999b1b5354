"""A ``torch.nn.Conv2d`` drop-in whose forward runs megasim's Winograd kernels, and ``convert(model)``.

    from gpu.torch_conv import WinogradConv2d, convert
    model = convert(torchvision.models.resnet50().cuda())     # every eligible nn.Conv2d swapped in place
    y = model(x)                                              # forward: our kernels; backward: torch's

**Forward.** A ``WinogradConv2d`` is an ``nn.Conv2d`` (same parameters, state dict and repr). Its forward
takes NCHW float32 CUDA tensors (contiguous, or channels_last: NHWC in memory) and runs the prepared
convolution of the input's shape (``gpu.prepared_conv.prepare_conv2d``: the implementation and mapping the
model chooses for this GPU, made once per shape and cached) on torch's current stream, reading the input
and writing the output through their device pointers: no copy, no host synchronisation. A contiguous
NCHW input runs the non-fused schedule whose transforms read and write NCHW themselves (the layout change
costs no pass of its own); a channels_last input runs on the NHWC kernels, fused or not, and gives a
channels_last output. The bias, when there is one, is added by torch after the convolution. After the
first call on an input of a given (shape, strides, dtype, device), a call without autograd takes a short
path: one dict lookup, the weight checked, the output allocated (a new tensor every call), and the
prepared convolution's ``launcher`` called with the three device pointers (``gpu.prepared_conv``), which
replays its kernels as one CUDA graph where these pointers have been seen before.

**Backward.** Gradients go through torch's own convolution backward
(``torch.ops.aten.convolution_backward``, cuDNN): the forward is ours, the gradients with respect to input,
weight and bias are exactly what ``nn.Conv2d`` would compute at the same input and weight. So a converted
model trains as the original does.

**Fallback.** Anything the kernels do not run goes to ``nn.Conv2d.forward`` unchanged: a CPU tensor, a
dtype other than float32, a layout other than the two above, an empty input (N, C, H or W of 0: torch
returns an empty output for N=0 and raises its own error otherwise) or one whose padded height or width is
smaller than the 3x3 filter (torch raises its own error), and any module ``convert`` would not have
swapped. An input the kernels would run but whose channels are not the module's ``in_channels`` is refused
in one line (``KernelInputError``, naming the input's shape). ``eligible(conv)`` says which modules qualify: 3x3, stride 1, dilation 1, groups 1, symmetric
zero padding, float32 parameters.

Under Numba's CUDA simulator (the CI), the forward runs the kernels on CPU tensors instead, so the tests
exercise the module end to end without a GPU.
"""

from __future__ import annotations

import torch
from numba import config
from torch import nn

from gpu.errors import KernelInputError
from gpu.prepared_conv import prepare_conv2d
from megasim.algorithms.winograd.choice import DEFAULT_MAX_REL_ERR
from megasim.workloads.problem import ConvProblem


def eligible(conv: nn.Module) -> bool:
    """Whether ``conv`` is an nn.Conv2d the Winograd kernels can run (module docstring)."""
    if not isinstance(conv, nn.Conv2d):
        return False
    pad = conv.padding
    return (tuple(conv.kernel_size) == (3, 3) and tuple(conv.stride) == (1, 1) and tuple(conv.dilation) == (1, 1)
            and conv.groups == 1 and conv.padding_mode == "zeros" and not isinstance(pad, str)
            and pad[0] == pad[1] and conv.weight.dtype == torch.float32)


class _WinogradFunction(torch.autograd.Function):
    """Forward by a prepared convolution; backward by torch's convolution backward."""

    @staticmethod
    def forward(ctx, x, weight, run):
        ctx.save_for_backward(x, weight)
        ctx.padding = run.problem.padding
        return run(x, weight.detach(), stream=_stream())

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        grad_x, grad_w, _ = torch.ops.aten.convolution_backward(
            grad_out, x, weight, None, (1, 1), (ctx.padding, ctx.padding), (1, 1), False, (0, 0), 1,
            (ctx.needs_input_grad[0], ctx.needs_input_grad[1], False))
        return grad_x, grad_w, None


_F32 = torch.float32
_grad_enabled = torch.is_grad_enabled
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_current_device = getattr(torch._C, "_cuda_getDevice", None)


def _stream():
    if config.ENABLE_CUDASIM:
        return None
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)    # the handle without a Stream object
    return raw(torch.cuda.current_device()) if raw is not None else torch.cuda.current_stream().cuda_stream


class WinogradConv2d(nn.Conv2d):
    """An nn.Conv2d whose forward runs megasim's Winograd kernels where it can (module docstring).

    ``max_rel_err``: the largest measured FP32 error of a tile the model may choose (default
    ``megasim.algorithms.winograd.choice.DEFAULT_MAX_REL_ERR``); ``plan``: a megasim Plan that overrides the
    model's choice for every shape; ``cache_path``: where choices are kept (default ~/.cache/megasim)."""

    def __init__(self, *args, max_rel_err: float = DEFAULT_MAX_REL_ERR, plan=None, cache_path=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.max_rel_err, self.plan, self.cache_path = max_rel_err, plan, cache_path
        self._runs: dict = {}
        self._fast: dict = {}     # (shape, strides, dtype, device index) -> what forward's short path needs
        if not eligible(self):
            raise KernelInputError(f"{self!r} is not eligible for the Winograd kernels (3x3, stride 1, dilation 1, groups 1, "
                             "symmetric zero padding, float32)")

    @classmethod
    def from_conv(cls, conv: nn.Conv2d, **options) -> "WinogradConv2d":
        """A WinogradConv2d sharing ``conv``'s parameters (the same tensors, not copies)."""
        new = cls(conv.in_channels, conv.out_channels, 3, stride=1, padding=conv.padding, dilation=1, groups=1,
                  bias=conv.bias is not None, padding_mode="zeros", device="meta", **options)
        new.weight = conv.weight
        new.bias = conv.bias
        new.train(conv.training)
        return new

    def _layout(self, x: torch.Tensor) -> str | None:
        if x.dim() != 4 or x.dtype != torch.float32 or (not x.is_cuda and not config.ENABLE_CUDASIM):
            return None
        if x.is_contiguous():
            return "NCHW"
        if x.is_contiguous(memory_format=torch.channels_last):
            return "NHWC"
        return None

    def prepared(self, x: torch.Tensor):
        """The prepared convolution this module runs for input ``x`` (None: it falls back to nn.Conv2d)."""
        layout = self._layout(x)
        if layout is None or self.weight.dtype != torch.float32 or self.weight.device != x.device:
            return None
        key = (x.shape, layout, x.device)
        run = self._runs.get(key)
        if run is None:             # a shape not seen before: checked once, then prepared
            pad = self.padding[0]
            if x.numel() == 0 or x.shape[2] + 2 * pad < 3 or x.shape[3] + 2 * pad < 3:
                return None         # torch's answer: an empty output (N=0) or its own error
            if x.shape[1] != self.in_channels:
                raise KernelInputError(f"x has shape {tuple(x.shape)} (N, C, H, W): C={x.shape[1]} is not allowed: "
                                       f"this module takes in_channels={self.in_channels}")
            n, c, h, w = x.shape
            problem = ConvProblem(n, c, self.out_channels, h, w, padding=self.padding[0])
            run = self._runs[key] = prepare_conv2d(problem, self.plan, layout=layout, max_rel_err=self.max_rel_err,
                                                   cache_path=self.cache_path)
        return run

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        params = self._parameters
        w = params["weight"]
        fast = self._fast.get((x.shape, x.stride(), x.dtype, x.get_device()))
        if (fast is not None and not (_grad_enabled() and (x.requires_grad or w.requires_grad))
                and w.dtype is _F32 and w.is_contiguous() and w.get_device() == fast[4] and w.shape == fast[5]):
            # an input of a shape, layout and device seen before, no autograd: one lookup, then the launches
            launch, shape, fmt, device, index, _ = fast
            # a new output every call; x.new_empty (x's float32 and device) costs the host less than torch.empty
            y = x.new_empty(shape) if fmt is None else torch.empty(shape, dtype=_F32, device=device, memory_format=fmt)
            launch(x.data_ptr(), w.data_ptr(), y.data_ptr(), w, _raw_stream(_current_device()))
            b = params["bias"]
            if b is not None:
                y = y + b.view(1, -1, 1, 1)
            return y
        return self._forward(x)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        run = self.prepared(x)
        if run is None:
            return super().forward(x)
        weight = self.weight if self.weight.is_contiguous() else self.weight.contiguous()
        if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
            y = _WinogradFunction.apply(x, weight, run)
        elif run.ready and not config.ENABLE_CUDASIM and weight.shape == run.filter_shape:   # x checked by prepared()
            y = run.new_output(x)
            run.enqueue((x.data_ptr(), weight.data_ptr(), y.data_ptr()), weight, _stream())
        else:
            y = run(x, weight, stream=_stream())
        launcher = run.launcher
        if launcher is not None and _raw_stream is not None and _current_device is not None:       # later calls on this key take forward's short path
            fmt = None if run.layout == "NCHW" else torch.channels_last      # None: contiguous, the default
            self._fast[(x.shape, x.stride(), x.dtype, x.get_device())] = (
                launcher, tuple(y.shape), fmt, x.device, x.get_device(), weight.shape)
        if self.bias is not None:
            y = y + self.bias.view(1, -1, 1, 1)
        return y


def convert(model: nn.Module, **options) -> nn.Module:
    """Swap every eligible nn.Conv2d of ``model`` (in place; the model is returned) for a WinogradConv2d
    sharing its parameters; other modules are left as they are. ``options`` go to each WinogradConv2d."""
    if not isinstance(model, nn.Module):
        raise KernelInputError(f"model {model!r:.60} (a {type(model).__name__}) is not allowed: give a torch.nn.Module")
    for name, child in list(model.named_children()):
        if type(child) is nn.Conv2d and eligible(child):
            setattr(model, name, WinogradConv2d.from_conv(child, **options))
        else:
            convert(child, **options)
    return model


def count_convs(model: nn.Module) -> tuple[int, int]:
    """(WinogradConv2d modules, all nn.Conv2d modules) of ``model``."""
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    return sum(isinstance(m, WinogradConv2d) for m in convs), len(convs)
