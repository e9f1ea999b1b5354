"""One launch each of the NHWC output transform, the NCHW one (``otrans_kernels`` modes) and the NCHW input
transform of one layer, for Nsight Compute (the launches are named by their kernels):

    bash gpu/on_device.sh ncu --cache-control all --clock-control none --metrics METRICS --csv \\
        python3 -m experiments.studies.nchw_transforms.profile_otrans --layer yolov3-1 --modes default nostore
"""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", default="yolov3-1")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--modes", nargs="+", default=["default", "nostore", "noload"])
    ap.add_argument("--choices", default="experiments/results/nvidia-h200/winograd_choices.json")
    args = ap.parse_args(argv)
    import torch
    from numba import cuda

    from experiments.studies.nchw_transforms import otrans_kernels as ok
    from gpu.kernels.winograd import device as dev
    from gpu.kernels.winograd import nchw
    from gpu.prepared_conv import choose_plan
    from gpu.runtime.execute import PreparedRun
    from megasim.plan import build
    from megasim.workloads.catalogue import parse_layer

    p = parse_layer(args.layer, batch=args.batch)
    plan = choose_plan(p, layout="NCHW", cache_path=args.choices).plan
    m = plan.params.tile
    graph, schedule, bplan = build(p, plan)
    run = PreparedRun(p, bplan, graph, schedule)
    a2, tiles = (m + 2) ** 2, run.state.plan.shape.tiles
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(p.n, p.c, p.h, p.w, device="cuda", generator=gen)
    M = torch.randn(a2, tiles, p.k, device="cuda", generator=gen)
    Y = torch.empty(p.n, p.k, p.out_h, p.out_w, device="cuda")
    V = torch.empty(a2, tiles, p.c, device="cuda")
    w = cuda.as_cuda_array(torch.randn(p.k, p.c, 3, 3, device="cuda", generator=gen))
    ws = run.workspace(cuda.as_cuda_array(x.permute(0, 2, 3, 1).contiguous()), w)
    torch.as_tensor(ws.M, device="cuda").copy_(M)
    for kind in (dev.OTRANS, dev.ITRANS):
        pl = next(pl for pl in run.launches if getattr(pl, "kind", None) == kind)
        pl.steps(ws)[0][0]()
    _, _, _, kc, tx = nchw.otrans_launch(p, m)
    blocks = nchw._blocks(p, m, p.k, kc, tx)
    for mode in args.modes:
        kern = ok.otrans_variant(m, mode)
        kern[blocks, kc * tx, 0, 4 * kc * nchw.otrans_plane(m, tx)](run.state.d_prm, cuda.as_cuda_array(M),
                                                                    cuda.as_cuda_array(Y), kc, tx)
    bi, ti, si, cc, txi = nchw.itrans_launch(p, m)
    nchw.nchw_kernels_for(m)[0][bi, ti, 0, si](run.state.d_prm, cuda.as_cuda_array(x), cuda.as_cuda_array(V), cc, txi)
    torch.cuda.synchronize()
    print("launched:", ["nhwc otrans", "nhwc itrans"] + args.modes + ["nchw itrans"], file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
