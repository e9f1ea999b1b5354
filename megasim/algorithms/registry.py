"""The algorithm registry: a plain dict from name to plug-in.

``register`` adds one (a name registered twice raises); ``get_algorithm`` looks one up by name with a
one-line error that lists the names allowed. Built-in plug-ins register when ``megasim.algorithms``
is imported; a user's plug-in registers when its module is imported (docs/extending.md).
"""

from __future__ import annotations

from megasim.algorithms.base import Algorithm
from megasim.errors import MegasimError

ALGORITHMS: dict[str, Algorithm] = {}


def register(algorithm: Algorithm) -> Algorithm:
    """Add a plug-in under its name; ValueError if that name is taken."""
    if algorithm.name in ALGORITHMS:
        raise ValueError(f"algorithm {algorithm.name!r} is already registered")
    ALGORITHMS[algorithm.name] = algorithm
    return algorithm


def get_algorithm(name: str, source: str = "--algo") -> Algorithm:
    if not isinstance(name, str) or name not in ALGORITHMS:
        raise MegasimError(f"{source} {name!r} is not allowed (allowed: {', '.join(ALGORITHMS)})")
    return ALGORITHMS[name]
