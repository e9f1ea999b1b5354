"""One Dask worker per GPU (megasim.sweep.gpus), run on the CPU: two "devices" under Numba's CUDA
simulator. Each worker sees exactly its own device id, runs a kernel there, and GPU tasks spread over
both workers one at a time, results in the order given and tagged with the device."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("distributed", reason="dask[distributed] is not installed")
pytest.importorskip("numba", reason="numba is not installed (the [gpu] extra)")
if not __import__("numba").config.ENABLE_CUDASIM:
    pytest.skip("runs on the CUDA simulator only: two simulated devices stand in for the GPUs (on GPUs, a sweep with gpus)", allow_module_level=True)

from numba import cuda  # noqa: E402  (the simulator: tests/conftest.py sets NUMBA_ENABLE_CUDASIM first)

from megasim.errors import InputError  # noqa: E402
from megasim.sweep.gpus import check_devices, gpu_client, map_on_gpus, tag_rows  # noqa: E402

pytestmark = pytest.mark.cudasim


@cuda.jit
def _add_one(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1.0


def _kernel_on_this_worker(item: int) -> list[dict]:
    """A layer's 'measurement' stand-in: a kernel run on the worker's device (the simulator here)."""
    import numpy as np
    from numba import config
    d = cuda.to_device(np.full(8, float(item)))
    _add_one[1, 8](d)
    return [{"item": item, "result": float(d.copy_to_host().sum()), "simulator": bool(config.ENABLE_CUDASIM),
             "pid": os.getpid(), "devices_seen": len(cuda.gpus)}]


def test_each_gpu_worker_sees_one_device_and_tasks_spread_over_them():
    with gpu_client([0, 1], env={"NUMBA_ENABLE_CUDASIM": "1"}) as client:
        seen = client.run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES"))
        assert sorted(seen.values()) == ["0", "1"]
        assert [w["resources"] for w in client.scheduler_info()["workers"].values()] == [{"GPU": 1}, {"GPU": 1}]
        rows = tag_rows(map_on_gpus(client, _kernel_on_this_worker, list(range(6))))
    assert [r["item"] for r in rows] == list(range(6))                 # the order given
    assert all(r["result"] == 8.0 * (r["item"] + 1) and r["simulator"] and r["devices_seen"] == 1 for r in rows)
    assert {r["cuda_device"] for r in rows} <= {"0", "1"}
    pids = {r["pid"]: r["cuda_device"] for r in rows}
    assert all(pids[r["pid"]] == r["cuda_device"] for r in rows)        # one device per worker process


@pytest.mark.parametrize("bad", [[], "0,1", [0, 0], [-1], ["gpu0"], [True]])
def test_bad_device_lists_are_one_line_errors(bad):
    with pytest.raises(InputError, match="not allowed"):
        check_devices(bad)
