"""The NCHW Winograd transforms (``gpu.kernels.winograd.nchw``) against the NHWC ones the benchmark harness
runs, per launch, with their memory floors; variants of the NCHW kernels side by side.

Per layer (default: the 13 Table-2 layers, batch 64, FP32; the tile is the model's choice for NCHW from
``--choices``):
- ``floor_*_ms``: the launch's compulsory DRAM bytes (otrans: M read and Y written; itrans: x read and V
  written) at ``COPY_TBPS`` (the H200's measured device-to-device copy, shared/DEVICE.md);
- ``nhwc_*_ms``: the harness's non-fused NHWC kernel of the same plan (``gpu.runtime.execute.PreparedRun``);
- one column per NCHW variant (``VARIANTS``: the otrans kernel's build, i.e. ``nchw_kernels_for``'s opaque
  strides and register cap, and the block size, ``threads`` or the runtime's rule; the itrans
  kernel's block size), with its registers per thread, its block (channels x tiles) and its normwise error
  against a float64 transform of the same input (otrans: Y = A^T M A per tile; itrans: V = B^T d B per tile,
  from the padded input).
Each time is the median over ``--repeats`` launches (CUDA events around each, after ``--warmup``), inputs
rotated over up to 3 sets so that no launch finds its operands in L2; M, x are fresh standard-normal data.

Writes ``DIR/NAME.csv`` and ``.json`` (``--name``, default ``nchw_transforms``: rows, device, versions, git
SHA, date); DIR defaults to ``experiments/results/<device>/``. About a minute on an H200 for the 13 layers,
most of it compiling the kernels. The variants measured, with this script at the commits in their files'
metadata (experiments/results/nvidia-h200/nchw_transforms/): set1.csv (d5799c0: opaque strides, a cap of
80, 256-thread blocks), set2.csv (03ca03f: caps 80 and 64, channel chunks of 64, 256-thread blocks with
opted-in shared memory) and final.csv (3b913a2, three layers; its JSON did not come back from the device:
H200, 2026-11-28): there ``default`` was the build with an L2 prefetch of M, since removed (slower).

``--set experiments`` (``bench_experiments``) times instead, one row per launch, the output transform's
experimental builds (``otrans_kernels``' modes: phases apart, cache hints, M staged in shared memory, a loop
over strips, register caps, the store loop before it was made lean) at the runtime's geometry, the runtime
build at other geometries (``_geometries``), and the input transform at those geometries.
experiments/results/nvidia-h200/nchw_transforms/experiments.csv holds five such runs (column ``run``: exp1,
exp2, exp3 at 5a2c7e4, e45827b and 43939c0; lean_copies at 1b18811, aligned_vgg1 at 0297659), their metadata
experiments.json; ``profile_otrans`` launches them once each for Nsight Compute (ncu_yolov3_1.csv).

``--set rows`` (``bench_rows``) times, one row per layer, the runtime kernel at its rule against
``otrans_kernels.rows_kernel`` (one whole tile row a block, each channel's rows stored as one contiguous run in
128-byte-aligned warp windows) at whole-row geometries (``_rows_variants``), with the NHWC launch and the
floor: experiments/results/nvidia-h200/nchw_transforms/rows_set.csv (926534e, 8 F(7x7) layers) and
experiments/results/nvidia-h200/nchw_transforms/rows_set_7fbb339.csv (the first build, with divisions, in the
runtime kernel at 7fbb339: columns ``prev`` the kernel before it, ``strips``, ``rule``, ``rows*``; 19 layers).
experiments/results/nvidia-h200/nchw_transforms/rows_linear.csv (8121118, ``--variants runtime linear256 linear128
linear_big linearF256 linearF128 linearF_big``: ``otrans_kernels.linear_kernel`` and its ``full_branch`` build
against the runtime kernel, before its whole-row strips). The experiments set on one layer with ``--modes
default`` times the runtime kernel at other launches: itrans_conv8.csv (8121118, im2win/conv8, where the runtime
then took 16 x 8 strips) and otrans_conv9.csv (a61529b, im2win/conv9, at the whole-row strips).

    bash gpu/on_device.sh python3 -m experiments.studies.nchw_transforms.nchw_variants --choices CHOICES.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from experiments.provenance import provenance, write_results

NAME = "nchw_transforms"
REPO = Path(__file__).resolve().parents[3]
COPY_TBPS = 4.2
ROWS_BIG_SHARED = 100 * 1024      # the rows set's opted-in shared memory (bench_rows: rows_big)
# name -> (the otrans kernel's build: opaque strides in its product, register cap; threads per block, None: the
# runtime's rule, ``gpu.kernels.winograd.nchw._pick``)
VARIANTS = {
    "base": ((False, None), 128),               # the kernel before the opaque strides and the cap
    "cap80": ((True, 80), 128),
    "default": ((True, 80), None),              # what the runtime runs (nchw_kernels_for's defaults)
}
# the itrans kernel has one build: its variants are the block geometry
ITRANS_VARIANTS = {"base": 128, "default": None}


def median_launch_ms(torch, launches: list, warmup: int, repeats: int) -> float:
    """Median ms of ``launches[r % len(launches)]()`` between CUDA events around each call."""
    stream = torch.cuda.current_stream()
    pairs = []
    for r in range(warmup + repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(stream)
        launches[r % len(launches)]()
        b.record(stream)
        if r >= warmup:
            pairs.append((a, b))
    stream.synchronize()
    return round(statistics.median(a.elapsed_time(b) for a, b in pairs), 4)


def otrans_reference(torch, M, p, m: int):
    """Y (N, K, P, Q) in float64 from M (alpha^2, tiles, K): A^T M A per tile, cropped to P x Q."""
    from megasim.algorithms.winograd.winograd_math import matrices
    a = m + 2
    ty, tx = -(-p.out_h // m), -(-p.out_w // m)
    at = torch.as_tensor(matrices(m)[2], device=M.device)
    mt = M.double().view(a, a, p.n, ty, tx, p.k)
    y = torch.einsum("ia,jb,abnyxk->nkyixj", at, at, mt).reshape(p.n, p.k, ty * m, tx * m)
    return y[:, :, :p.out_h, :p.out_w]


def itrans_reference(torch, x, p, m: int):
    """V (alpha^2, tiles, C) in float64 from x (N, C, H, W): B^T d B per tile of the zero-padded input."""
    from megasim.algorithms.winograd.winograd_math import matrices
    a = m + 2
    ty, tx = -(-p.out_h // m), -(-p.out_w // m)
    bt = torch.as_tensor(matrices(m)[0], device=x.device)
    right, bottom = max(0, tx * m + 2 - p.w - p.padding), max(0, ty * m + 2 - p.h - p.padding)
    xp = torch.nn.functional.pad(x.double(), (p.padding, right, p.padding, bottom))
    d = xp.unfold(2, a, m).unfold(3, a, m)[:, :, :ty, :tx]          # (N, C, ty, tx, a, a)
    v = torch.einsum("ia,jb,ncyxab->ijnyxc", bt, bt, d)
    return v.reshape(a * a, p.n * ty * tx, p.c)


def _rel(torch, got, ref) -> float:
    return float(torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref))


def _regs(dispatcher):
    try:
        r = dispatcher.get_regs_per_thread()
    except Exception:  # noqa: BLE001 - a numba-cuda without the query: leave it out
        return None
    return next(iter(r.values())) if isinstance(r, dict) else r


def _time_variant(torch, row: dict, prefix: str, kernel, geometry, d_prm, sources, outputs, ref, args) -> None:
    """One transform build on every rotation set (``sources[i]`` -> ``outputs[i]``): its error against
    ``ref`` on the first set (the output filled with NaN first), its median launch time, registers and
    block shape, into ``row`` under ``prefix``."""
    from numba import cuda

    from gpu.runtime.fast_launch import FrozenLaunch
    blocks, threads, shared, chunk, tx = geometry
    launches = [FrozenLaunch(kernel, blocks, threads, shared, (d_prm, cuda.as_cuda_array(src), cuda.as_cuda_array(out),
                                                               chunk, tx))
                for src, out in zip(sources, outputs)]
    outputs[0].fill_(float("nan"))
    launches[0]()
    torch.cuda.synchronize()
    row[f"{prefix}_rel_err"] = f"{_rel(torch, outputs[0], ref):.3g}"
    row[f"{prefix}_ms"] = median_launch_ms(torch, launches, args.warmup, args.repeats)
    row[f"{prefix}_regs"] = _regs(kernel)
    row[f"{prefix}_block"] = f"{chunk}x{tx}"


def bench_layer(torch, name: str, batch: int, args) -> dict:
    from numba import cuda

    from gpu.kernels.winograd import device as dev
    from gpu.kernels.winograd import nchw
    from gpu.prepared_conv import choose_plan
    from gpu.runtime.execute import PreparedRun
    from gpu.runtime.timing import rotation_sets
    from megasim.plan import build
    from megasim.workloads.catalogue import parse_layer

    p = parse_layer(name, batch=batch)
    plan = choose_plan(p, layout="NCHW", cache_path=args.choices).plan
    m = plan.params.tile
    graph, schedule, bplan = build(p, plan)
    run = PreparedRun(p, bplan, graph, schedule)          # NHWC: the harness's kernels
    a2, tiles = (m + 2) ** 2, run.state.plan.shape.tiles
    x_bytes, y_bytes = 4 * p.n * p.c * p.h * p.w, 4 * p.n * p.k * p.out_h * p.out_w
    v_bytes, m_bytes = 4 * a2 * tiles * p.c, 4 * a2 * tiles * p.k
    free, _ = torch.cuda.mem_get_info()
    sets = rotation_sets(2 * (x_bytes + y_bytes + v_bytes + m_bytes), free, wanted=3)
    gen = torch.Generator(device="cuda").manual_seed(7)
    xs = [torch.randn(p.n, p.c, p.h, p.w, device="cuda", generator=gen) for _ in range(sets)]
    Ms = [torch.randn(a2, tiles, p.k, device="cuda", generator=gen) for _ in range(sets)]
    Vs = [torch.empty(a2, tiles, p.c, device="cuda") for _ in range(sets)]
    Ys = [torch.empty(p.n, p.k, p.out_h, p.out_w, device="cuda") for _ in range(sets)]
    w = cuda.as_cuda_array(torch.randn(p.k, p.c, 3, 3, device="cuda", generator=gen))
    row = {"layer": name, "tile": m, "tiles": tiles, "otrans_mb": round((m_bytes + y_bytes) / 1e6, 1),
           "itrans_mb": round((x_bytes + v_bytes) / 1e6, 1),
           "floor_otrans_ms": round((m_bytes + y_bytes) / COPY_TBPS / 1e9, 4),
           "floor_itrans_ms": round((x_bytes + v_bytes) / COPY_TBPS / 1e9, 4)}
    # the harness's NHWC launches on workspaces whose M (and x) are the same random data
    wss = []
    for i in range(sets):
        ws = run.workspace(cuda.as_cuda_array(xs[i].permute(0, 2, 3, 1).contiguous()), w)
        torch.as_tensor(ws.M, device="cuda").copy_(Ms[i])
        wss.append(ws)
    for kind, label in ((dev.OTRANS, "otrans"), (dev.ITRANS, "itrans")):
        pl = next(pl for pl in run.launches if getattr(pl, "kind", None) == kind)
        steps = [pl.steps(ws)[0][0] for ws in wss]
        row[f"nhwc_{label}_ms"] = median_launch_ms(torch, steps, args.warmup, args.repeats)
    del wss
    d_prm = run.state.d_prm
    ref = otrans_reference(torch, Ms[0], p, m)
    for vname, (build_args, threads) in VARIANTS.items():
        _, otrans = nchw.nchw_kernels_for(m, *build_args)
        geometry = nchw.otrans_launch(p, m, threads)
        _time_variant(torch, row, f"otrans_{vname}", otrans, geometry, d_prm, Ms, Ys, ref, args)
    del ref
    ref = itrans_reference(torch, xs[0], p, m)
    for vname, threads in ITRANS_VARIANTS.items():
        itrans, _ = nchw.nchw_kernels_for(m)
        geometry = nchw.itrans_launch(p, m, threads)
        _time_variant(torch, row, f"itrans_{vname}", itrans, geometry, d_prm, xs, Vs, ref, args)
    del ref, xs, Ms, Vs, Ys
    torch.cuda.empty_cache()
    return row


def _geometries(p, m: int, channels: int, itrans: bool) -> dict:
    """name -> (CC or KC, TX) of the launches the experiments set compares: the runtime's rule (``default``),
    the 128-thread rule where it differs (``t128``), strips of the whole tile row with the widest power-of-two chunk of at least 8 channels in 128 or 256
    threads (``row128``, ``row256``), and for rows of more than 8 tiles strips of 8 tiles (sector-aligned
    row stores at F(7x7)) of 16 channels (``x8``)."""
    from gpu.kernels.winograd import nchw
    tiles_x = -(-p.out_w // m)
    g = (nchw.itrans_launch if itrans else nchw.otrans_launch)(p, m)
    out = {"default": (g[3], g[4])}
    for thr in (128, 256):
        chunk = min(nchw._pow2_at_least(channels), nchw._pow2_at_most(max(1, thr // tiles_x)))
        if chunk >= 8 and chunk * tiles_x <= thr and (chunk, tiles_x) not in out.values():
            out[f"row{thr}"] = (chunk, tiles_x)
    t128 = (nchw.itrans_launch if itrans else nchw.otrans_launch)(p, m, 128)[3:]
    if t128 not in out.values():
        out["t128"] = t128                      # the 128-thread rule alone (otrans: without _aligned_strips)
    if tiles_x > 8 and (16, 8) not in out.values():
        out["x8"] = (16, 8)
    if not itrans and channels >= 64 and (64, g[4]) not in out.values():
        out["k64"] = (64, g[4])                 # 64 channels of the runtime's strip (opted-in shared memory)
    return out


def bench_experiments(torch, name: str, batch: int, args) -> list[dict]:
    """The experiments set (``otrans_kernels``' modes at the runtime's geometry; the runtime build and the
    staged build at every ``_geometries`` launch; the itrans kernel at those launches): one row per launch."""
    from numba import cuda

    from experiments.studies.nchw_transforms import otrans_kernels as ok
    from gpu.calibrate.occupancy import _active_blocks, _opt_in
    from gpu.kernels.winograd import device as dev
    from gpu.kernels.winograd import nchw
    from gpu.prepared_conv import choose_plan
    from gpu.runtime.execute import PreparedRun
    from gpu.runtime.fast_launch import FrozenLaunch
    from gpu.runtime.timing import rotation_sets
    from megasim.plan import build
    from megasim.workloads.catalogue import parse_layer

    p = parse_layer(name, batch=batch)
    plan = choose_plan(p, layout="NCHW", cache_path=args.choices).plan
    m = plan.params.tile
    graph, schedule, bplan = build(p, plan)
    run = PreparedRun(p, bplan, graph, schedule)
    a2, tiles = (m + 2) ** 2, run.state.plan.shape.tiles
    x_bytes, y_bytes = 4 * p.n * p.c * p.h * p.w, 4 * p.n * p.k * p.out_h * p.out_w
    v_bytes, m_bytes = 4 * a2 * tiles * p.c, 4 * a2 * tiles * p.k
    free, _ = torch.cuda.mem_get_info()
    sets = rotation_sets(2 * (x_bytes + y_bytes + v_bytes + m_bytes) + 2 * y_bytes, free, wanted=3)
    gen = torch.Generator(device="cuda").manual_seed(7)
    xs = [torch.randn(p.n, p.c, p.h, p.w, device="cuda", generator=gen) for _ in range(sets)]
    Ms = [torch.randn(a2, tiles, p.k, device="cuda", generator=gen) for _ in range(sets)]
    Vs = [torch.empty(a2, tiles, p.c, device="cuda") for _ in range(sets)]
    Ys = [torch.empty(p.n, p.k, p.out_h, p.out_w, device="cuda") for _ in range(sets)]
    w = cuda.as_cuda_array(torch.randn(p.k, p.c, 3, 3, device="cuda", generator=gen))
    common = {"layer": name, "tile": m, "floor_otrans_ms": round((m_bytes + y_bytes) / COPY_TBPS / 1e9, 4),
              "floor_itrans_ms": round((x_bytes + v_bytes) / COPY_TBPS / 1e9, 4)}
    wss = []
    for i in range(sets):
        ws = run.workspace(cuda.as_cuda_array(xs[i].permute(0, 2, 3, 1).contiguous()), w)
        torch.as_tensor(ws.M, device="cuda").copy_(Ms[i])
        wss.append(ws)
    for kind, label in ((dev.OTRANS, "otrans"), (dev.ITRANS, "itrans")):
        pl = next(pl for pl in run.launches if getattr(pl, "kind", None) == kind)
        steps = [pl.steps(ws)[0][0] for ws in wss]
        common[f"nhwc_{label}_ms"] = median_launch_ms(torch, steps, args.warmup, args.repeats)
    del wss
    d_prm = run.state.d_prm
    rows = []

    def timed(kind, mode, gname, kernel, kc, tx, shared, sources, outputs, ref, grid=None):
        threads = kc * tx
        blocks = grid or nchw._blocks(p, m, p.k if kind == "otrans" else p.c, kc, tx)
        extra = (grid,) if grid else ()
        launches = [FrozenLaunch(kernel, blocks, threads, shared, (d_prm, cuda.as_cuda_array(src),
                                                                   cuda.as_cuda_array(out), kc, tx) + extra)
                    for src, out in zip(sources, outputs)]
        if shared > nchw.MAX_SHARED_BYTES:
            _opt_in(kernel, shared)
        row = dict(common, kind=kind, mode=mode, geometry=gname, block=f"{kc}x{tx}", grid=blocks, threads=threads,
                   shared=shared, regs=_regs(kernel), blocks_per_sm=_active_blocks(kernel, threads, shared))
        if ref is not None:
            outputs[0].fill_(float("nan"))
            launches[0]()
            torch.cuda.synchronize()
            row["rel_err"] = f"{_rel(torch, outputs[0], ref):.3g}"
        row["ms"] = median_launch_ms(torch, launches, args.warmup, args.repeats)
        row["vs_nhwc"] = round(row["ms"] / common[f"nhwc_{kind}_ms"], 3)
        rows.append(row)
        print(f"{name:<11} {kind} {mode:<8} {gname:<8} {row['block']:<6} regs {row['regs']} bps "
              f"{row['blocks_per_sm']} {row['ms']:.4f} ms ({row['vs_nhwc']:.3f}x nhwc {common[f'nhwc_{kind}_ms']:.4f}) "
              f"err {row.get('rel_err')}", file=sys.stderr, flush=True)

    ref = otrans_reference(torch, Ms[0], p, m)
    geos = _geometries(p, m, p.k, False)
    if args.geometries:
        geos = {k: v for k, v in geos.items() if k in args.geometries}
    for gname, (kc, tx) in geos.items():
        for mode in (ok.MODES if gname == "default" else ("default", "staged", "loop", "cap72", "cap88")):
            if mode not in args.modes:
                continue
            if mode == "loop":
                kernel = ok.otrans_variant(m, mode)
                total = ok.strips_total(p, m, kc, tx)
                shared = 4 * kc * nchw.otrans_plane(m, tx)
                for per in args.loop_strips:
                    grid = -(-total // per)
                    try:
                        timed("otrans", f"loop{per}", gname, kernel, kc, tx, shared, Ms, Ys, ref, grid)
                    except Exception as err:  # noqa: BLE001
                        print(f"{name} otrans loop{per} {gname}: {type(err).__name__}: {err}", file=sys.stderr,
                              flush=True)
                bps = max(1, _active_blocks(kernel, kc * tx, shared))
                for waves in args.loop_waves:
                    try:
                        timed("otrans", f"loopP{waves}", gname, kernel, kc, tx, shared, Ms, Ys, ref,
                              min(total, waves * bps * cuda.get_current_device().MULTIPROCESSOR_COUNT))
                    except Exception as err:  # noqa: BLE001
                        print(f"{name} otrans loopP{waves} {gname}: {type(err).__name__}: {err}", file=sys.stderr,
                              flush=True)
                continue
            kernel = ok.otrans_variant(m, mode)
            shared = ok.staged_shared(m, kc, tx) if mode == "staged" else 4 * kc * nchw.otrans_plane(m, tx)
            outs = Ys
            if mode == "dummy":
                outs = [torch.empty(nchw._blocks(p, m, p.k, kc, tx) * kc * m * tx * m, device="cuda")] * len(Ms)
            exact = mode in ("default", "stcs", "ldcs", "staged", "cap72", "cap88")
            try:
                timed("otrans", mode, gname, kernel, kc, tx, shared, Ms, outs, ref if exact else None)
            except Exception as err:  # noqa: BLE001 - one failed variant must not lose the run
                print(f"{name} otrans {mode} {gname}: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
            del outs
    del ref
    ref = itrans_reference(torch, xs[0], p, m)
    itrans, _ = nchw.nchw_kernels_for(m)
    for gname, (cc, tx) in _geometries(p, m, p.c, True).items():
        if args.geometries and gname not in args.geometries:
            continue
        shared = 4 * cc * (((m + 2) * (tx * m + 2)) | 1)
        try:
            timed("itrans", "default", gname, itrans, cc, tx, shared, xs, Vs, ref)
        except Exception as err:  # noqa: BLE001
            print(f"{name} itrans {gname}: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
    del ref, xs, Ms, Vs, Ys
    torch.cuda.empty_cache()
    return rows


def _rows_variants(p, m: int) -> dict:
    """name -> (kernel, launch geometry) of the rows set: the runtime kernel at its rule (``runtime``), and
    ``otrans_kernels.rows_kernel`` (whole tile rows, flat sector-aligned stores) at ``rows_geometry`` in blocks of
    256 and 128 threads (``rows256``, ``rows128``) and in 256 threads with up to ``ROWS_BIG_SHARED`` bytes of
    opted-in shared memory (``rows_big``: more channels a block where 48 KiB holds too few), and
    ``otrans_kernels.linear_kernel`` (the stage laid out as the output run) at the same launches
    (``linear256``, ``linear128``, ``linear_big``), and its ``full_branch`` build (``linearF256``,
    ``linearF128``, ``linearF_big``); a whole-row variant is left out where no whole row fits."""
    from experiments.studies.nchw_transforms import otrans_kernels as ok
    from gpu.kernels.winograd import nchw
    out = {"runtime": (nchw.nchw_kernels_for(m)[1], nchw.otrans_launch(p, m))}
    tiles_x = -(-p.out_w // m)
    for name, threads, shared in (("rows256", 256, nchw.MAX_SHARED_BYTES), ("rows128", 128, nchw.MAX_SHARED_BYTES),
                                  ("rows_big", 256, ROWS_BIG_SHARED)):
        g = ok.rows_geometry(p.k, m, tiles_x, threads, shared)
        if g is not None:
            chunk, tx = g
            blocks = nchw._blocks(p, m, p.k, chunk, tx)
            out[name] = (ok.rows_kernel(m), (blocks, chunk * tx, 4 * chunk * nchw.otrans_plane(m, tx), chunk, tx))
            lin = (blocks, chunk * tx, 4 * chunk * ok.linear_plane(m, p.out_w), chunk, tx)
            out[name.replace("rows", "linear")] = (ok.linear_kernel(m), lin)
            out[name.replace("rows", "linearF")] = (ok.linear_kernel(m, full_branch=True), lin)
    return out


def bench_rows(torch, name: str, batch: int, args) -> dict:
    """The rows set: one row per layer, the NHWC otrans launch and ``_rows_variants``' (time, error against
    float64, block, registers; a variant on the same kernel and geometry as one before it is not timed
    again)."""
    from numba import cuda

    from gpu.calibrate.occupancy import _opt_in
    from gpu.kernels.winograd import device as dev
    from gpu.kernels.winograd import nchw
    from gpu.prepared_conv import choose_plan
    from gpu.runtime.execute import PreparedRun
    from gpu.runtime.fast_launch import FrozenLaunch
    from gpu.runtime.timing import rotation_sets
    from megasim.plan import build
    from megasim.workloads.catalogue import parse_layer

    p = parse_layer(name, batch=batch)
    plan = choose_plan(p, layout="NCHW", cache_path=args.choices).plan
    m = plan.params.tile
    graph, schedule, bplan = build(p, plan)
    run = PreparedRun(p, bplan, graph, schedule)
    a2, tiles = (m + 2) ** 2, run.state.plan.shape.tiles
    x_bytes, y_bytes = 4 * p.n * p.c * p.h * p.w, 4 * p.n * p.k * p.out_h * p.out_w
    m_bytes = 4 * a2 * tiles * p.k
    free, _ = torch.cuda.mem_get_info()
    sets = rotation_sets(2 * (x_bytes + 2 * y_bytes + 2 * m_bytes), free, wanted=3)
    gen = torch.Generator(device="cuda").manual_seed(7)
    Ms = [torch.randn(a2, tiles, p.k, device="cuda", generator=gen) for _ in range(sets)]
    Ys = [torch.empty(p.n, p.k, p.out_h, p.out_w, device="cuda") for _ in range(sets)]
    x = torch.randn(p.n, p.h, p.w, p.c, device="cuda", generator=gen)
    w = cuda.as_cuda_array(torch.randn(p.k, p.c, 3, 3, device="cuda", generator=gen))
    row = {"layer": name, "tile": m, "out_w": p.out_w, "k": p.k, "otrans_mb": round((m_bytes + y_bytes) / 1e6, 1),
           "floor_otrans_ms": round((m_bytes + y_bytes) / COPY_TBPS / 1e9, 4)}
    wss = []
    for i in range(sets):
        ws = run.workspace(cuda.as_cuda_array(x), w)
        torch.as_tensor(ws.M, device="cuda").copy_(Ms[i])
        wss.append(ws)
    pl = next(pl for pl in run.launches if getattr(pl, "kind", None) == dev.OTRANS)
    row["nhwc_otrans_ms"] = median_launch_ms(torch, [pl.steps(ws)[0][0] for ws in wss], args.warmup, args.repeats)
    del wss, x
    ref = otrans_reference(torch, Ms[0], p, m)
    seen = {}
    for vname, (kernel, geometry) in _rows_variants(p, m).items():
        if args.variants and vname not in args.variants:
            continue
        key = (id(kernel), geometry)
        if key in seen:
            for col in ("ms", "rel_err", "regs", "block"):
                row[f"{vname}_{col}"] = row[f"{seen[key]}_{col}"]
        else:
            if geometry[2] > nchw.MAX_SHARED_BYTES:
                FrozenLaunch(kernel, 1, geometry[1], 0, (run.state.d_prm, cuda.as_cuda_array(Ms[0]),
                                                         cuda.as_cuda_array(Ys[0]), geometry[3], geometry[4]))
                _opt_in(kernel, geometry[2])       # (compiled by the launch's construction above)
            _time_variant(torch, row, vname, kernel, geometry, run.state.d_prm, Ms, Ys, ref, args)
            seen[key] = vname
        row[f"{vname}_vs_nhwc"] = round(row[f"{vname}_ms"] / row["nhwc_otrans_ms"], 3)
    print(f"{name:<14} m={m} Q={p.out_w} floor {row['floor_otrans_ms']:.4f} nhwc {row['nhwc_otrans_ms']:.4f} "
          + " ".join(f"{v} {row[f'{v}_block']} {row[f'{v}_ms']:.4f} ({row[f'{v}_vs_nhwc']:.3f}x)"
                     for v in ("runtime", "rows256", "rows128", "rows_big", "linear256", "linear128", "linear_big",
                               "linearF256", "linearF128", "linearF_big")
                     if f"{v}_ms" in row),
          file=sys.stderr, flush=True)
    del ref, Ms, Ys
    torch.cuda.empty_cache()
    return row


def main(argv=None) -> int:
    from megasim.workloads.catalogue import TABLE2_NAMES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", nargs="+", default=list(TABLE2_NAMES))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--choices", default=None, help="choice cache (JSON) to read and extend")
    ap.add_argument("--out", default=None, help="results folder (default experiments/results/<device>/)")
    ap.add_argument("--set", choices=("variants", "experiments", "rows"), default="variants",
                    help="variants: VARIANTS side by side, one row per layer; experiments: bench_experiments; "
                         "rows: bench_rows (otrans_kernels.rows_kernel's whole-row launches against the runtime's)")
    ap.add_argument("--modes", nargs="+", default=None, help="the experiments set's otrans modes (default all)")
    ap.add_argument("--geometries", nargs="+", default=None, help="the experiments set's geometries (default all)")
    ap.add_argument("--variants", nargs="+", default=None,
                    help="the rows set's variants (``_rows_variants``' names; default all)")
    ap.add_argument("--loop-strips", type=int, nargs="+", default=[2, 4],
                    help="the loop build's strips per block (grid = strips / this)")
    ap.add_argument("--loop-waves", type=int, nargs="+", default=[1, 2],
                    help="the loop build's persistent grids: this many full waves of blocks")
    ap.add_argument("--name", default=NAME, help=f"the results' file name, without suffix (default {NAME})")
    args = ap.parse_args(argv)
    import torch
    from numba import cuda

    from experiments.benchmarks.conv2d_user_path import device_dir, fp32_flags
    from experiments.benchmarks.winograd_bench import device_meta
    fp32_flags(torch)
    dmeta = device_meta(torch, cuda)
    out = Path(args.out) if args.out else REPO / "experiments" / "results" / device_dir(dmeta["device"])
    rows = []
    if args.set == "rows":
        for name in args.layers:
            rows.append(bench_rows(torch, name, args.batch, args))
        meta = provenance({"device": dmeta, "batch": args.batch, "layers": args.layers, "copy_tbps": COPY_TBPS,
                           "set": "rows", "variants": args.variants, "choices_file": args.choices})
        write_results(rows, out, args.name, meta)
        print(f"wrote {out / (args.name + '.csv')}")
        return 0
    if args.set == "experiments":
        from experiments.studies.nchw_transforms.otrans_kernels import MODES
        args.modes = args.modes or list(MODES)
        for name in args.layers:
            rows += bench_experiments(torch, name, args.batch, args)
        meta = provenance({"device": dmeta, "batch": args.batch, "layers": args.layers, "copy_tbps": COPY_TBPS,
                           "set": "experiments", "modes": args.modes, "choices_file": args.choices})
        write_results(rows, out, args.name, meta)
        print(f"wrote {out / (args.name + '.csv')}")
        return 0
    for name in args.layers:
        rows.append(bench_layer(torch, name, args.batch, args))
        r = rows[-1]
        print(f"{name:<11} m={r['tile']} otrans floor {r['floor_otrans_ms']:.4f} nhwc {r['nhwc_otrans_ms']:.4f} "
              + " ".join(f"{v} {r[f'otrans_{v}_ms']:.4f}" for v in VARIANTS)
              + f" | itrans floor {r['floor_itrans_ms']:.4f} nhwc {r['nhwc_itrans_ms']:.4f} "
              + " ".join(f"{v} {r[f'itrans_{v}_ms']:.4f}" for v in ITRANS_VARIANTS), file=sys.stderr, flush=True)
    meta = provenance({"device": dmeta, "batch": args.batch, "layers": args.layers, "copy_tbps": COPY_TBPS,
                       "variants": {k: {"opaque": b[0], "max_registers": b[1], "threads": t}
                                    for k, (b, t) in VARIANTS.items()},
                       "itrans_variants": {k: {"threads": t} for k, t in ITRANS_VARIANTS.items()},
                       "choices_file": args.choices})
    write_results(rows, out, args.name, meta)
    print(f"wrote {out / (args.name + '.csv')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
