"""Is the L2 bandwidth probe reading L2? (a diagnostic, session 19)

``gpu.calibrate.probe_l2`` measured 23.5 TB/s on an H100 and 9.9 on an H200, whose L2 is the same. Its
threads re-read the same elements every round from the same SM, about 64 KiB per SM, which fits an L1.
This times the probe with each round's reads rotated by ``rotate`` blocks (``_read4``): 0 is the old
probe; a rotation coprime to the SM count sends every re-read to another SM. Each setting is measured
``--repeats`` times, interleaved, after a kernel with no shared memory and after one that asks for the
most dynamic shared memory a block may have (the carveout the runtime then leaves L1 differs), so the
table says how much of the old reading was L1 and whether the new one depends on what ran before.

    bash gpu/on_device.sh python -m gpu.probe_l2_bandwidth --out $OUT/l2bw      # ~20 s
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
from pathlib import Path

ROTATIONS = (0, 1, 37, 101)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    from numba import cuda

    from gpu.calibrate import _empty_dyn, probe_l2
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    sm = int(dev.MULTIPROCESSOR_COUNT)
    big_shared = int(dev.MAX_SHARED_MEMORY_PER_BLOCK)          # without opt-in: 48 KiB
    dummy = cuda.device_array(1, dtype="float32")
    rows, methods = [], {}
    for rep in range(args.repeats):
        for before, shared in (("no shared memory", 0), (f"{big_shared} B of shared memory", big_shared)):
            for rotate in ROTATIONS:
                _empty_dyn[sm * 8, 128, 0, shared](dummy)
                cuda.synchronize()
                gbps, methods[rotate] = probe_l2(sm, rotate)
                rows.append({"repeat": rep, "before": before, "rotate": rotate, "gbps": gbps})
                print(f"rep {rep}  after a kernel with {before:>26}  rotate {rotate:>3}: {gbps / 1e3:6.2f} TB/s", flush=True)
    summary = []
    for before in dict.fromkeys(r["before"] for r in rows):
        for rotate in ROTATIONS:
            vals = [r["gbps"] for r in rows if r["before"] == before and r["rotate"] == rotate]
            summary.append({"before": before, "rotate": rotate, "median_gbps": statistics.median(vals),
                            "min_gbps": min(vals), "max_gbps": max(vals)})
    result = {"device": name, "sm_count": sm, "git_sha": os.environ.get("MEGASIM_GIT_SHA"),
              "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "methods": methods, "rows": rows, "summary": summary}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "l2_bandwidth_probe.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
