"""Measured sweeps across the GPUs of one host: one Dask worker per GPU, each seeing one device.

A measurement needs its GPU to itself: two runs sharing a device time each other. So a host with G
GPUs runs G worker processes (``gpu_cluster(devices)``), worker *i* started with
``CUDA_VISIBLE_DEVICES`` set to device *i* alone (the CUDA runtime of that process sees one device, its
device 0) and one thread, and holding the resource ``GPU=1``: a task submitted with
``resources={"GPU": 1}`` (``map_on_gpus``) runs only on such a worker, one at a time. The unit of work
is the caller's: for validation, one layer (its mappings are measured round-robin in one process,
sharing inputs and workspaces: ``gpu.calibrate.validate.measure_layer``), so the layers of a sweep
spread over the GPUs and the results come back in the order given, each row tagged with the device
that measured it. A GPU worker that dies is restarted by its nanny with the same device, and its task
is rerun.

This module never imports numba or ``gpu/``: the function measured is passed in by the caller (the
command line or a script on the GPU machine). The device ids are given explicitly (the caller counts
them, e.g. ``len(numba.cuda.gpus)``); extra environment for the workers (``env``) is passed the same
way, e.g. ``NUMBA_ENABLE_CUDASIM=1`` to run the whole thing on Numba's CUDA simulator without a GPU.
"""

from __future__ import annotations

import contextlib
import logging
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
    from megasim.sweep.cluster import CLUSTER_CONFIG
    with dask.config.set(CLUSTER_CONFIG):     # the nannies hand this configuration to their workers
        return SpecCluster(workers=gpu_worker_specs(devices, env),
                           scheduler={"cls": Scheduler, "options": {"dashboard": False, "dashboard_address": ":0"}},
                           silence_logs=logging.ERROR)


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


def _on_device(fn: Callable[..., Any], item: Any, args: tuple, kwargs: dict) -> tuple[str, Any]:
    return visible_device(), fn(item, *args, **kwargs)


def map_on_gpus(client: Any, fn: Callable[..., Any], items: Sequence[Any], *args: Any,
                **kwargs: Any) -> list[tuple[str, Any]]:
    """``fn(item, *args, **kwargs)`` for each item, one GPU task per item (resource GPU=1), results in
    the items' order as (device, result). `fn` must be importable by the workers (a module's function)."""
    futures = [client.submit(_on_device, fn, item, args, kwargs, resources={GPU_RESOURCE: 1}, pure=False)
               for item in items]
    return client.gather(futures)


def tag_rows(results: Sequence[tuple[str, list[dict[str, Any]]]], column: str = "cuda_device") -> list[dict[str, Any]]:
    """The rows of ``map_on_gpus`` over a function that returns a list of rows (e.g. a layer's measured
    mappings), flattened in order, each with the device that measured it under `column`."""
    return [{**row, column: device} for device, rows in results for row in rows]
