"""Measured sweeps across the GPUs of one host: one Dask worker per GPU, each seeing one device.

A measurement needs its GPU to itself: two runs sharing a device time each other. So a host with G
GPUs runs G worker processes (``gpu_cluster(devices)``), worker *i* started with
``CUDA_VISIBLE_DEVICES`` set to device *i* alone (the CUDA runtime of that process sees one device, its
device 0) and one thread, and holding the resource ``GPU=1``: a task submitted with
``resources={"GPU": 1}`` (``map_on_gpus``) runs only on such a worker, one at a time. The unit of work
is the caller's: for validation, by default one layer (its mappings are measured round-robin in one
process, sharing inputs and workspaces: ``gpu.calibrate.validate.measure_on_gpus``), or a chunk of a
layer's mappings, so the work of a sweep spreads over the GPUs and the results come back in the order
given, each row tagged with the device that measured it. A GPU worker that dies is restarted by its nanny with the same device, and its task
is rerun.

Tasks go out one per GPU at a time: ``map_on_gpus`` hands each GPU worker one item, and the next item to
the first worker that finishes (Dask would otherwise assign every task up front, a share of the
count to each worker, so a GPU with long items would finish last while the others idle). Splitting
the work into more items than GPUs, e.g. a layer's mappings into chunks, then balances the load. With
a key per item (``affinity``, e.g. the layer of a chunk) a worker stays on a key, and joins a key
another worker is on only where the run's own task times say that ends the key sooner
(``join_helps``): a worker's first item of a key pays what it builds once per key. ``timeline=``
records each task's worker-side start and end.

On the command line the devices are given as ``--gpus all`` or ``--gpus 0,2``: ``parse_device_list``
checks the text (integers >= 0, each once), ``select_devices`` checks them against the devices the
process sees and maps them through that process's ``CUDA_VISIBLE_DEVICES`` list, which the caller
passes in (``visible``).

This module never imports numba or ``gpu/``: the function measured is passed in by the caller (the
command line or a script on the GPU machine). The device ids are given explicitly (the caller counts
them, e.g. ``len(numba.cuda.gpus)``); extra environment for the workers (``env``) is passed the same
way, e.g. ``NUMBA_ENABLE_CUDASIM=1`` to run the whole thing on Numba's CUDA simulator without a GPU.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections import deque
from typing import Any, Callable, Iterator, Sequence

from megasim.errors import InputError

GPU_RESOURCE = "GPU"


def check_devices(devices: Sequence[int | str], source: str = "devices") -> tuple[str, ...]:
    """The device ids as strings; InputError for none, a repeat, or an id that is not a device index/UUID."""
    if isinstance(devices, (str, bytes)) or not devices:
        raise InputError(f"{source}={devices!r} is not allowed: give a list of device ids, e.g. [0, 1, 2, 3]")
    out = []
    for d in devices:
        text = str(d).strip()
        if isinstance(d, bool) or not text or not (text.isdigit() or text.startswith(("GPU-", "MIG-"))):
            raise InputError(f"{source} entry {d!r} is not allowed: give a device index (0, 1, ...) or a GPU UUID")
        out.append(text)
    if len(set(out)) != len(out):
        raise InputError(f"{source}={list(devices)!r} is not allowed: name each device once")
    return tuple(out)


def parse_device_list(text: str, source: str = "--gpus") -> str | tuple[int, ...]:
    """``"all"``, or the device indices of a comma-separated list (integers >= 0, each once); one-line
    InputError naming the value otherwise. Whether the devices exist is ``select_devices``'s check."""
    raw = str(text).strip()
    allowed = "give 'all' or device indices such as 0,1,2,3"
    if raw.lower() == "all":
        return "all"
    parts = [p.strip() for p in raw.split(",")]
    if not raw or any(not p for p in parts):
        raise InputError(f"{source} {text!r} is not allowed: {allowed}")
    out = []
    for p in parts:
        try:
            value = int(p)
        except ValueError:
            raise InputError(f"{source} {text!r} is not allowed: {p!r} is not an integer; {allowed}") from None
        if value < 0:
            raise InputError(f"{source} {text!r} is not allowed: {p!r} is negative; {allowed}")
        out.append(value)
    repeated = sorted({v for v in out if out.count(v) > 1})
    if repeated:
        raise InputError(f"{source} {text!r} is not allowed: device {repeated[0]} is named more than once")
    return tuple(out)


def select_devices(choice: str | tuple[int, ...], count: int, visible: str | None = None,
                   source: str = "--gpus") -> tuple[str, ...]:
    """The device ids for the workers (``gpu_cluster``) of a ``parse_device_list`` choice, given the
    `count` of devices this process sees and its CUDA_VISIBLE_DEVICES value `visible` (None: unset):
    index i is the i-th entry of `visible` when it is set, else device i. InputError for an index
    that does not exist."""
    if choice == "all":
        indices: tuple[int, ...] = tuple(range(count))
        if not indices:
            raise InputError(f"{source} all is not allowed: this machine has no CUDA device")
    else:
        indices = tuple(choice)
        missing = [i for i in indices if i >= count]
        if missing:
            have = f"devices 0-{count - 1}" if count > 1 else ("device 0" if count == 1 else "no device")
            raise InputError(f"{source} device {missing[0]} does not exist: this machine has {have}")
    entries = [v.strip() for v in visible.split(",")] if visible and visible.strip() else None
    if entries is not None and len(entries) < count:
        raise InputError(f"CUDA_VISIBLE_DEVICES={visible!r} lists {len(entries)} devices, but {count} are seen")
    return check_devices([entries[i] if entries is not None else str(i) for i in indices], source)


