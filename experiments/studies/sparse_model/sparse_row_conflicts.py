"""Why the model's ECR is fastest-biased at mid sparsity: shared-memory conflicts on the weight rows.

ECR's multiply loop has each lane read the weight row of its own i-th stored nonzero (one 128-bit
shared load per 4 filters). On a dense map every lane of a warp reads the same row at the same
iteration; once zeros are scattered the lanes read different rows, and a 128-bit load of 8 lanes (a
quarter warp) whose distinct rows fall in the same 4-bank group (row stride k_tile + 4 floats, so
row j starts in group (j * stride mod 32) / 4: ``j % 8`` for k_tile 32) is replayed. The model prices the loop by its multiply-adds (the busiest
lane's iterations x k_tile) and not by these replays.

This script counts, on seeded maps of one VGG-19 layer (batch 1, the first ``--chunks`` channel
chunks of 4), per warp iteration of ECR's loop: the active lanes, the distinct weight rows, and the
shared-memory wavefronts of one 128-bit load under the rule "per quarter warp, the largest number of
distinct rows in one bank group" (same-row lanes share a wavefront; at least one per quarter warp
with an active lane). It is an analysis of the access pattern, not a measurement of the GPU.

    python -m experiments.studies.sparse_model.sparse_row_conflicts [--layer vgg19/conv3_2] [--chunks 8] [--out DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from experiments.provenance import provenance, write_results
from megasim.algorithms.sparse.tiling import weight_row_floats
from megasim.workloads import parse_layer
from megasim.workloads.sparse import SparsitySpec, sparse_feature_map

SPARSITIES = (0.0, 0.2, 0.5, 0.7, 0.9, 0.99)
C_CHUNK = 4
WARP = 32
QUARTER = 8


def loop_rows(nz: np.ndarray, c0: int, r: int, s: int) -> np.ndarray:
    """(pixels, c_chunk*r*s) weight-row index of each lane's i-th stored nonzero (-1 past its count)
    for the chunk starting at channel c0, padding 1, stride 1, pixels in (row, column) order."""
    c, h, w = nz.shape
    padded = np.zeros((c, h + 2, w + 2), bool)
    padded[:, 1:-1, 1:-1] = nz
    oy, ox = np.divmod(np.arange(h * w), w)
    window = np.stack([padded[c0 + cc, oy + rr, ox + ss] for cc in range(C_CHUNK) for rr in range(r)
                       for ss in range(s)], axis=1)
    order = np.argsort(~window, axis=1, kind="stable")
    count = window.sum(axis=1)
    return np.where(np.arange(window.shape[1])[None, :] < count[:, None], order, -1)


def conflict_stats(rows: np.ndarray, k_tile: int) -> dict[str, float]:
    """Per warp iteration (up to the warp's busiest lane): active lanes, distinct rows, wavefronts."""
    stride = weight_row_floats(k_tile)
    warps = rows[: rows.shape[0] // WARP * WARP].reshape(-1, WARP, rows.shape[1])
    iters = lanes = distinct = wavefronts = 0
    for warp in warps:
        for i in range(int((warp >= 0).any(axis=0).sum())):
            col = warp[:, i]
            active = col[col >= 0]
            iters += 1
            lanes += active.size
            distinct += np.unique(active).size
            for q in range(WARP // QUARTER):
                part = np.unique(col[q * QUARTER:(q + 1) * QUARTER])
                part = part[part >= 0]
                if part.size:   # the 4-bank group a row's 16 bytes start in
                    wavefronts += np.bincount((part * stride % 32) // 4, minlength=8).max()
    return {"warp_iterations": iters, "active_lanes": lanes / iters, "distinct_rows": distinct / iters,
            "wavefronts_per_load": wavefronts / iters}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", default="vgg19/conv3_2")
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--k-tile", type=int, default=32)
    ap.add_argument("--out", default="experiments/results/model/sparse_row_conflicts")
    args = ap.parse_args(argv)
    p = parse_layer(args.layer, batch=1)
    chunks = min(args.chunks, p.c // C_CHUNK)
    out = []
    print(f"{p.name}, batch 1, first {chunks} chunks of {C_CHUNK} channels, k_tile {args.k_tile}")
    print(f"{'sparsity':>8} {'iters/warp-chunk':>16} {'active lanes':>12} {'distinct rows':>13} {'wavefronts':>10}")
    for s in SPARSITIES:
        nz = sparse_feature_map((1, p.c, p.h, p.w), SparsitySpec(s, seed=3))[0] != 0
        stats = [conflict_stats(loop_rows(nz, ch * C_CHUNK, p.r, p.s), args.k_tile) for ch in range(chunks)]
        iters = sum(st["warp_iterations"] for st in stats)
        row = {"layer": p.name, "sparsity": s, "k_tile": args.k_tile,
               "iterations_per_warp_chunk": iters / (chunks * (p.h * p.w // WARP))}
        for key in ("active_lanes", "distinct_rows", "wavefronts_per_load"):
            row[key] = sum(st[key] * st["warp_iterations"] for st in stats) / iters
        out.append(row)
        print(f"{s:8.2f} {row['iterations_per_warp_chunk']:16.1f} {row['active_lanes']:12.1f} "
              f"{row['distinct_rows']:13.2f} {row['wavefronts_per_load']:10.2f}")
    csv_path, _ = write_results(out, Path(args.out), "sparse_row_conflicts",
                                provenance({"script": "experiments.studies.sparse_model.sparse_row_conflicts", "layer": p.name,
                                            "chunks": chunks, "k_tile": args.k_tile, "device": "none (analysis)"}))
    print(f"wrote {csv_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
