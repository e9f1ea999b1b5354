"""Winograd on the GPU against its baselines: correctness at full size and timing, the 13 Table-2 layers.

Produces ``DIR/winograd_bench.csv`` (one row per layer and implementation: layer, impl, median_ms,
min_ms, max_ms, rel_err, then status, detail, repeats, sets, tflops) and ``DIR/winograd_bench.json``
(the rows plus metadata: device, driver, CUDA / cuDNN / torch / numba / numba-cuda / numpy versions,
git SHA, date, torch flags, the reference and timing methods, cuDNN's Find answers and the mapping
parameters used per layer). DIR defaults to ``experiments/results/<device-slug>/``; when ``$OUT`` is
set (the lent GPU machine) a copy also goes to ``$OUT/results/<device-slug>/``. The CSV is rewritten
after every layer, so a crash keeps the layers done.

Our implementations run each layer's Winograd tile, ``megasim.algorithms.winograd.lowering.default_tile`` (as ``conv2d``
does; F(4x4) everywhere in runs before bbd9d23), unless ``--config`` names a ``tile`` or ``--model-tiles`` lets the
model choose it; the tile is in the JSON's ``per_layer`` and in the ``detail`` column.

Implementations (``impl``):
- ``fused``: our megakernel, Algorithm 1 with the GPU API's default parameters (as ``gpu.winograd.conv2d``
  with no mapping: ``megasim.mapping.recommended_params`` since 01d3996; the tightest
  ``default_params`` at M = 4 before, as the ``detail`` column of older results shows); ``fused_sweep_best``: the fastest point of an Algorithm 1 sweep, by default
  (``--fused-sweep space``) the optimiser's Algorithm 1 space at the bench's t: M in {1, 2, 4, 8, 16} x
  d_ig_x in {1, 2, 4, 8} x d_go_x in {1, 2, 4} (multiples of the tightest valid D_IG and D_GO for M,
  ``megasim.mapping.scaled_params``), 60 points; ``--fused-sweep small``: M in {1, 2, 4, 8} x D_IG in
  {d, 2d, 4d} (d = the smallest valid D_IG for M, at least 1), D_GO at its default for M, 12 points
  (the sweep of runs before 2026-11-26); ``wide``: the same with D_IG up to 16d, 20 points; ``deep``: ``space``
  with d_go_x in {1, 2, 4, 8, 16}, 100 points;
  ``detail`` holds the parameters. ``fused_blockidx_best``: that best mapping with blockIdx dispatch
  (block b runs map position b, as in the paper: no ticket atomic per claim; opt-in).
  ``fused_ready`` / ``fused_ready_sweep_best``: the same two with
  ready-queue dispatch (``megasim.ready``: a block takes the next task of a FIFO queue of
  runnable tasks, never waiting on a parent). ``nonfused``: our four per-kind kernels.
  Both are timed through ``gpu.runtime.prepared.PreparedSchedule`` (tables uploaded once; the executor's
  ``run_schedule`` re-uploads them per call), on NHWC input already in place (the NCHW<->NHWC
  transposes that ``conv2d`` adds for NCHW tensors are not timed); ``detail`` also gives the error of
  the public ``gpu.winograd.conv2d`` on the same inputs (api_rel_err), which must agree.
- ``cudnn_best_fp32``: cuDNN's fastest algorithm by its own Find (legacy API, FMA math, no TF32);
  ``cudnn_winograd_nonfused``: CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, same math;
  ``cudnn_best_tf32``: Find with DEFAULT math (TF32 tensor cores allowed): lower precision, labelled.
- ``torch_default``: torch.nn.functional.conv2d, TF32 off, cudnn.benchmark off.
- ``cublas_gemm_phase``: torch.bmm (cuBLAS FP32, TF32 off) of the alpha^2 GEMMs of F(m x m,3x3) at the
  config's m (36 for F(4x4)): (alpha^2, tiles, C) @ (alpha^2, C, K), on random operands. ``our_gemm_phase``: our GEMM launch alone.

Method (/work/.library/device/METHOD.md): fresh normal float32 inputs per layer (numpy
default_rng(seed + layer index)); rel_err = ||y - ref|| / ||ref|| against a float64 reference
computed on the GPU (torch conv2d on float64 tensors with cuDNN disabled: im2col + DGEMM; a CPU float64
direct convolution of one image and 4 filters checks that reference); outputs poisoned with NaN
before the checked run. Timing: CUDA events (gpu.runtime.timing.time_cuda), ``--warmup`` untimed runs, median
of ``--repeats`` (>= 20; default 30), inputs rotated over ``--sets`` (3) input sets when 3 fit in a
quarter of free memory. rel_err must be < 1e-3 (FP32) or < 1e-2 (TF32) to pass; a failure or an
exception is recorded in ``status`` (NaN timings) and the run goes on; exit status 1 if any failed.

Run time on an H100/H200: a few minutes for all 13 layers (Find and the float64 references dominate
the small layers, vgg-1..3 the rest); ``--quick`` = 10 repeats, 2 warm-ups, layers resnet-4 and
yolov3-1 unless --layers is given.

    bash gpu/on_device.sh python -m experiments.benchmarks.winograd_bench [--layers vgg-1 resnet-1] [--quick]
        [--out DIR] [--repeats 30] [--fused-sweep space|deep|small|wide|none] [--ready-sweep small|...]
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import math
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Sequence

NAME = "winograd_bench"
IMPLS = ("fused", "fused_sweep_best", "fused_blockidx_best", "fused_ready", "fused_ready_sweep_best", "nonfused", "cudnn_best_fp32", "cudnn_winograd_nonfused", "torch_default",
         "cudnn_best_tf32", "cublas_gemm_phase", "our_gemm_phase")
TF32_IMPLS = frozenset({"cudnn_best_tf32"})
COLUMNS = ("layer", "impl", "median_ms", "min_ms", "max_ms", "rel_err", "status", "detail", "repeats", "sets", "tflops")
TOL_FP32, TOL_TF32 = 1e-3, 1e-2
QUICK_LAYERS = ("resnet-4", "yolov3-1")
SWEEPS = ("space", "deep", "small", "wide", "none")
SWEEP_M = (1, 2, 4, 8)
SWEEP_D_IG_FACTORS = {"small": (1, 2, 4), "wide": (1, 2, 4, 8, 16)}
SWEEP_DEEP_D_GO_X = (1, 2, 4, 8, 16)   # "deep": the space's M and d_ig_x with D_GO up to 16x its minimum
_REPO = Path(__file__).resolve().parent.parent


# -- pure helpers (tested on the CPU) -------------------------------------------------------------------

def device_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug or "unknown-device"


def tolerance(impl: str) -> float:
    return TOL_TF32 if impl in TF32_IMPLS else TOL_FP32


def make_row(layer: str, impl: str, stats=None, rel_err: float = math.nan, *, status: str = "ok",
             detail: str = "", sets: int = 0, flops: int | None = None) -> dict[str, Any]:
    """One CSV row. ``stats`` is a gpu.runtime.timing.TimingStats or None (NaN timings). A finite rel_err above
    the impl's tolerance, or a NaN one where timings exist, turns status "ok" into a failure."""
    if impl not in IMPLS:
        raise ValueError(f"impl={impl!r} is not allowed (allowed: {', '.join(IMPLS)})")
    med = stats.median_ms if stats is not None else math.nan
    if status == "ok" and not (rel_err < tolerance(impl)):   # NaN compares False: unwritten or NaN output
        status = f"FAIL rel_err {rel_err:.3g} >= {tolerance(impl):g}"
    tflops = flops / (med * 1e9) if flops and med > 0 and math.isfinite(med) else math.nan
    return {"layer": layer, "impl": impl,
            "median_ms": med, "min_ms": stats.min_ms if stats is not None else math.nan,
            "max_ms": stats.max_ms if stats is not None else math.nan,
            "rel_err": float(rel_err), "status": status, "detail": detail,
            "repeats": stats.repeats if stats is not None else 0, "sets": sets, "tflops": tflops}