def gpu_worker_specs(devices: Sequence[int | str], env: dict[str, str] | None = None) -> dict[str, dict]:
    """The SpecCluster worker spec: one Nanny per device, CUDA_VISIBLE_DEVICES set to it, one thread,
    resource GPU=1."""
    from distributed import Nanny
    return {f"gpu-{d}": {"cls": Nanny, "options": {
        "nthreads": 1, "resources": {GPU_RESOURCE: 1}, "memory_limit": 0, "dashboard": False,
        "env": {**(env or {}), "CUDA_VISIBLE_DEVICES": d}}} for d in check_devices(devices)}


def gpu_cluster(devices: Sequence[int | str], env: dict[str, str] | None = None):
    """A local SpecCluster with one worker per device (see the module's docstring)."""
    import dask
    from distributed import Scheduler, SpecCluster
    from megasim.sweep.cluster import CLUSTER_CONFIG, CLUSTER_LOG_LEVEL
    with dask.config.set(CLUSTER_CONFIG):     # the nannies hand this configuration to their workers
        return SpecCluster(workers=gpu_worker_specs(devices, env),
                           scheduler={"cls": Scheduler, "options": {"dashboard": False, "dashboard_address": ":0"}},
                           silence_logs=CLUSTER_LOG_LEVEL)


@contextlib.contextmanager
def gpu_client(devices: Sequence[int | str], env: dict[str, str] | None = None) -> Iterator[Any]:
    """A client of a fresh ``gpu_cluster``; both closed at the end."""
    from distributed import Client
    cluster = gpu_cluster(devices, env)
    try:
        with Client(cluster) as client:
            client.wait_for_workers(len(cluster.workers))
            yield client
    finally:
        cluster.close()


def visible_device() -> str:
    """The device this worker process was given, from its name (``gpu-<device>``, ``gpu_worker_specs``:
    the worker whose CUDA_VISIBLE_DEVICES is that device); '' outside a GPU worker."""
    from distributed import get_worker
    try:
        name = str(get_worker().name)
    except ValueError:               # not in a worker
        return ""
    return name[len("gpu-"):] if name.startswith("gpu-") else ""


def _on_device(fn: Callable[..., Any], item: Any, args: tuple, kwargs: dict) -> tuple[str, Any, float, float]:
    """(device, fn's result, start, end): the worker's wall clock (``time.time``) around the call."""
    start = time.time()
    result = fn(item, *args, **kwargs)
    return visible_device(), result, start, time.time()


def gpu_workers(client: Any) -> list[str]:
    """The addresses of the client's workers that hold the GPU resource, in the scheduler's order."""
    workers = client.scheduler_info()["workers"]
    return [addr for addr, info in workers.items() if (info.get("resources") or {}).get(GPU_RESOURCE, 0) >= 1]


def next_item(todo: Sequence[int], keys: Sequence[Any] | None, last: dict[str, Any], worker: str,
              may_join: Callable[[Any], bool] | None = None) -> int | None:
    """The position in `todo` (item indices left) of the item `worker` runs next: with `keys` (one per
    item), the first item of the key it ran last (``last``: worker -> key), else the first of a key no
    other worker ran last, else the first item of a key other workers are on, the first such key for
    which ``may_join(key)`` holds (None: the first item left; no key passes: None, the worker waits);
    without keys, the first."""
    if keys is not None:
        if worker in last:
            same = next((j for j, i in enumerate(todo) if keys[i] == last[worker]), None)
            if same is not None:
                return same
        taken = {k for w, k in last.items() if w != worker}
        free = next((j for j, i in enumerate(todo) if keys[i] not in taken), None)
        if free is not None:
            return free
        if may_join is not None:
            asked: set = set()
            for j, i in enumerate(todo):
                if keys[i] not in asked:
                    asked.add(keys[i])
                    if may_join(keys[i]):
                        return j
            return None
    return 0


def join_helps(left: int, owners_free_in: Sequence[float], unit_s: float, first_unit_s: float) -> bool:
    """Whether one more worker on a key ends it sooner: `left` items of the key wait, its owners (the
    workers on it now) are free in ``owners_free_in`` seconds, each further item takes them ``unit_s``, and
    the joiner's first item of the key takes ``first_unit_s`` (what a worker builds once per key
    included). Compares the key's end without the joiner (the owners run all `left`) with its end when
    the joiner takes one item (list scheduling of the items on the owners)."""
    if left <= 0:
        return False
    if not owners_free_in:
        return True

    def end(n: int) -> float:
        free = sorted(max(0.0, float(f)) for f in owners_free_in)
        for _ in range(n):
            free[0] += unit_s
            free.sort()
        return max(free) if n else 0.0
    return max(end(left - 1), first_unit_s) < end(left)


