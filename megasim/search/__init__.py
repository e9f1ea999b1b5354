"""The optimiser: strategies over a parameter space of mapping parameters, interchangeable
evaluators (the simulator, a replayed cache, the GPU) and a Kernel Tuner-format result cache.
See docs/optimizer.md."""

from megasim.search.cache import Cache, device_name
from megasim.search.evaluators import CacheEvaluator, GPUEvaluator, SimulatorEvaluator
from megasim.search.optimize import SearchResult, best_full, optimize, run_search
from megasim.search.record import Record
from megasim.search.space import Parameter, SearchSpace, spaces_of
from megasim.search.strategies import DEFAULT_STRATEGY, STRATEGIES, get_strategy

__all__ = ["Cache", "CacheEvaluator", "DEFAULT_STRATEGY", "GPUEvaluator", "Parameter", "Record", "STRATEGIES",
           "SearchResult", "SearchSpace", "SimulatorEvaluator", "best_full", "device_name", "get_strategy", "optimize",
           "run_search", "spaces_of"]