def worst(*errs: float) -> float:
    """The largest error, NaN if any is NaN (an unwritten output must not hide behind a good one)."""
    return math.nan if any(math.isnan(e) for e in errs) else max(errs)


def error_row(layer: str, impl: str, exc: BaseException, detail: str = "") -> dict[str, Any]:
    msg = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return make_row(layer, impl, None, math.nan, status=f"error {msg[:300]}", detail=detail)


def failed(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["status"] != "ok"]


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """Median ms per layer (rows) and impl (columns); '!' marks a row whose status is not ok."""
    impls = [i for i in IMPLS if any(r["impl"] == i for r in rows)]
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    cell = {(r["layer"], r["impl"]): r for r in rows}
    short = {"fused_sweep_best": "fused_best", "fused_blockidx_best": "blockidx_best",
             "fused_ready_sweep_best": "ready_best", "cudnn_best_fp32": "cudnn_fp32", "cudnn_winograd_nonfused": "cudnn_wino_nf",
             "torch_default": "torch", "cudnn_best_tf32": "cudnn_TF32", "cublas_gemm_phase": "cublas_gemm",
             "our_gemm_phase": "our_gemm"}
    heads = ["layer"] + [short.get(i, i) for i in impls]
    widths = [max(10, max((len(l) for l in layers), default=5))] + [max(9, len(h)) for h in heads[1:]]
    lines = ["  ".join(h.rjust(w) for h, w in zip(heads, widths))]
    for layer in layers:
        out = [layer.rjust(widths[0])]
        for impl, w in zip(impls, widths[1:]):
            r = cell.get((layer, impl))
            if r is None:
                txt = "-"
            else:
                txt = "nan" if not math.isfinite(r["median_ms"]) else f"{r['median_ms']:.3f}"
                txt += "" if r["status"] == "ok" else "!"
            out.append(txt.rjust(w))
        lines.append("  ".join(out))
    worst = max((r["rel_err"] for r in rows if math.isfinite(r["rel_err"]) and r["impl"] not in TF32_IMPLS),
                default=math.nan)
    lines.append(f"(median ms; '!' = status not ok, see CSV; largest FP32 rel_err {worst:.2e})")
    return "\n".join(lines)