def map_on_gpus(client: Any, fn: Callable[..., Any], items: Sequence[Any], *args: Any,
                affinity: Callable[[Any], Any] | None = None, timeline: list | None = None,
                **kwargs: Any) -> list[tuple[str, Any]]:
    """``fn(item, *args, **kwargs)`` for each item, one GPU task per item (resource GPU=1), results in
    the items' order as (device, result). `fn` must be importable by the workers (a module's function).

    Each GPU worker holds at most one of these tasks at a time: the first items go one to each worker,
    and each finished task's worker (or a worker that joined since, e.g. one its nanny restarted) gets
    the next item, so the load balances whatever the items' sizes. With ``affinity`` (item -> key, e.g.
    a chunk's layer), a worker takes the next item of the key it ran last, else the first item of a key
    no other worker is on; when every key left has a worker on it, an idle worker joins a key only where
    that ends the key sooner (``join_helps``, from the run's own task times: a worker's first item of a
    key, which pays what it builds once per key, and its further items; a key with no finished item yet
    is joined), and otherwise waits for the next task to finish (so a worker does not pay a large
    layer's set-up for its last small chunk while the worker on it would have finished first). Items of
    one key stay on one worker (sharing what it built for them) except where joining helps. A task
    whose worker dies reruns on another GPU worker. The first failing item's exception is raised.

    ``timeline``: a list that receives one dict per item, in the items' order: ``item``, ``key``,
    ``device``, ``worker``, ``first_of_key`` (the worker's first item of that key), ``submitted`` and
    ``received`` (the client's ``time.time``), ``start`` and ``end`` (the worker's, around ``fn``)."""
    from distributed import as_completed
    items = list(items)
    keys = [affinity(item) for item in items] if affinity is not None else None
    results: list[Any] = [None] * len(items)
    times: list[dict[str, Any] | None] = [None] * len(items)
    todo = list(range(len(items)))
    inflight: dict[Any, tuple[int, str, float]] = {}
    last: dict[str, Any] = {}          # worker -> the key of the item it ran last
    ran: dict[str, set] = {}           # worker -> the keys it has run
    first_s: dict[Any, list[float]] = {}   # key -> durations of workers' first items of it
    next_s: dict[Any, list[float]] = {}    # key -> durations of the further items
    done = as_completed()

    def may_join(key: Any) -> bool:
        if not first_s.get(key):
            return True                # nothing known of the key yet: join, as a free worker would
        first = max(first_s[key])
        unit = statistics.median(next_s[key]) if next_s.get(key) else first
        now = time.time()
        owners = [max(0.0, (first if times[i]["first_of_key"] else unit) - (now - sent))
                  for i, _, sent in inflight.values() if keys[i] == key]
        return join_helps(sum(keys[i] == key for i in todo), owners, unit, first)

    def submit(worker: str, position: int) -> None:
        i = todo.pop(position)
        first = True
        if keys is not None:
            last[worker] = keys[i]
            first = keys[i] not in ran.setdefault(worker, set())
            ran[worker].add(keys[i])
        future = client.submit(_on_device, fn, items[i], args, kwargs, resources={GPU_RESOURCE: 1},
                               workers=[worker], allow_other_workers=True, pure=False)
        inflight[future] = (i, worker, time.time())
        times[i] = {"item": i, "key": None if keys is None else str(keys[i]), "worker": worker,
                    "first_of_key": first, "submitted": time.time()}
        done.add(future)

    def feed() -> None:
        busy = {w for _, w, _ in inflight.values()}
        for worker in gpu_workers(client):
            if not todo:
                return
            if worker not in busy:
                j = next_item(todo, keys, last, worker, may_join)
                if j is not None:
                    submit(worker, j)
        if todo and not inflight:      # every worker declined to join with nothing running: take the first
            workers = gpu_workers(client)
            if workers:
                submit(workers[0], next_item(todo, keys, last, workers[0]))

    feed()
    if todo and not inflight:
        raise InputError("the Dask client has no worker with the GPU resource: start one with gpu_cluster(devices)")
    for future in done:
        i, worker, _ = inflight.pop(future)
        device, result, start, end = future.result()
        results[i] = (device, result)
        entry = times[i]
        entry.update({"device": device, "worker": worker, "start": start, "end": end, "received": time.time()})
        if keys is not None:
            (first_s if entry["first_of_key"] else next_s).setdefault(keys[i], []).append(end - start)
        feed()
    if timeline is not None:
        timeline.extend(times)
    return results


def tag_rows(results: Sequence[tuple[str, list[dict[str, Any]]]], column: str = "cuda_device") -> list[dict[str, Any]]:
    """The rows of ``map_on_gpus`` over a function that returns a list of rows (e.g. a layer's measured
    mappings), flattened in order, each with the device that measured it under `column`."""
    return [{**row, column: device} for device, rows in results for row in rows]
