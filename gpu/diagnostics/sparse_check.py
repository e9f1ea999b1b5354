"""GPU check of gpu.sparse on VGG-19 at batch 1: every public op against a float64 torch reference.

    bash gpu/on_device.sh python -m gpu.diagnostics.sparse_check          # on a GPU machine; ~1-2 minutes

What it runs (random inputs x = |randn| with a uniform fraction of zeros, sparsity 0.0, 0.5, 0.9;
w = randn; default tiling for the device's SM count):

- ``ecr`` and ``direct`` on all 16 VGG-19 convolution layers;
- ``pecr``, ``direct_fused`` and the unfused chains (``unfused_ecr``, ``unfused_direct``: conv, then
  the ``relu`` and ``maxpool2d`` kernels) on the 5 layers followed by a pool (conv1_2, conv2_2, conv3_4,
  conv4_4, conv5_4) with pool 2 stride 2, and once more on conv3_4 with pool stride 1;
- ``relu`` and ``maxpool2d`` on their own, on conv1_2's output.

The reference is torch.nn.functional.conv2d (+ relu, max_pool2d) in float64 on the GPU; the error is
max|y - ref| / max|ref|. Prints one row per run (layer, op, sparsity, rel err, registers per thread,
k_tile, the compiler's static shared and local bytes against the tiling contract's shared bytes, and
a median time over a few runs, indicative only), then the largest error per op and the registers per
(op, k_tile). Writes the rows to $OUT/sparse_check.csv and the device and versions to
$OUT/sparse_check_meta.json when OUT is set. Exits 1 if any error exceeds 1e-5 or any run failed.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import sys
import traceback

import numba
import numpy as np
from numba import cuda

from gpu.diagnostics.output import out_dir_arg
from gpu.runtime.small_grids import intended_small_grids
from megasim.provenance import git_sha
from gpu import sparse as sp
from gpu.kernels.sparse import kernels as sk
from gpu.runtime.timing import time_cuda
from megasim.workloads.catalogue import network_layers

TOL = 1e-5
SPARSITIES = (0.0, 0.5, 0.9)
POOLED = ("conv1_2", "conv2_2", "conv3_4", "conv4_4", "conv5_4")
POOL_STRIDE_1_LAYER = "conv3_4"
FIELDS = ("layer", "op", "sparsity", "pool", "pool_stride", "k_tile", "c_chunk", "grid", "rel_err", "regs",
          "shared_bytes", "contract_shared_bytes", "local_bytes", "median_ms", "ok", "error")


def _inputs(torch, problem, sparsity: float, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn((problem.n, problem.c, problem.h, problem.w), device="cuda", generator=g).abs_()
    x[torch.rand(x.shape, device="cuda", generator=g) < sparsity] = 0.0
    w = torch.randn((problem.k, problem.c, problem.r, problem.s), device="cuda", generator=g)
    return x.contiguous(), w.contiguous()


def _rel_err(torch, y, ref) -> float:
    return float((y.double() - ref).abs().max() / ref.abs().max())


def _row(layer, op, sparsity, pool=None, pool_stride=None) -> dict:
    return {f: "" for f in FIELDS} | {"layer": layer, "op": op, "sparsity": sparsity,
                                      "pool": pool or "", "pool_stride": pool_stride or ""}


def _run_op(torch, row, op, x, w, problem, ref, pool=None, pool_stride=None) -> None:
    """Prepare, run, compare, time one op; fills ``row``."""
    try:
        launch = sp.prepare(op, x, w, problem.stride, problem.padding, pool, pool_stride)
        launch.run()
        cuda.synchronize()
        y = torch.as_tensor(launch.output, device="cuda")
        err = _rel_err(torch, y, ref)
        stats = time_cuda(lambda i: launch.run(), warmup=1, repeats=3)
        t = launch.tiling
        row.update(k_tile=t.k_tile, c_chunk=t.c_chunk, grid=f"{launch.grid[0]}x{launch.grid[1]}",
                   rel_err=f"{err:.3e}", regs=launch.regs_per_thread, shared_bytes=launch.shared_bytes,
                   contract_shared_bytes=t.shared_bytes(problem), local_bytes=launch.local_bytes,
                   median_ms=f"{stats.median_ms:.4f}", ok=err <= TOL)
    except Exception as exc:  # noqa: BLE001  (one failure must not hide the other rows)
        row.update(ok=False, error=f"{type(exc).__name__}: {exc}".replace("\n", " ")[:300])
        traceback.print_exc()


def _print(row) -> None:
    print(f"{row['layer']:<14}{row['op']:<16}{row['sparsity']:>5}  {row['pool']!s:>2}/{row['pool_stride']!s:<2}"
          f"{row['rel_err']!s:>11}{row['regs']!s:>6}{row['k_tile']!s:>4}{row['shared_bytes']!s:>7}"
          f"{row['contract_shared_bytes']!s:>7}{row['local_bytes']!s:>5}{row['median_ms']!s:>10}"
          f"  {'ok' if row['ok'] is True else 'FAIL ' + str(row['error'])}", flush=True)


def _elementwise_rows(torch, y_conv) -> list[dict]:
    """relu and maxpool2d alone on a convolution output (device arrays in and out)."""
    rows = []
    checks = (("relu", lambda d: sp.relu(d), lambda t: torch.relu(t), sk.relu_kernel),
              ("maxpool2d", lambda d: sp.maxpool2d(d, 2, 2), lambda t: torch.nn.functional.max_pool2d(t, 2, 2),
               sk.maxpool_kernel(2, 2)))
    for name, ours, theirs, kernel in checks:
        row = _row("vgg19/conv1_2", name, 0.5)
        try:
            out = torch.as_tensor(ours(cuda.as_cuda_array(y_conv)), device="cuda")
            err = _rel_err(torch, out, theirs(y_conv.double()))
            regs = kernel.get_regs_per_thread()
            regs = next(iter(regs.values())) if isinstance(regs, dict) else regs
            row.update(rel_err=f"{err:.3e}", regs=regs, ok=err <= TOL)
        except Exception as exc:  # noqa: BLE001  (recorded in the row)
            row.update(ok=False, error=f"{type(exc).__name__}: {exc}".replace("\n", " ")[:300])
            traceback.print_exc()
        rows.append(row)
        _print(row)
    return rows


@intended_small_grids()     # small grids at batch 1 are intended
def main(argv: list[str] | None = None) -> int:
    """Check every op; with --out DIR also write sparse_check.csv/.json there."""
    out_dir = out_dir_arg(argv, __doc__.splitlines()[0], default=None)
    try:
        import torch
    except ImportError:
        print("gpu.diagnostics.sparse_check needs torch (the float64 reference runs on the GPU)", file=sys.stderr)
        return 2
    if numba.config.ENABLE_CUDASIM or not torch.cuda.is_available():
        print("gpu.diagnostics.sparse_check needs a CUDA GPU (and NUMBA_ENABLE_CUDASIM unset)", file=sys.stderr)
        return 2
    F = torch.nn.functional
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
    print(f"device {name}, cc {dev.compute_capability}, {dev.MULTIPROCESSOR_COUNT} SMs; torch {torch.__version__}, "
          f"numba {numba.__version__}", flush=True)
    print(f"{'layer':<14}{'op':<16}{'spars':>5}  pool {'rel_err':>9}{'regs':>6}{'kt':>4}{'smem':>7}{'contr':>7}"
          f"{'lmem':>5}{'ms':>10}", flush=True)
    rows: list[dict] = []
    seed = 0
    y_for_elementwise = None
    for problem in (p.with_batch(1) for p in network_layers("vgg19")):
        short = problem.name.split("/")[-1]
        for sparsity in SPARSITIES:
            seed += 1
            x, w = _inputs(torch, problem, sparsity, seed)
            ref = F.conv2d(x.double(), w.double(), stride=problem.stride, padding=problem.padding)
            for op in ("ecr", "direct"):
                row = _row(problem.name, op, sparsity)
                _run_op(torch, row, op, x, w, problem, ref)
                rows.append(row)
                _print(row)
            if short == "conv1_2" and sparsity == 0.5:
                y_for_elementwise = ref.float()
            if short not in POOLED:
                continue
            pools = [(2, 2)] + ([(2, 1)] if short == POOL_STRIDE_1_LAYER and sparsity == 0.5 else [])
            for pool, ps in pools:
                fref = F.max_pool2d(F.relu(ref), pool, ps)
                for op in ("pecr", "direct_fused", "unfused_ecr", "unfused_direct"):
                    row = _row(problem.name, op, sparsity, pool, ps)
                    _run_op(torch, row, op, x, w, problem, fref, pool, ps)
                    rows.append(row)
                    _print(row)
            del x, w, ref
    if y_for_elementwise is not None:
        rows += _elementwise_rows(torch, y_for_elementwise.contiguous())

    print("\nlargest rel err per op:")
    for op in dict.fromkeys(r["op"] for r in rows):
        errs = [float(r["rel_err"]) for r in rows if r["op"] == op and r["rel_err"] != ""]
        fails = sum(1 for r in rows if r["op"] == op and r["ok"] is not True)
        print(f"  {op:<16}{max(errs) if errs else float('nan'):.3e}  ({len(errs)} runs, {fails} failed)")
    print("registers per thread (local bytes) per (op, k_tile):")
    seen: dict[tuple, set] = {}
    for r in rows:
        if r["regs"] != "" and r["regs"] is not None:
            seen.setdefault((r["op"], r["k_tile"]), set()).add((r["regs"], r["local_bytes"]))
    for (op, kt), vals in seen.items():
        print(f"  {op:<16} k_tile {kt!s:>2}: " + ", ".join(f"{g} regs ({lb} B local)" for g, lb in sorted(vals, key=str)))
    mismatched = [r for r in rows if r["shared_bytes"] != "" and r["shared_bytes"] != r["contract_shared_bytes"]]
    print(f"static shared bytes == SparseTiling.shared_bytes in {sum(1 for r in rows if r['shared_bytes'] != '') - len(mismatched)}"
          f" runs, differs in {len(mismatched)}")
    failed = [r for r in rows if r["ok"] is not True]
    print(f"{len(rows)} runs, {len(failed)} failed (tolerance {TOL:g})")

    if out_dir:
        with open(os.path.join(out_dir, "sparse_check.csv"), "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=FIELDS)
            writer.writeheader()
            writer.writerows(rows)
        meta = {"device": name, "compute_capability": list(dev.compute_capability),
                "sm_count": dev.MULTIPROCESSOR_COUNT, "torch": torch.__version__, "numba": numba.__version__,
                "numpy": np.__version__, "git_sha": git_sha(),
                "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "tolerance": TOL}
        try:
            import numba_cuda
            meta["numba_cuda"] = numba_cuda.__version__
        except ImportError:
            pass
        with open(os.path.join(out_dir, "sparse_check_meta.json"), "w") as f:
            json.dump(meta, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