def read_bench_json(path: str | Path) -> dict:
    """A winograd_bench JSON, plain or gzipped (archived runs: ``winograd_bench.json.gz``; a ``.json`` path that is
    missing is read from its ``.json.gz`` beside it)."""
    path = Path(path)
    if path.suffix == ".json" and not path.exists() and path.with_suffix(".json.gz").exists():
        path = path.with_suffix(".json.gz")
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


def recorded_tile(layer_meta: dict) -> int:
    """The Winograd tile a bench run used for a layer, from its JSON's ``per_layer`` entry (``tile``; the
    first runs at each layer's default tile recorded it only in ``winograd_config.m``; runs before bbd9d23 ran
    F(4x4) on every layer)."""
    return int(layer_meta.get("tile", layer_meta.get("winograd_config", {}).get("m", 4)))


def sweep_candidates(graph, size: str = "small") -> list:
    """The Algorithm 1 sweep: M in SWEEP_M (at most N_G) x D_IG in {d, 2d, 4d} ("small"; "wide" adds 8d and
    16d) (d = smallest valid D_IG for M, at least 1), D_GO = its default for M. "space": the optimiser's
    Algorithm 1 space (M, d_ig_x, d_go_x; ``megasim.algorithms.winograd.space.algorithm1_space``) at this graph's t; "deep": the same
    with d_go_x up to 16 (SWEEP_DEEP_D_GO_X; the space's best sat at d_go_x = 4, its edge, on most
    layers). Deduplicated, in order."""
    from megasim.algorithms.winograd.algorithm1 import Algorithm1Params, counts, default_params, scaled_params
    n_g = counts(graph)["N_G"]
    out: list = []
    if size in ("space", "deep"):
        from megasim.algorithms.winograd.space import algorithm1_space
        values = {p.name: p.values for p in algorithm1_space().parameters}
        if size == "deep":
            values["d_go_x"] = SWEEP_DEEP_D_GO_X
        for m in values["M"]:
            for d_ig_x in values["d_ig_x"]:
                for d_go_x in values["d_go_x"]:
                    if m <= n_g and (p := scaled_params(graph, m, d_ig_x, d_go_x)) not in out:
                        out.append(p)
        return out
    for m in SWEEP_M:
        if m > n_g:
            continue
        base = default_params(graph, m)
        d = max(1, int(base.d_ig))
        for f in SWEEP_D_IG_FACTORS[size]:
            p = Algorithm1Params(max(int(base.d_ig), f * d) if f > 1 else int(base.d_ig), int(base.d_go), m)
            if p not in out:
                out.append(p)
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m experiments.benchmarks.winograd_bench", description=__doc__.split("\n")[0])
    ap.add_argument("--layers", nargs="+", default=None, help="Table-2 names or specs (default: all 13)")
    ap.add_argument("--quick", action="store_true", help=f"10 repeats, 2 warm-ups, layers {', '.join(QUICK_LAYERS)}")
    ap.add_argument("--out", default=None, help="output directory (default experiments/results/<device-slug>, "
                    "and its gemm_3xtf32/ for the 3xTF32 GEMM: --config gemm_math=3xtf32)")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs per implementation (default 30; >= 20)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed runs first (default 5)")
    ap.add_argument("--sets", type=int, default=3, help="input sets to rotate among (default 3)")
    ap.add_argument("--fused-sweep", choices=SWEEPS, default="space",
                    help="Algorithm 1 sweep for fused_sweep_best: space (the optimiser's default space at t, "
                    "60 points; default), deep (space with D_GO to 16x, 100), small (12), wide (20), none")
    ap.add_argument("--ready-sweep", choices=SWEEPS, default="small",
                    help="the same for fused_ready_sweep_best (default small)")
    ap.add_argument("--batch", type=int, default=None,
                    help="run every layer at this N (default: each layer's own: 64 for the catalogue, a spec's N=)")
    ap.add_argument("--seed", type=int, default=20261121)
    ap.add_argument("--config", default="", help="Winograd implementation parameters as a --param string "
                    "(t, tile, threads, pairs, gemm_k_tile, gemm_threads, gemm_math), e.g. pairs=4 "
                    "(default: megasim's defaults; without tile, each layer's default_tile, as conv2d)")
    ap.add_argument("--ours-only", action="store_true", help="time our kernels only (no PyTorch, cuDNN, cuBLAS)")
    ap.add_argument("--model-pairs", default=None, metavar="SPEC",
                    help="the fused schedule's pairs per transform thread chosen per layer by the model with this "
                    "calibrated spec (megasim.algorithms.winograd.implementation.model_pairs: 4 or 2, each at its recommended "
                    "mapping), before any GPU run; the default mapping and the sweep then run at it")
    ap.add_argument("--model-tiles", default=None, metavar="M,M,...",
                    help="with --model-pairs: the Winograd tile chosen per layer by the model among these (e.g. "
                    "4,5,6,7; megasim.algorithms.winograd.implementation.model_implementation), jointly with the pairs; both "
                    "schedules run at it. F(7x7) has 4-5x F(6x6)'s FP32 error (megasim.algorithms.winograd.winograd_math)")
    args = ap.parse_args(argv)
    from megasim.errors import MegasimError
    from megasim.algorithms.winograd import WINOGRAD
    from megasim.plan import Plan
    try:   # pairs per transform thread default by schedule (4 fused, 1 non-fused)
        args.fused_config = WINOGRAD.resolve(None, Plan.parse("fused", args.config).params, "fused", None).config
        args.nonfused_config = WINOGRAD.resolve(None, Plan.parse("nonfused", args.config).params, "nonfused",
                                                None).config
    except MegasimError as exc:
        ap.error(f"--config: {exc}")
    given = {part.split("=")[0].strip() for part in args.config.split(",")}    # --config's keys
    args.model_spec = None
    if args.model_pairs:
        if "pairs" in given:
            ap.error("--model-pairs and --config pairs=... both set the pairs per thread: give one")
        from megasim.hardware import load_spec
        try:
            args.model_spec = load_spec(args.model_pairs)
        except MegasimError as exc:
            ap.error(f"--model-pairs: {exc}")
    args.tile_given = "tile" in given
    args.model_tile_choices = None
    if args.model_tiles is not None:
        from megasim.algorithms.winograd.winograd_math import SUPPORTED_TILES
        try:
            args.model_tile_choices = tuple(int(t) for t in args.model_tiles.split(","))
        except ValueError:
            ap.error(f"--model-tiles {args.model_tiles!r}: want comma-separated tile sizes of {SUPPORTED_TILES}")
        if not args.model_pairs or args.tile_given:
            ap.error("--model-tiles needs --model-pairs SPEC and no tile=... in --config")
        if not args.model_tile_choices or any(t not in SUPPORTED_TILES for t in args.model_tile_choices):
            ap.error(f"--model-tiles {args.model_tiles!r}: each tile must be one of {SUPPORTED_TILES}")
    args.repeats = args.repeats if args.repeats is not None else (10 if args.quick else 30)
    args.warmup = args.warmup if args.warmup is not None else (2 if args.quick else 5)
    if args.repeats < 1 or args.warmup < 0 or args.sets < 1:
        ap.error("--repeats and --sets must be >= 1, --warmup >= 0")
    if args.layers is None:
        from megasim.workloads import TABLE2_NAMES
        args.layers = list(QUICK_LAYERS if args.quick else TABLE2_NAMES)
    from experiments.layer_args import checked_layers
    checked_layers(args.layers, ap.error, args.batch)     # each layer runs the problem it names, or none runs
    return args


