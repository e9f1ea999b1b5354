"""Each non-fused launch timed right after the launch before it, against timed alone (GPU machine).

The calibration times each kind's kernel alone, queued behind a ~1 ms spin kernel (``gpu.calibrate.occupancy``):
whatever the previous repetition left in the L2 has the spin's time to settle. In the pipeline a launch starts
1.4 us after the previous one ends (``gpu.calibrate.boundary``), on the L2 as that launch left it (its output
just written). This script times, per shape and per launch k >= 2 of the non-fused schedule (per-kind kernels,
inputs rotated over 3 workspaces):

- ``alone``: spin, start event, launch k, end event (the calibration's queued timing);
- ``after``: spin, launch k - 1 (untimed), start event, launch k, end event: launch k's own time on the L2 the
  previous launch leaves, the gap between them excluded (the start event follows launch k - 1's end);
- ``after_all``: the same with every launch before k issued untimed;
- ``prefix``: launches 1..k timed together; ``prefix_with_event``: the same with an event recorded before launch k,
  and ``in_prefix_after_event`` that event to the end;
- ``after_read``: the same as ``after`` with launch k - 1 replaced by a kernel that reads as many bytes as launch k - 1 wrote
  and writes nothing (a control: an L2 as busy but clean).

    bash gpu/on_device.sh python3 -m experiments.studies.nonfused_waves.after --out $OUT/after.json \\
        --shapes N=32,C=32,K=64,H=96,W=96 ...

Results and what they say: docs/findings.md, "The non-fused pipeline across channel counts".
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("nonfused_waves.after")


def time_after(before, fn, spin, repeats: int = 15, warmup: int = 2, timed_before: bool = False):
    """Median (ms) of ``fn(i)`` bracketed by events, ``before(i)`` issued untimed after the spin kernel; with
    ``timed_before`` (median of ``before`` and ``fn`` together, median of ``fn``'s part): ``before`` inside the
    timed range, an event between the two."""
    import numpy as np
    import torch
    stream = torch.cuda.current_stream()
    for i in range(warmup):
        spin()
        before(i % 3)
        fn(i % 3)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    mids = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    for i in range(repeats):
        spin()
        if timed_before:
            starts[i].record(stream)
        before(i % 3)
        (mids if timed_before else starts)[i].record(stream)
        fn(i % 3)
        ends[i].record(stream)
    torch.cuda.synchronize()
    if timed_before:
        return (float(np.median([s.elapsed_time(e) for s, e in zip(starts, ends)])),
                float(np.median([m.elapsed_time(e) for m, e in zip(mids, ends)])))
    return float(np.median([s.elapsed_time(e) for s, e in zip(starts, ends)]))


def measure_shape(name: str, spin, params: str, repeats: int) -> list[dict[str, Any]]:
    """Rows of one shape: per launch k >= 2, its alone / after / after_read medians in us."""
    import numpy as np
    import torch
    from gpu.calibrate.runs import nonfused_workspaces
    from gpu.runtime.prepared import PreparedSchedule
    from megasim.schedule import Schedule
    graph, schedule, wplan, wss = nonfused_workspaces(name, params, np.random.default_rng(12))
    preps = [PreparedSchedule(wplan, Schedule(f"launch{k}", (la,)), kernels="per_kind", check=False)
             for k, la in enumerate(schedule.launches)]
    task_of = np.repeat(np.arange(graph.num_tasks), np.diff(graph.access_ptr))
    written_by = np.bincount(task_of, weights=graph.access_bytes * graph.access_write, minlength=graph.num_tasks)
    rows = []
    for k in range(1, len(preps)):
        prev, this = preps[k - 1], preps[k]
        kind = graph.kind_names[int(graph.kind[int(schedule.launches[k].order[0])])]
        prev_kind = graph.kind_names[int(graph.kind[int(schedule.launches[k - 1].order[0])])]
        written = int(written_by[np.asarray(schedule.launches[k - 1].order)].sum())
        src = torch.empty(max(written // 4, 1), dtype=torch.float32, device="cuda")
        sink = torch.empty((), dtype=torch.float32, device="cuda")

        def read(i, src=src):
            torch.sum(src, dim=0, out=sink)

        def nothing(i):
            pass

        run = lambda i, p=this: p.run(wss[i])              # noqa: E731
        alone = time_after(nothing, run, spin, repeats)
        after = time_after(lambda i, p=prev: p.run(wss[i]), run, spin, repeats)
        after_read = time_after(read, run, spin, repeats)

        def all_before(i, k=k):
            for p in preps[:k]:
                p.run(wss[i])

        after_all = time_after(all_before, run, spin, repeats)
        whole, part = time_after(all_before, run, spin, repeats, timed_before=True)
        whole_no_event = time_after(nothing, lambda i, k=k: [p.run(wss[i]) for p in preps[:k + 1]], spin, repeats)
        rows.append({"layer": name, "plan_params": params, "launch": k + 1, "kind": kind, "after_kind": prev_kind,
                     "bytes_written_before": written, "alone_us": alone * 1e3, "after_us": after * 1e3,
                     "after_read_us": after_read * 1e3, "after_all_us": after_all * 1e3,
                     "prefix_us": whole_no_event * 1e3, "prefix_with_event_us": whole * 1e3,
                     "in_prefix_after_event_us": part * 1e3})
        r = rows[-1]
        log.info("%s launch %d (%s after %s, %.1f MiB written): alone %.2f us, after %.2f us (%+.2f), after a read "
                 "%.2f us (%+.2f), after all before it %.2f us (%+.2f); prefix %.2f us, with an event before it "
                 "%.2f us, its part %.2f us (%+.2f)", name, k + 1, kind, prev_kind, written / 2**20, r["alone_us"],
                 r["after_us"], r["after_us"] - r["alone_us"], r["after_read_us"], r["after_read_us"] - r["alone_us"],
                 r["after_all_us"], r["after_all_us"] - r["alone_us"], r["prefix_us"], r["prefix_with_event_us"],
                 r["in_prefix_after_event_us"], r["in_prefix_after_event_us"] - r["alone_us"])
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", nargs="+", required=True)
    ap.add_argument("--params", default="", help="non-fused plan parameters (default: the calibration's defaults)")
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args(argv)
    from experiments.studies.nonfused_waves.measure import check_inputs
    check_inputs("nonfused_waves.after", args.shapes, args.params)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("numba").setLevel(logging.WARNING)
    from gpu.calibrate.occupancy import Spinner
    from gpu.calibrate.validate import device_info
    from megasim.provenance import git_sha
    spin = Spinner()
    rows = [r for name in args.shapes for r in measure_shape(name, spin, args.params, args.repeats)]
    doc = {"what": __doc__.splitlines()[0], "params": args.params, "git_sha": git_sha(), "device": device_info(),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    log.info("wrote %s (%d rows)", args.out, len(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
