"""Shared resources as processor-sharing servers, and the factory the engine makes them with.

Every server is a ``ProcessorSharingServer`` (``base.py``: jobs, rate groups, virtual times, the next
completion on the clock); the four rules differ only in how they set the jobs' rates (``_rates``):

- ``shared``: ``SharedServer``, each of n jobs ``min(cap, 1/n)`` (``shared.py``);
- ``capped``: ``CappedSharedServer``, a cap per job class, water-filling (``shared.py``);
- ``readiness``: ``ReadinessSharedServer``, an SM whose blocks stall independently (``readiness.py``);
- ``age_weighted``: ``AgeWeightedReadinessServer``, the same with older blocks favoured (``readiness.py``).

``make_server(rule, clock, on_done, **params)`` makes one by its rule's name (``SERVERS``); which rule a
launch needs is ``megasim.sim.resources``'s choice.
"""

from __future__ import annotations

from typing import Callable

from megasim.sim.servers.base import ProcessorSharingServer
from megasim.sim.servers.readiness import AgeWeightedReadinessServer, ReadinessSharedServer
from megasim.sim.servers.shared import CappedSharedServer, SharedServer

SERVERS: dict[str, type[ProcessorSharingServer]] = {
    "shared": SharedServer,                     # params: cap
    "capped": CappedSharedServer,               # params: caps, class_of
    "readiness": ReadinessSharedServer,         # params: caps, class_of, further, mixed
    "age_weighted": AgeWeightedReadinessServer,  # params: caps, class_of, age_of, further, mixed, rho
}


def make_server(rule: str, clock, on_done: Callable[[int], None], **params) -> ProcessorSharingServer:
    """A server of rule `rule` (a key of ``SERVERS``) on `clock`, calling ``on_done(job)`` as jobs end."""
    try:
        cls = SERVERS[rule]
    except KeyError:
        raise ValueError(f"server rule {rule!r} is not known (known: {', '.join(SERVERS)})") from None
    return cls(clock=clock, on_done=on_done, **params)


__all__ = ["AgeWeightedReadinessServer", "CappedSharedServer", "ProcessorSharingServer", "ReadinessSharedServer",
           "SERVERS", "SharedServer", "make_server"]