# -- GPU side -----------------------------------------------------------------------------------------------

def _nvidia_smi() -> dict[str, str]:
    """The first GPU's name, driver, memory and largest SM clock (nvidia-smi), or its error."""
    from experiments.provenance import nvidia_smi
    gpus = nvidia_smi(("name", "driver_version", "memory.total", "clocks.max.sm"))
    first = gpus[0] if gpus else {}
    names = {"memory.total": "memory_total", "clocks.max.sm": "max_sm_clock"}
    return {names.get(k, k): v for k, v in first.items()}


def _versions() -> dict[str, str | None]:
    from importlib import metadata
    out: dict[str, str | None] = {}
    for pkg in ("torch", "numba", "numba-cuda", "numpy", "cupy", "cupy-cuda13x", "cupy-cuda12x",
                "nvidia-cudnn-cu13", "nvidia-cudnn-cu12"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def device_meta(torch, cuda) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(0)
    try:
        drv = ".".join(map(str, cuda.cudadrv.driver.driver.get_version()))
    except Exception as exc:  # noqa: BLE001 - metadata only
        drv = f"unknown ({type(exc).__name__})"
    from gpu import cudnn_legacy
    try:
        lib = cudnn_legacy.load()
        cudnn_loaded, cudnn_dir = lib.version, str(lib.directory)
    except cudnn_legacy.CudnnError as exc:      # the cuDNN rows will say so too; the run goes on
        cudnn_loaded, cudnn_dir = None, f"error {exc}"
    return {
        "device": props.name, "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count, "memory_bytes": props.total_memory,
        "nvidia_smi": _nvidia_smi(), "driver_cuda_api": drv, "cuda_runtime_torch": torch.version.cuda,
        "cudnn_torch": torch.backends.cudnn.version(), "cudnn_loaded": cudnn_loaded,
        "cudnn_dir": cudnn_dir, "gpu_versions": _versions(),
        "NVIDIA_TF32_OVERRIDE": cudnn_legacy.tf32_override(),
    }


class LayerBench:
    """Everything one layer needs on the device: inputs, reference, our plan and workspaces."""

    def __init__(self, problem, args, rng, torch, cuda) -> None:
        import numpy as np
        from gpu.runtime import executor as ex
        from gpu.runtime.timing import rotation_sets
        from megasim.algorithms.winograd.lowering import default_tile
        self.p, self.args, self.torch, self.cuda = problem, args, torch, cuda
        p = problem
        per_set = 4 * (p.n * p.c * p.h * p.w * 2 + p.k * p.c * 9 + p.n * p.k * p.out_h * p.out_w * 2)
        free, _ = torch.cuda.mem_get_info()
        self.sets = rotation_sets(per_set, free, wanted=args.sets)
        xs = [rng.standard_normal((p.n, p.c, p.h, p.w), dtype=np.float32) for _ in range(self.sets)]
        ws = [rng.standard_normal((p.k, p.c, 3, 3), dtype=np.float32) for _ in range(self.sets)]
        self.x0_host, self.w0_host = xs[0], ws[0]
        self.x = [torch.from_numpy(a).cuda() for a in xs]
        self.w = [torch.from_numpy(a).cuda() for a in ws]
        del xs, ws
        self.y = [torch.empty((p.n, p.k, p.out_h, p.out_w), dtype=torch.float32, device="cuda") for _ in range(self.sets)]
        with torch.backends.cudnn.flags(enabled=False):     # float64 im2col + DGEMM, not a cuDNN algorithm
            self.ref = torch.nn.functional.conv2d(self.x[0].double(), self.w[0].double(), padding=p.padding)
        torch.cuda.synchronize()
        # Workspaces depend on the problem and the tile only, so the two plans share them.
        self.cfg, self.cfg_nonfused = args.fused_config, args.nonfused_config
        if not args.tile_given:     # the layer's default tile, as gpu.winograd.conv2d picks it
            tile = default_tile(p)
            self.cfg = dataclasses.replace(self.cfg, m=tile)
            self.cfg_nonfused = dataclasses.replace(self.cfg_nonfused, m=tile)
        self.model_pairs = None
        if args.model_spec is not None:   # the fused transform tasks' size (and tile), chosen by the model (no GPU run)
            from megasim.plan import Plan
            from megasim.algorithms.winograd.implementation import model_implementation
            plan = Plan.parse("fused", args.config)
            plan = dataclasses.replace(plan, params=dataclasses.replace(plan.params, tile=self.cfg.m,
                                                                        gemm_math=self.cfg.gemm_math))
            tiles = args.model_tile_choices or (self.cfg.m,)
            tile, pairs, predicted = model_implementation(p, args.model_spec, plan, tiles)
            self.cfg = dataclasses.replace(self.cfg, m=tile, transform_pairs_per_thread=pairs)
            self.cfg_nonfused = dataclasses.replace(self.cfg_nonfused, m=tile)
            self.model_pairs = {"spec": args.model_pairs, "chosen": pairs}
            if args.model_tile_choices is None:
                self.model_pairs["predicted_us"] = {str(k): round(v, 2) for (_, k), v in predicted.items()}
            else:
                self.model_pairs.update(tile=tile, predicted_us={f"m{m},p{k}": round(v, 2)
                                                                 for (m, k), v in predicted.items()})
        self.plan = ex.make_plan(p, self.cfg)
        self.plan_nonfused = ex.make_plan(p, self.cfg_nonfused)
        self.x_nhwc_t = [t.permute(0, 2, 3, 1).contiguous() for t in self.x]   # kept: numba views them
        self.x_nhwc = [cuda.as_cuda_array(t) for t in self.x_nhwc_t]
        self.ws = [ex.workspace(self.plan, self.x_nhwc[i], cuda.as_cuda_array(self.w[i])) for i in range(self.sets)]

    def ref_spot_check(self) -> float:
        """rel_err of the GPU float64 reference against the CPU float64 direct convolution on image 0,
        filters 0..3 (checks the reference itself)."""
        from megasim.algorithms.winograd.winograd_math import direct_conv2d_reference
        kk = min(4, self.p.k)
        cpu = direct_conv2d_reference(self.x0_host[:1], self.w0_host[:kk], self.p.padding)
        gpu = self.ref[:1, :kk].cpu().numpy()
        import numpy as np
        return float(np.linalg.norm(gpu - cpu) / np.linalg.norm(cpu))

    def err_nchw(self, y) -> float:
        from gpu.baselines import rel_err_torch
        return rel_err_torch(y, self.ref)

    def err_nhwk(self, ws) -> float:
        y = self.torch.as_tensor(ws.Y, device="cuda").permute(0, 3, 1, 2)
        return self.err_nchw(y)

    def poison(self, arr) -> None:
        self.torch.as_tensor(arr, device="cuda").fill_(float("nan"))

    def time(self, fn, sets: int | None = None, repeats: int | None = None, warmup: int | None = None):
        from gpu.runtime.timing import time_cuda
        return time_cuda(fn, warmup=self.args.warmup if warmup is None else warmup,
                         repeats=self.args.repeats if repeats is None else repeats, rotate=sets or self.sets)


def _run_fused(lb: LayerBench, rows: list, meta: dict, fused_row, default, impl: str, best_impl: str,
               sweep_size: str) -> None:
    """The fused rows of one dispatch: ``impl`` at the default parameters, ``best_impl`` the best of the
    ``sweep_size`` sweep (its points in ``meta[best_impl[:-5]]``, e.g. "fused_sweep")."""
    name = lb.p.name
    try:
        row, _ = fused_row(impl, default, check_api=True)
        rows.append(row)
    except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
        traceback.print_exc()
        rows.append(error_row(name, impl, exc, detail=str(default.as_dict())))
    if sweep_size == "none":
        return
    sweep, best = [], None
    for params in sweep_candidates(lb.plan.graph, sweep_size):
        try:
            row, stats = fused_row(best_impl, params, repeats=10, warmup=2)
            sweep.append({**params.as_dict(), "median_ms": stats.median_ms, "rel_err": row["rel_err"],
                          "status": row["status"]})
            if row["status"] == "ok" and (best is None or stats.median_ms < best[1]):
                best = (params, stats.median_ms)
        except Exception as exc:  # noqa: BLE001 - an invalid or failing point is a record, not the end
            sweep.append({**params.as_dict(), "status": f"error {type(exc).__name__}: {exc}"[:300]})
    meta[best_impl[:-len("_best")]] = sweep
    if best is None:
        rows.append(make_row(name, best_impl, None, math.nan, status="error no valid sweep point"))
        return
    meta[best_impl] = best[0].as_dict()
    try:
        rows.append(fused_row(best_impl, best[0])[0])
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        rows.append(error_row(name, best_impl, exc))


def _run_ours(lb: LayerBench, rows: list, meta: dict) -> None:
    from gpu.runtime.prepared import PreparedSchedule
    from gpu.winograd import conv2d
    from megasim.algorithms.winograd.algorithm1 import Algorithm1Params, recommended_params
    from megasim.algorithms.winograd.algorithm1 import algorithm1
    from megasim.algorithms.winograd import winograd_nonfused
    name, flops, graph = lb.p.name, lb.p.direct_flops, lb.plan.graph

    def fused_row(impl: str, params, repeats=None, warmup=None, check_api=False):
        sched = algorithm1(graph, params)
        dispatch = ("ready" if impl.startswith("fused_ready") else
                    "blockidx" if impl.startswith("fused_blockidx") else "ticket")
        if dispatch != "ticket":
            sched = sched.with_style("per_task", dispatch)
        prep = PreparedSchedule(lb.plan, sched, kernels="megakernel")
        lb.poison(lb.ws[0].Y)
        prep.run(lb.ws[0])
        prep.check()
        err = lb.err_nhwk(lb.ws[0])
        detail = "D_IG={d_ig} D_GO={d_go} M={m} tile={tile}".format(d_ig=params.d_ig, d_go=params.d_go, m=params.m,
                                                                   tile=lb.cfg.m)
        if check_api:
            y_api = conv2d(lb.cuda.as_cuda_array(lb.x[0]), lb.cuda.as_cuda_array(lb.w[0]), mapping=params,
                           config=lb.cfg, dispatch=dispatch)
            api_err = lb.err_nchw(lb.torch.as_tensor(y_api, device="cuda"))
            detail += f" api_rel_err={api_err:.3g}"
            err = worst(err, api_err)
        stats = lb.time(lambda i: prep.run(lb.ws[i]), repeats=repeats, warmup=warmup)
        prep.check()
        return make_row(name, impl, stats, err, detail=detail, sets=lb.sets, flops=flops), stats

    default = recommended_params(graph)
    meta["fused_default"] = default.as_dict()
    for impl, best_impl, size in (("fused", "fused_sweep_best", lb.args.fused_sweep),
                                  ("fused_ready", "fused_ready_sweep_best", lb.args.ready_sweep)):
        _run_fused(lb, rows, meta, fused_row, default, impl, best_impl, size)
    if "fused_sweep_best" in meta:     # the ticket sweep's best mapping, blocks claiming by blockIdx
        best = Algorithm1Params(meta["fused_sweep_best"]["D_IG"], meta["fused_sweep_best"]["D_GO"],
                                meta["fused_sweep_best"]["M"])
        try:
            rows.append(fused_row("fused_blockidx_best", best)[0])
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            rows.append(error_row(name, "fused_blockidx_best", exc))
    try:
        prep = PreparedSchedule(lb.plan_nonfused, winograd_nonfused(lb.plan_nonfused.graph), kernels="per_kind")
        lb.poison(lb.ws[0].Y)
        prep.run(lb.ws[0])
        err = lb.err_nhwk(lb.ws[0])
        y_api = conv2d(lb.cuda.as_cuda_array(lb.x[0]), lb.cuda.as_cuda_array(lb.w[0]), schedule="nonfused",
                       config=lb.cfg_nonfused)
        api_err = lb.err_nchw(lb.torch.as_tensor(y_api, device="cuda"))
        stats = lb.time(lambda i: prep.run(lb.ws[i]))
        rows.append(make_row(name, "nonfused", stats, worst(err, api_err),
                             detail=f"tile={lb.cfg_nonfused.m} api_rel_err={api_err:.3g}", sets=lb.sets, flops=flops))
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        rows.append(error_row(name, "nonfused", exc))
    meta["winograd_config"] = dataclasses.asdict(lb.cfg)
    meta["winograd_config_nonfused"] = dataclasses.asdict(lb.cfg_nonfused)
    if lb.model_pairs is not None:
        meta["model_pairs"] = lb.model_pairs


def _run_cudnn(lb: LayerBench, rows: list, meta: dict) -> None:
    from gpu.cudnn_legacy import CudnnConv, best_ok
    p, name, flops = lb.p, lb.p.name, lb.p.direct_flops
    for math_mode, best_impl in (("fp32", "cudnn_best_fp32"), ("tf32", "cudnn_best_tf32")):
        conv = None
        try:
            conv = CudnnConv(p.n, p.c, p.k, p.h, p.w, padding=p.padding, math=math_mode)
            found = conv.find(lb.x[0], lb.w[0], lb.y[0])
            meta[f"cudnn_find_{math_mode}"] = [dataclasses.asdict(r) for r in found]
            targets = [(best_impl, best_ok(found))]
            if math_mode == "fp32":
                wn = next((r for r in found if r.algo == "WINOGRAD_NONFUSED"), None)
                targets.append(("cudnn_winograd_nonfused", wn))
            for impl, res in targets:
                if res is None or not res.ok:
                    status = res.status if res is not None else "not returned by Find"
                    rows.append(make_row(name, impl, None, math.nan, status=f"error {status}",
                                         detail=res.algo if res is not None else ""))
                    continue
                try:
                    lb.y[0].fill_(float("nan"))
                    conv.forward(lb.x[0], lb.w[0], lb.y[0], res.algo)
                    err = lb.err_nchw(lb.y[0])
                    stats = lb.time(lambda i, a=res.algo: conv.forward(lb.x[i], lb.w[i], lb.y[i], a))
                    rows.append(make_row(name, impl, stats, err, sets=lb.sets, flops=flops,
                                         detail=f"{res.algo} {res.math_type} ws={res.memory_bytes} find_ms={res.time_ms:.4g}"))
                except Exception as exc:  # noqa: BLE001
                    traceback.print_exc()
                    rows.append(error_row(name, impl, exc, detail=res.algo))
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            impls = (best_impl, "cudnn_winograd_nonfused") if math_mode == "fp32" else (best_impl,)
            rows.extend(error_row(name, i, exc) for i in impls)
        finally:
            if conv is not None:
                conv.close()


def _run_torch(lb: LayerBench, rows: list, meta: dict) -> None:
    from gpu.baselines import fp32_torch_flags
    name = lb.p.name
    try:
        meta["torch_flags"] = fp32_torch_flags()
        F = lb.torch.nn.functional
        y = F.conv2d(lb.x[0], lb.w[0], padding=lb.p.padding)
        err = lb.err_nchw(y)
        del y
        stats = lb.time(lambda i: F.conv2d(lb.x[i], lb.w[i], padding=lb.p.padding))
        rows.append(make_row(name, "torch_default", stats, err, sets=lb.sets, flops=lb.p.direct_flops))
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        rows.append(error_row(name, "torch_default", exc))


def _run_gemm_phase(lb: LayerBench, rows: list, rng) -> None:
    from gpu.baselines import BmmGemmPhase, OurGemmPhase
    name = lb.p.name
    try:
        bmm = BmmGemmPhase(lb.p, rng, sets=lb.sets, m=lb.cfg_nonfused.m)   # the same GEMMs as ours
        err = bmm.rel_err()
        stats = lb.time(bmm.run)
        sh = bmm.shape
        rows.append(make_row(name, "cublas_gemm_phase", stats, err, sets=lb.sets, flops=sh.flops,
                             detail=f"bmm {sh.batch}x({sh.rows}x{sh.inner})@({sh.inner}x{sh.cols})"))
        del bmm
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        rows.append(error_row(name, "cublas_gemm_phase", exc))
    try:
        ours = OurGemmPhase(lb.plan_nonfused, lb.ws)
        err = ours.rel_err()
        stats = lb.time(ours.run)
        rows.append(make_row(name, "our_gemm_phase", stats, err, sets=lb.sets, flops=ours.shape.flops,
                             detail=f"gemm_kernel, {len(ours.gemm.launches[0].launch.order)} tasks"))
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        rows.append(error_row(name, "our_gemm_phase", exc))


def _release(torch, cuda) -> None:
    """Free the layer's device memory before the next one (numba defers its frees; torch caches)."""
    import gc
    gc.collect()
    try:
        torch.cuda.synchronize()
        cuda.current_context().deallocations.clear()
    finally:
        torch.cuda.empty_cache()


def _write(rows, meta, out_dirs) -> list[Path]:
    from experiments.provenance import write_results
    paths = []
    for d in out_dirs:
        paths += list(write_results(rows, d, NAME, meta))
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.repeats < 20 and not args.quick:
        print(f"warning: --repeats {args.repeats} is under the 20 the method asks for", file=sys.stderr)
    try:
        import numpy as np
        import torch
    except ImportError as exc:
        print(f"winograd_bench needs numpy and torch with CUDA: {exc}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("winograd_bench needs a CUDA GPU: torch.cuda.is_available() is False "
              "(run it as `bash gpu/on_device.sh python -m experiments.benchmarks.winograd_bench`)", file=sys.stderr)
        return 2
    import numba
    if numba.config.ENABLE_CUDASIM:
        print("NUMBA_ENABLE_CUDASIM is set: unset it (or set MEGASIM_REAL_GPU=1) to time the real kernels",
              file=sys.stderr)
        return 2
    from numba import cuda
    from experiments.provenance import provenance
    from gpu.baselines import fp32_torch_flags
    from megasim.workloads import parse_layer

    fp32_torch_flags()
    dmeta = device_meta(torch, cuda)
    slug = device_slug(dmeta["device"])
    # another GEMM math writes beside the FP32 results, never over them
    gemm_math = args.fused_config.gemm_math      # --config's gemm_math, else fp32
    math_dir = "" if gemm_math == "fp32" else f"gemm_{gemm_math}"
    out_dirs = [Path(args.out) if args.out else _REPO / "experiments" / "results" / slug / math_dir]
    if os.environ.get("OUT") and not args.out:
        out_dirs.append(Path(os.environ["OUT"]) / "results" / slug / math_dir)
    meta = provenance({
        **dmeta, "script": NAME, "layers": args.layers, "batch": args.batch, "seed": args.seed,
        "repeats": args.repeats, "warmup": args.warmup, "sets_wanted": args.sets, "fused_sweep": args.fused_sweep,
        "ready_sweep": args.ready_sweep,
        "config": args.config, "ours_only": args.ours_only,
        "gemm_math": gemm_math,
        "reference": "float64 torch conv2d on the GPU with cuDNN disabled (im2col + DGEMM); spot-checked against a "
                     "CPU float64 direct convolution (image 0, filters 0-3)",
        "timing": "gpu.runtime.timing.time_cuda: torch.cuda.Event pairs on the legacy default stream, median of repeats, "
                  "inputs rotated over `sets`",
        "tolerance": {"fp32": TOL_FP32, "tf32": TOL_TF32},
        "tflops_column": "direct-convolution flops (2NKPQCRS) / median time for convolutions; GEMM flops for the "
                         "gemm-phase rows",
        "per_layer": {},
    })
    print(f"device {dmeta['device']} (cc {dmeta['compute_capability']}, {dmeta['sm_count']} SMs), driver "
          f"{dmeta['nvidia_smi'].get('driver_version')}, CUDA {dmeta['cuda_runtime_torch']}, cuDNN {dmeta['cudnn_loaded']}, "
          f"torch {torch.__version__}, numba-cuda {dmeta['gpu_versions'].get('numba-cuda')}; out {out_dirs[0]}")
    rows: list[dict[str, Any]] = []
    for idx, layer in enumerate(args.layers):
        t0 = time.perf_counter()
        lmeta: dict[str, Any] = {}
        meta["per_layer"][layer] = lmeta
        try:
            problem = parse_layer(layer, batch=args.batch)
            rng = np.random.default_rng(args.seed + idx)
            lb = LayerBench(problem, args, rng, torch, cuda)
            lmeta.update(problem=problem.spec_string(), tile=lb.cfg.m, sets=lb.sets,
                         ref_spot_check_rel_err=lb.ref_spot_check())
            if not args.ours_only:
                _run_torch(lb, rows, lmeta)
                _run_cudnn(lb, rows, lmeta)
                _run_gemm_phase(lb, rows, rng)
            _run_ours(lb, rows, lmeta)
        except Exception as exc:  # noqa: BLE001 - a layer that cannot even be set up is recorded
            traceback.print_exc()
            lmeta["error"] = f"{type(exc).__name__}: {exc}"
            rows.append(error_row(layer, "fused", exc, detail="layer setup failed"))
        finally:
            lb = None
            _release(torch, cuda)
        done = [r for r in rows if r["layer"] == layer]
        print(f"[{layer}] {time.perf_counter() - t0:.1f} s: " + ", ".join(
            f"{r['impl']} {r['median_ms']:.3f} ms err {r['rel_err']:.1e}{'' if r['status'] == 'ok' else ' !'}"
            for r in done), flush=True)
        _write(rows, meta, out_dirs)
    paths = _write(rows, meta, out_dirs)
    print(format_table(rows))
    bad = failed(rows)
    for r in bad:
        print(f"NOT OK {r['layer']} {r['impl']}: {r['status']} {r['detail']}")
    print("wrote " + ", ".join(str(p) for p in paths))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
