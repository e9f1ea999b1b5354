"""The model's default implementation for every 3x3, stride-1 convolution of the user-path benchmarks
(the 13 Table-2 layers and the catalogue's VGG-16, ResNet-50, YOLOv3 and DenseNet-161 layers, batch 64,
and ResNet-50's at ``TRAIN_BATCH``, the batch of ``networks_gpu``'s training check; NCHW), for a GPU, written to a choice cache (``megasim.algorithms.winograd.choice.ChoiceCache``) that the
GPU runs then read instead of simulating on the GPU machine's time. No GPU needed.

    python -m experiments.benchmarks.precompute_choices --device "NVIDIA H100 80GB HBM3" --out choices.json
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from megasim.algorithms.winograd.choice import ChoiceCache, device_spec
from megasim.workloads.catalogue import CATALOGUE, TABLE2_NAMES, network_layers

NETWORKS = ("vgg16", "resnet50", "yolov3", "densenet161")
TRAIN_BATCH = 16        # experiments.benchmarks.networks_gpu's training check: a ResNet-50 at this batch


def shapes() -> list:
    """The distinct 3x3, stride-1 problems (names dropped: the cache keys on the shape)."""
    problems = [CATALOGUE[n] for n in TABLE2_NAMES] + [p for net in NETWORKS for p in network_layers(net)]
    problems += [dataclasses.replace(p, n=TRAIN_BATCH) for p in network_layers("resnet50")]
    out, seen = [], set()
    for p in problems:
        if (p.r, p.s, p.stride) != (3, 3, 1):
            continue
        key = p.spec_string()
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", required=True, help="the GPU's name as CUDA reports it")
    ap.add_argument("--out", required=True, help="the choice cache file (JSON) to fill")
    args = ap.parse_args(argv)
    spec, reason = device_spec(args.device)
    cache = ChoiceCache(args.out)
    todo = shapes()
    for i, p in enumerate(todo, 1):
        t0 = time.perf_counter()
        c = cache.choose(p, spec, spec_reason=reason)
        print(f"[{i}/{len(todo)}] {p.spec_string()}: {c.plan.schedule} tile {c.plan.params.tile}, "
              f"{c.predicted_us:.1f} us ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
