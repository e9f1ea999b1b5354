"""Whole networks on the GPU (the paper's Fig. 11, measured): VGG-16, ResNet-50, YOLOv3 and DenseNet-161,
forward at batch 64, converted (``gpu.torch_conv.convert``: every 3x3, stride-1 convolution on megasim's
Winograd kernels, the model's choice per shape) against the same network on torch's cuDNN, end to end.

Per network (``experiments.networks``, random initialisation, eval mode, FP32, TF32 off, cuDNN benchmark
mode on, NCHW input):
- ``torch_cudnn_ms`` / ``ours_ms``: forward under ``torch.no_grad()``, CUDA events, median of ``--repeats``
  after ``--warmup``; the converted network is a deep copy of the same weights;
- ``rel_err``: normwise error of the converted network's output against the cuDNN network's (all outputs
  concatenated);
- ``predicted_ms``: the model's prediction of the replaced convolutions (the sum over converted modules of
  their choice's predicted time: the model predicts convolutions, not the batch norms, activations,
  pooling and concatenations between them); beside it ``ours_convs_ms`` and ``cudnn_convs_ms``, the same
  convolutions measured inside the forward (CUDA events around each module, one extra pass);
- ``convs_replaced`` / ``convs_total``: eligible and all nn.Conv2d modules.

Then a converted ResNet-50 trains ``--train-steps`` SGD steps (batch 16, momentum 0.9, lr 1e-3, fixed
random data) beside an unconverted copy: the largest relative difference of their losses is reported,
with that between two unconverted copies on different cuDNN algorithms as the noise floor.

Writes ``DIR/networks_gpu.csv`` (network, batch, ours_ms, torch_cudnn_ms, predicted_ms, convs_replaced,
convs_total, rel_err, ours_convs_ms, cudnn_convs_ms, speedup) and ``DIR/networks_gpu.json`` (rows, the
training losses, device, versions, git SHA, date).

    bash gpu/on_device.sh python3 -m experiments.benchmarks.networks_gpu --choices CHOICES.json [--out DIR]
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

from experiments.benchmarks.conv2d_user_path import REPO, device_dir, fp32_flags
from experiments.networks import INPUT_SIZE, NETWORKS, build_network
from experiments.provenance import provenance, write_results

NAME = "networks_gpu"
LR = 1e-3


def _flat(torch, out):
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return torch.cat([o.reshape(-1) for o in outs])


def conv_time_ms(torch, model, x, which) -> float:
    """Summed device time of the modules ``which(module)`` selects in one forward (CUDA events around each)."""
    events = []
    hooks = []
    for m in model.modules():
        if which(m):
            def pre(mod, inp):
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                events.append([e, None])

            def post(mod, inp, out):
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                events[-1][1] = e
            hooks += [m.register_forward_pre_hook(pre), m.register_forward_hook(post)]
    with torch.no_grad():
        model(x)
    torch.cuda.synchronize()
    for h in hooks:
        h.remove()
    return sum(a.elapsed_time(b) for a, b in events)


def bench_network(torch, name: str, batch: int, args) -> dict:
    from gpu.runtime.timing import time_cuda
    from gpu.torch_conv import WinogradConv2d, convert, count_convs, eligible
    torch.manual_seed(0)
    model = build_network(name).cuda().eval()
    size = INPUT_SIZE[name]
    x = torch.randn(batch, 3, size, size, device="cuda")
    ours = convert(copy.deepcopy(model), cache_path=args.choices)
    replaced, total = count_convs(ours)
    with torch.no_grad():
        ref = _flat(torch, model(x))
        out = _flat(torch, ours(x))
        err = float(torch.linalg.norm(out.double() - ref.double()) / torch.linalg.norm(ref.double()))
        del ref, out
        t_cudnn = time_cuda(lambda i: model(x), warmup=args.warmup, repeats=args.repeats)
        t_ours = time_cuda(lambda i: ours(x), warmup=args.warmup, repeats=args.repeats)
    predicted_us = sum(run.choice.predicted_us for m in ours.modules() if isinstance(m, WinogradConv2d)
                       for run in m._runs.values() if run.choice is not None)
    cudnn_convs = conv_time_ms(torch, model, x, lambda m: type(m) is torch.nn.Conv2d and eligible(m))
    ours_convs = conv_time_ms(torch, ours, x, lambda m: isinstance(m, WinogradConv2d))
    row = {"network": name, "batch": batch, "ours_ms": round(t_ours.median_ms, 3),
           "torch_cudnn_ms": round(t_cudnn.median_ms, 3), "predicted_ms": round(predicted_us / 1e3, 3),
           "convs_replaced": replaced, "convs_total": total, "rel_err": f"{err:.3g}",
           "ours_convs_ms": round(ours_convs, 3), "cudnn_convs_ms": round(cudnn_convs, 3),
           "speedup": round(t_cudnn.median_ms / t_ours.median_ms, 4)}
    del model, ours, x
    torch.cuda.empty_cache()
    return row


def train_check(torch, steps: int, args) -> dict:
    """Losses of a converted and an unconverted ResNet-50 over ``steps`` identical SGD steps, and, as the
    noise floor, of a second unconverted copy with cuDNN's benchmark mode off (other cuDNN algorithms, the
    same maths): training amplifies any rounding difference, so the converted model's distance from the
    unconverted one is read against that of two cuDNN runs."""
    from gpu.torch_conv import convert
    torch.manual_seed(1)
    plain = build_network("resnet50").cuda().train()
    other = copy.deepcopy(plain)
    ours = convert(copy.deepcopy(plain), cache_path=args.choices)
    gen = torch.Generator(device="cuda").manual_seed(2)
    data = [(torch.randn(16, 3, 224, 224, device="cuda", generator=gen),
             torch.randint(0, 1000, (16,), device="cuda", generator=gen)) for _ in range(steps)]
    losses = {}
    for label, model in (("cudnn", plain), ("ours", ours), ("cudnn_benchmark_off", other)):
        torch.backends.cudnn.benchmark = label != "cudnn_benchmark_off"
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
        losses[label] = []
        for x, y in data:
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses[label].append(float(loss.detach()))
    torch.backends.cudnn.benchmark = True

    def diff(a: str, b: str) -> float:
        return max(abs(u - v) / abs(v) for u, v in zip(losses[a], losses[b]))
    return {"steps": steps, "batch": 16, "lr": LR, "momentum": 0.9, "losses": losses,
            "max_rel_loss_diff": diff("ours", "cudnn"), "cudnn_noise_max_rel_loss_diff": diff("cudnn_benchmark_off", "cudnn")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--networks", nargs="+", default=list(NETWORKS), choices=NETWORKS)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--train-steps", type=int, default=5)
    ap.add_argument("--choices", default=None, help="choice cache (JSON) to read and extend")
    ap.add_argument("--out", default=None, help="results folder (default experiments/results/<device>/)")
    args = ap.parse_args(argv)
    if args.batch < 1 or args.repeats < 1 or args.train_steps < 0:
        ap.error("--batch and --repeats must be >= 1, --train-steps >= 0")
    import torch
    from numba import cuda

    from experiments.benchmarks.winograd_bench import device_meta
    flags = fp32_flags(torch)
    dmeta = device_meta(torch, cuda)
    out = Path(args.out) if args.out else REPO / "experiments" / "results" / device_dir(dmeta["device"])
    rows = []
    for name in args.networks:
        rows.append(bench_network(torch, name, args.batch, args))
        print(rows[-1], file=sys.stderr, flush=True)
    training = train_check(torch, args.train_steps, args) if args.train_steps else None
    write_results(rows, out, NAME, provenance({"device": dmeta, "torch_flags": flags, "training": training,
                                               "choices_file": args.choices}))
    for r in rows:
        print(f"{r['network']:<12} ours {r['ours_ms']:9.3f} ms  cuDNN {r['torch_cudnn_ms']:9.3f} ms  "
              f"x{r['speedup']:.3f}  predicted convs {r['predicted_ms']:8.3f} ms  measured convs "
              f"{r['ours_convs_ms']:8.3f} (cuDNN {r['cudnn_convs_ms']:8.3f})  {r['convs_replaced']}/{r['convs_total']}  "
              f"err {r['rel_err']}")
    if training:
        print(f"training: {training}")
    print(f"wrote {out / (NAME + '.csv')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
