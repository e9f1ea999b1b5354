"""One evaluated point of a search space.

A Record is what every evaluator returns and every strategy consumes: the point's parameters (the
space's own values, e.g. ``d_ig_x=2``), the predicted or measured time in microseconds, or ``None``
with a ``reason`` when the point cannot run (a constraint, Algorithm 1 rejecting the parameters, a
point missing from a replayed cache). ``extras`` carries evaluator-specific data: the absolute plan
parameters (``D_IG``, ``D_GO``, the ``--param`` string), the fidelity (batch) it was evaluated at,
whether it came from a cache, the simulation wall time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Record:
    params: dict[str, Any]
    time_us: float | None
    reason: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return self.time_us is not None

    def objective(self) -> float:
        """The value strategies minimise: the time, or +inf for a point that cannot run."""
        return float(self.time_us) if self.time_us is not None else float("inf")


def best(records: list[Record]) -> Record | None:
    """The fastest valid record (the first one on ties), or None if none is valid."""
    valid = [r for r in records if r.valid]
    return min(valid, key=Record.objective) if valid else None
