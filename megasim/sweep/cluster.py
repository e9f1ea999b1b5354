"""The Dask client that every parallel part of megasim shares, and a batched, ordered map over it.

Every parallel evaluation (a sweep's points, the optimiser's batches, calibration's case simulations,
validation's predictions, the experiment scripts) runs on a ``distributed.Client``:

- ``open_client(client=None, scheduler=None, workers=None, processes=True)``: the client given (left
  open), a client of the cluster at ``scheduler`` (``tcp://host:8786``), or a fresh ``LocalCluster``: of
  ``workers`` processes with one thread each (a sweep: a process per CPU keeps every simulation's Python
  part, lowering and set-up, which holds the GIL, running at once), or, with ``processes=False``, of one
  worker of ``workers`` threads in this process (the optimiser's own: the compiled event loop releases the
  GIL, and one process holds Numba and Dask once instead of once per worker). A cluster it starts, it
  closes.
- ``map_batches(client, fn, items, ...)``: ``fn(chunk, *args)`` over contiguous chunks of ``items``,
  results flattened back into the items' order. Simulations take 1-50 ms, a Dask task costs about a
  millisecond of scheduling, so work is handed out in chunks (about ``per_worker`` chunks per worker)
  rather than one task per item. ``client_map(client)`` wraps it as a ``map(fn, items)`` for code that
  takes a ``map_fn``.

Dask is imported inside these functions only, so commands that do not compute in parallel
(``megasim layers``, ``megasim simulate``) never import it.

Worker processes are spawned, not forked: each imports megasim afresh, and nothing of the calling
process (threads, locks, open files) is copied into them. A worker that dies (killed, out of memory)
is restarted by its nanny, and the scheduler reruns the tasks it held on another worker; a task is
given up after Dask's ``distributed.scheduler.allowed-failures`` deaths (3), with ``KilledWorker``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, Callable, Iterator, Sequence

from megasim.errors import InputError

MAX_WORKERS = 256


def available_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not on Linux
        return os.cpu_count() or 1


def check_workers(workers: int | None, source: str = "workers") -> int:
    """The worker count (default: the available CPUs); InputError naming the value otherwise."""
    if workers is None:
        return available_cpus()
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise InputError(f"{source}={workers!r} is not allowed: it must be an integer from 1 to {MAX_WORKERS} "
                         f"(default: the available CPUs, here {available_cpus()})")
    return workers


# Dask settings of the clusters megasim starts. Simulations' Python parts hold the GIL, and every periodic callback of a
# worker's event loop takes it from them: the statistical profiler (every 10 ms), the loop's health tick
# (20 ms), the system monitor (500 ms). With them at Dask's defaults a resnet-1 search's simulations
# took 9-14% longer in Dask workers than in a fork pool (2 workers, 2-core VM); with these, 4-8%.
CLUSTER_CONFIG = {"distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "1s",
                  "distributed.admin.system-monitor.interval": "5s",
                  "distributed.admin.system-monitor.gil.enabled": False}


# distributed's own logs of the clusters megasim starts: CRITICAL only. A task's error reaches the caller as
# the task's exception; what else its workers log at ERROR is, in practice, the shutdown race in which a
# worker's heartbeat meets a scheduler that has just closed (dask/distributed#7105): a traceback printed at
# the end of about half the calibrations, after a run that went well.
CLUSTER_LOG_LEVEL = logging.CRITICAL


def local_cluster(workers: int, env: dict[str, str] | None = None, processes: bool = True):
    """A LocalCluster of `workers` processes, one thread each (or, with ``processes=False``, one worker of
    `workers` threads in this process), no dashboard, no memory limit (the simulations' memory is bounded
    by --max-tasks, not by a share of the host), CLUSTER_CONFIG set, logs at CLUSTER_LOG_LEVEL."""
    import dask
    from distributed import LocalCluster
    shape = ({"n_workers": workers, "threads_per_worker": 1} if processes
             else {"n_workers": 1, "threads_per_worker": workers})
    with dask.config.set(CLUSTER_CONFIG):     # the nannies hand this configuration to their workers
        return LocalCluster(**shape, processes=processes, dashboard_address=":0", memory_limit=0,
                            silence_logs=CLUSTER_LOG_LEVEL, **({"env": env} if env else {}))


def check_scheduler_address(address: Any) -> None:
    """Refuse a scheduler address distributed cannot use (not a string, no or an unknown scheme, a TCP-like
    address without a port) before a client is made: a client's start on a bad address still opens its
    event-loop thread, which, started and failed many times in one process, has stalled a test run."""
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import get_backend
    if not isinstance(address, str) or not address.strip():
        raise InputError(f"scheduler {address!r} is not allowed: give an address such as tcp://host:8786")
    try:
        scheme, location = parse_address(address, strict=True)
        get_backend(scheme)
        if scheme in ("tcp", "tls", "ws", "wss"):
            parse_host_port(location)
    except ValueError as err:
        raise InputError(f"scheduler {address!r} is not allowed: {' '.join(str(err).split())} (give an "
                         f"address such as tcp://host:8786)") from None


SCHEDULER_TIMEOUT_S = 20.0    # docs/errors.md: an address where no scheduler answers is refused after 20 s


async def _identity(address: str) -> Any:
    from distributed.comm import connect
    comm = await connect(address, timeout=SCHEDULER_TIMEOUT_S)
    try:
        await comm.write({"op": "identity", "reply": True})
        return await comm.read()
    finally:
        comm.abort()


def probe_scheduler(address: str, timeout_s: float | None = None) -> None:
    """InputError unless a Dask scheduler answers at `address` within `timeout_s` (default
    SCHEDULER_TIMEOUT_S): a connection, distributed's handshake and an ``identity`` reply naming a
    Scheduler. distributed's own client waits for the handshake without a limit, so a server that accepts
    and says nothing (an HTTP server) hung it, and one that answers other bytes made it allocate what
    those bytes claimed a frame's length was (3 EiB); the probe runs in a thread of its own with the
    whole exchange under one deadline, and any failure is one line."""
    import asyncio
    import threading
    limit = SCHEDULER_TIMEOUT_S if timeout_s is None else timeout_s
    outcome: dict[str, Any] = {}

    def probe() -> None:
        try:
            outcome["reply"] = asyncio.run(asyncio.wait_for(_identity(address), limit))
        except BaseException as err:  # noqa: BLE001 - whatever the bytes did, the answer is one line
            outcome["error"] = err

    thread = threading.Thread(target=probe, name="megasim-scheduler-probe", daemon=True)
    thread.start()
    thread.join(limit + 5.0)
    err = outcome.get("error")
    hint = "start one with `dask scheduler`, workers with `dask worker ADDRESS`"
    if thread.is_alive() or isinstance(err, (TimeoutError, asyncio.TimeoutError)):
        raise InputError(f"scheduler {address!r} cannot be reached: no Dask scheduler answered within "
                         f"{limit:g} s ({hint})")
    if isinstance(err, OSError):
        raise InputError(f"scheduler {address!r} cannot be reached: {' '.join(str(err).split())} ({hint})")
    if err is not None:
        detail = " ".join(f"{type(err).__name__}: {err}".split())[:200]
        raise InputError(f"scheduler {address!r} is not allowed: what answers there is not a Dask scheduler "
                         f"({detail}; {hint})")
    reply = outcome.get("reply")
    if not isinstance(reply, dict) or reply.get("type") != "Scheduler":
        raise InputError(f"scheduler {address!r} is not allowed: what answers there is not a Dask scheduler "
                         f"(its identity is {str(reply)[:100]!r}; {hint})")


@contextlib.contextmanager
def open_client(client: Any = None, scheduler: str | None = None, workers: int | None = None,
                processes: bool = True) -> Iterator[Any]:
    """The client to compute on (see the module's docstring); closes only what it opened. ``processes``:
    whether a LocalCluster it starts has a process per worker or threads in this process."""
    if client is not None:
        if scheduler is not None:
            raise InputError("give a client or a scheduler address, not both")
        yield client
        return
    from distributed import Client
    if scheduler is not None:
        check_scheduler_address(scheduler)
        probe_scheduler(scheduler)
        try:
            own = Client(scheduler, timeout="20s")
        except ValueError as err:      # distributed's answer to an address it still cannot use
            raise InputError(f"scheduler {scheduler!r} is not allowed: {' '.join(str(err).split())} (give an "
                             f"address such as tcp://host:8786)") from None
        except (OSError, TimeoutError) as err:
            raise InputError(f"scheduler {scheduler!r} cannot be reached: {' '.join(str(err).split())} "
                             f"(start one with `dask scheduler`, workers with `dask worker ADDRESS`)") from None
        with own:
            yield own
        return
    cluster = local_cluster(check_workers(workers), processes=processes)
    try:
        with Client(cluster) as own:
            yield own
    finally:
        cluster.close()


def worker_count(client: Any) -> int:
    """The threads the client's cluster has (a LocalCluster of ours: one per process)."""
    return max(1, sum(client.nthreads().values()))


def chunks(items: Sequence, n: int) -> list[list]:
    """`items` cut into at most `n` contiguous chunks of near-equal length, in order."""
    items = list(items)
    if not items:
        return []
    n = max(1, min(len(items), n))
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        stop = start + size + (1 if i < extra else 0)
        out.append(items[start:stop])
        start = stop
    return out


def map_batches(client: Any, fn: Callable[..., list], items: Sequence, *args: Any, per_worker: int = 2,
                n_chunks: int | None = None) -> list:
    """``fn(chunk, *args)`` (a list per chunk) over contiguous chunks of `items`, about `per_worker`
    chunks per worker (or `n_chunks`), results in the items' order. `args` go to every chunk: pass large
    shared data as a future of ``client.scatter(..., broadcast=True)``."""
    if not items:
        return []
    parts = chunks(items, n_chunks or per_worker * worker_count(client))
    futures = [client.submit(fn, part, *args, pure=False) for part in parts]
    return [res for part in client.gather(futures) for res in part]


def _apply_chunk(items: Sequence[tuple], fn: Callable[..., Any]) -> list:
    return [fn(*item) for item in items]


def client_map(client: Any, per_worker: int = 2) -> Callable[..., list]:
    """A ``map(fn, *iterables)`` (a list, in order) that runs on `client` in chunks: a drop-in for the
    builtin ``map`` or a process pool's, where code takes a ``map_fn``."""
    def mapped(fn: Callable[..., Any], *iterables: Sequence) -> list:
        return map_batches(client, _apply_chunk, list(zip(*iterables)), fn, per_worker=per_worker)
    return mapped
