"""GPU specs as data: the GPUSpec dataclass, spec files, and the built-in presets."""

from megasim.hardware.files import dump_spec, load_spec, spec_from_dict, spec_to_dict
from megasim.hardware.presets import get_gpu, preset_names
from megasim.hardware.spec import GPUSpec, TaskCost

__all__ = ["GPUSpec", "TaskCost", "dump_spec", "get_gpu", "load_spec", "preset_names",
           "spec_from_dict", "spec_to_dict"]
