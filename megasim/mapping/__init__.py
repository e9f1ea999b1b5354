"""Task orders (mappings) of a TaskGraph into kernel launches, and their validity check."""

from megasim.mapping.algorithm1 import (Algorithm1Params, algorithm1, counts, default_params, recommended_params,
                                        scaled_params)
from megasim.mapping.orders import naive_fused, nonfused, random_order
from megasim.mapping.ready import ReadyLists, ready_lists
from megasim.mapping.schedule import DISPATCHES, STYLES, Launch, Schedule, check_valid, first_violation

__all__ = ["Algorithm1Params", "DISPATCHES", "Launch", "ReadyLists", "STYLES", "Schedule", "algorithm1", "check_valid",
           "counts", "default_params", "first_violation", "naive_fused", "nonfused", "random_order", "ready_lists",
           "recommended_params", "scaled_params"]
