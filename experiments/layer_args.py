"""Layers named on an experiment script's command line, checked before any work.

A script that takes ``--layers`` runs exactly the problems named: a catalogue name at its own batch
(or at ``--batch`` when the script has one and it is given), a free spec such as
``N=16,C=96,K=96,H=28,W=28`` at the N it states. A ``--batch`` that contradicts a spec's N is refused
rather than silently applied, so results are never written under a name that is not what ran.
"""

from __future__ import annotations

from typing import Callable, Sequence

from megasim.errors import MegasimError
from megasim.workloads import ConvProblem, parse_layer


def checked_layers(names: Sequence[str], error: Callable[[str], None], batch: int | None = None,
                   flag: str = "--layers") -> list[ConvProblem]:
    """The problems of `names`; `error` (an ArgumentParser's) with one line naming the bad layer otherwise."""
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        error(f"--batch {batch!r} is not allowed: it must be an integer >= 1")
    problems = []
    for name in names:
        try:
            stated = parse_layer(name, source=flag)
        except MegasimError as exc:
            error(str(exc))
        if batch is not None and "=" in name and stated.n != batch:
            error(f"{flag} {name!r} states N={stated.n} and --batch {batch} asks for N={batch}: give one of them "
                  f"(a spec runs at the N it states)")
        problems.append(stated if batch is None else stated.with_batch(batch))
    return problems
