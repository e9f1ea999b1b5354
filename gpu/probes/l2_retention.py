"""Does a written buffer survive in L2 while other data streams through? (a diagnostic)

Per size A (16, 32 MiB) and streamed size S: flush (400 MiB written), write A, read S MiB of other
data, then time one read of A (torch ``sum``, CUDA events, median of 25). When A's read time rises to
its flushed level, A has been evicted. Crude: the ``sum`` kernel reads at 1.6-2.6 TB/s even from L2,
so hit and miss differ by only 15-30%; it tells roughly how much other traffic a written buffer
survives (on the H200 about 16-24 MiB beside a 16 MiB buffer, 8-16 MiB beside a 32 MiB one: about
40 MiB in all, of the 60 MiB the driver reports), not a latency or a bandwidth.

    bash gpu/on_device.sh python -m gpu.probes.l2_retention      # writes $OUT/l2_probe.json
"""

from __future__ import annotations

import datetime
import json
import os
from gpu.diagnostics.output import out_dir_arg
from megasim.provenance import git_sha

A_MIB = (16, 32)
STREAMED_MIB = (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 100, 150, 300)


def main(argv: list[str] | None = None) -> None:
    out_dir = out_dir_arg(argv, __doc__.splitlines()[0])
    import torch
    mib = 1 << 20
    dev = torch.device("cuda")
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "git_sha": git_sha(),
           "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "rows": []}
    big = torch.empty(400 * mib // 4, device=dev)
    for a_mib in A_MIB:
        a = torch.empty(a_mib * mib // 4, device=dev)
        for s_mib in STREAMED_MIB:
            other = big[: max(1, s_mib * mib // 4)]
            times_us = []
            for _ in range(25):
                big.fill_(0.5)                 # flush: 400 MiB written
                a.fill_(1.0)                   # A written (dirty in L2)
                if s_mib:
                    other.sum()                # S MiB of other reads stream through
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                a.sum()
                e1.record()
                torch.cuda.synchronize()
                times_us.append(e0.elapsed_time(e1) * 1000.0)
            times_us.sort()
            row = {"a_mb": a_mib, "stream_mb": s_mib, "median_us": times_us[len(times_us) // 2], "min_us": times_us[0]}
            out["rows"].append(row)
            print(f"A {a_mib} MiB after {s_mib} MiB streamed: {row['median_us']:.2f} us (min {row['min_us']:.2f})")
    path = os.path.join(out_dir, "l2_probe.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
