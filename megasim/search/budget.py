"""The budget every strategy runs under: at most `budget` evaluations, no point evaluated twice.

A ``Tracker`` stands between a strategy and its evaluator. It counts every point sent to the
evaluator (at either fidelity) against the budget, answers repeated points from memory, and turns
points that fail the space's constraints into records with their reason without spending budget
(Kernel Tuner does not count restricted configurations either). A point the evaluator marks
``duplicate`` (it builds the same program as a point already evaluated: ``extras["duplicate"]``) is
answered but not counted either, so a budget of B is B distinct programs when the space has them.
``records`` is what the strategy returns: every counted evaluation, in order.
"""

from __future__ import annotations

import math

from typing import Any

from megasim.errors import MegasimError
from megasim.search.record import Record
from megasim.search.space import SearchSpace


def check_options(strategy: str, options: dict[str, Any] | None, allowed: dict[str, Any],
                  ranges: dict[str, tuple[float, float]] | None = None) -> dict[str, Any]:
    """The declared defaults updated with the given options; one-line error for an unknown one, or for
    a value that is not a number of its default's kind (an integer where the default is one) or lies
    outside its closed range in ``ranges`` (name -> (lowest, highest))."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        listed = ", ".join(sorted(allowed)) or "none"
        raise MegasimError(f"unknown option(s) {', '.join(unknown)} for strategy {strategy!r} (allowed: {listed})")
    for name, value in options.items():
        integral = isinstance(allowed[name], int)
        kinds = (int,) if integral else (int, float)
        low, high = (ranges or {}).get(name, (-math.inf, math.inf))
        if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value) or not low <= value <= high:
            what = "an integer" if integral else "a finite number"
            span = f" from {low:g} to {high:g}" if math.isfinite(low) or math.isfinite(high) else ""
            raise MegasimError(f"option {name}={value!r} of strategy {strategy!r} is not allowed: it must be {what}"
                               f"{span}")
    return {**allowed, **options}


class Tracker:
    def __init__(self, space: SearchSpace, evaluator: Any, budget: int) -> None:
        if budget < 1:
            raise MegasimError(f"budget={budget} is not allowed: it must be at least 1")
        self.space, self.evaluator, self.budget = space, evaluator, budget
        self.records: list[Record] = []
        self._seen: dict[tuple[bool, str], Record] = {}
        self._coarse = evaluator.coarse() if hasattr(evaluator, "coarse") else None

    @property
    def has_coarse(self) -> bool:
        return self._coarse is not None

    @property
    def remaining(self) -> int:
        return self.budget - len(self.records)

    @property
    def exhausted(self) -> bool:
        return self.remaining <= 0

    def seen(self, point: dict[str, Any], coarse: bool = False) -> Record | None:
        return self._seen.get((coarse and self.has_coarse, self.space.key(point)))

    def evaluate(self, points: list[dict[str, Any]], coarse: bool = False) -> list[Record]:
        """Records for the points, in order, stopping where the budget runs out (so the list may be
        shorter than `points`). Known and constraint-rejected points cost nothing."""
        coarse = coarse and self.has_coarse
        evaluator = self._coarse if coarse else self.evaluator
        plan: list[tuple[dict[str, Any], Record | None]] = []
        new: list[dict[str, Any]] = []
        new_keys: set[str] = set()
        for p in points:
            key = self.space.key(p)
            known = self._seen.get((coarse, key))
            reason = None if known else self.space.constraint(p)
            if known is not None:
                plan.append((p, known))
            elif reason is not None:
                plan.append((p, Record(dict(p), None, reason, {"fidelity": "low" if coarse else "full"})))
            elif key in new_keys:
                plan.append((p, None))
            elif len(new) < self.remaining:
                new.append(p)
                new_keys.add(key)
                plan.append((p, None))
            else:
                break
        fresh = evaluator.evaluate(new) if new else []
        for rec in fresh:
            self._seen[(coarse, self.space.key(rec.params))] = rec
            if not rec.extras.get("duplicate"):
                self.records.append(rec)
        return [r if r is not None else self._seen[(coarse, self.space.key(p))] for p, r in plan]
