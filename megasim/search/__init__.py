"""The optimiser: strategies over a parameter space of mapping parameters, interchangeable
evaluators (the simulator, a replayed cache, later the GPU) and a Kernel Tuner-format result cache.
See docs/optimizer.md."""

from megasim.search.cache import Cache, device_name
from megasim.search.evaluators import CacheEvaluator, GPUEvaluator, SimulatorEvaluator, point_plan
from megasim.search.optimize import SearchResult, best_full, optimize, run_search
from megasim.search.record import Record
from megasim.search.space import SPACES, Parameter, SearchSpace, default_space, full_space
from megasim.search.strategies import DEFAULT_STRATEGY, STRATEGIES, get_strategy

__all__ = ["Cache", "CacheEvaluator", "DEFAULT_STRATEGY", "GPUEvaluator", "Parameter", "Record", "SPACES",
           "STRATEGIES", "SearchResult", "SearchSpace", "SimulatorEvaluator", "best_full", "default_space",
           "device_name", "full_space", "get_strategy", "optimize", "point_plan", "run_search"]
