"""The built-in GPU presets: one JSON spec file per GPU in `presets/`, looked up by name.

Names are matched case-insensitively, and a few common aliases are accepted (``h100`` for
``H100-SXM``). A name that is none of these raises a SpecError listing the allowed names.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from megasim.errors import SpecError
from megasim.hardware.files import spec_from_dict
from megasim.hardware.spec import GPUSpec

_FILES = {
    "V100": "v100.json",
    "A100": "a100.json",
    "RTX3090": "rtx3090.json",
    "H100": "h100.json",
    "H200": "h200.json",
}
_ALIASES = {"v100-sxm2": "V100", "a100-40gb": "A100", "rtx-3090": "RTX3090", "3090": "RTX3090",
            "h100-sxm": "H100", "h200-sxm": "H200"}


def preset_names() -> tuple[str, ...]:
    return tuple(_FILES)


@lru_cache(maxsize=None)
def _load(key: str) -> GPUSpec:
    text = resources.files("megasim.hardware").joinpath("presets", _FILES[key]).read_text()
    return spec_from_dict(json.loads(text), origin=f"preset {key}")


def get_gpu(name: str) -> GPUSpec:
    """The preset called `name` (case-insensitive, surrounding blanks ignored; aliases such as 'h100-sxm' accepted)."""
    if not isinstance(name, str):
        raise SpecError(f"GPU {name!r} is not allowed: give a preset name ({', '.join(_FILES)}) as a string")
    wanted = name.strip().lower()          # as layer names are: ' H100 ' is H100
    key = {k.lower(): k for k in _FILES}.get(wanted) or _ALIASES.get(wanted)
    if key is None:
        raise SpecError(f"unknown GPU {name!r} (allowed: {', '.join(_FILES)}; or --spec FILE)")
    return _load(key)
