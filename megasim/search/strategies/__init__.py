"""Search strategies. Each is a module with ``OPTIONS`` (name -> default) and one entry point
``run(space, evaluator, budget, options, seed) -> list[Record]``; the registry is a plain dict."""

from __future__ import annotations

from types import ModuleType

from megasim.errors import MegasimError
from megasim.search.strategies import annealing, diff_evo, exhaustive, multifidelity, random_sample

STRATEGIES: dict[str, ModuleType] = {}
DEFAULT_STRATEGY = "multifidelity"


def register(name: str, module: ModuleType) -> None:
    if name in STRATEGIES:
        raise MegasimError(f"strategy {name!r} is registered twice")
    STRATEGIES[name] = module


for _name, _module in (("exhaustive", exhaustive), ("random", random_sample), ("annealing", annealing),
                       ("diff_evo", diff_evo), ("multifidelity", multifidelity)):
    register(_name, _module)


def get_strategy(name: str) -> ModuleType:
    if name not in STRATEGIES:
        raise MegasimError(f"unknown strategy {name!r} (allowed: {', '.join(STRATEGIES)})")
    return STRATEGIES[name]
