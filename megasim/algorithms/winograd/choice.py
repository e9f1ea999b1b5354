"""Which Winograd implementation a convolution runs by default on a GPU: the model's choice, made once
per shape, cached, inspectable and overridable.

A user who calls ``gpu.conv2d.prepare_conv2d`` or the PyTorch drop-in without naming parameters gets the
candidate the model predicts fastest on their GPU:

- **The spec.** ``device_spec(name)``: the calibrated spec of that GPU when the toolkit has one
  (``megasim/hardware/calibrated/``: the H200's own fit; the H100's costs transferred from the H200 with
  its own microbenchmarks), otherwise the preset whose name the device name contains, otherwise the
  preset with the closest SM count. The reason is part of the choice (``Choice.spec_reason``).
- **The candidates.** Every Winograd tile F(m x m) whose largest measured FP32 error (``MEASURED_REL_ERR``,
  normwise against float64 over the 13 Table-2 layers, H200) is at most ``max_rel_err``; with the NCHW
  layout the non-fused schedule (its transforms read and write NCHW: ``gpu.kernels.winograd.nchw``),
  with NHWC also the fused megakernel at each tile's recommended mapping (Algorithm 1, D_IG and D_GO at
  8x and 4x their tightest values, 2 or 4 pairs per transform thread).
- **The prediction.** Each candidate is simulated with the spec (``megasim.plan.predict``); the fastest
  wins, an earlier candidate on a tie. A layer larger than ``max_tasks`` tasks (default
  ``CHOICE_MAX_TASKS``, 1,000,000, so that a choice takes seconds, not minutes) is simulated at the largest batch
  that fits (``Choice.simulated_batch``) and its times scaled by the batch ratio: the candidates' costs
  all grow with the batch, so the ranking is that of the smaller batch; the scaled time leaves out the
  larger batch's smaller tail effects.

``ChoiceCache`` keeps choices in a JSON file keyed by (spec name and content hash, the model's source
fingerprint, problem, layout, tolerance, GEMM math), so a network's layers are chosen once per machine and
model version: a choice another version of the model made is made again (seconds), never replayed. The model's costs of the
transform tasks were calibrated on the NHWC kernels; the NCHW transforms do the same arithmetic and move
the same bytes through a shared-memory stage, which the model does not price separately.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from megasim.algorithms.winograd.implementation import candidate_plan
from megasim.algorithms.winograd.lowering import GEMM_MATHS
from megasim.algorithms.winograd.plugin import WinogradParams
from megasim.algorithms.winograd.winograd_math import SUPPORTED_TILES
from megasim.errors import InputError
from megasim.hardware.files import load_spec, spec_to_dict
from megasim.hardware.presets import get_gpu, preset_names
from megasim.hardware.spec import GPUSpec
from megasim.plan import Plan, estimate_tasks, predict, predicted_time_us
from megasim.search.cache import model_fingerprint
from megasim.workloads.problem import ConvProblem

LAYOUTS = ("NCHW", "NHWC")
# Largest normwise relative error against float64 measured per (GEMM math, tile) over the 13 Table-2 layers
# at batch 64 on the H200 (docs/gpu_kernels.md, "Correctness"). F(2x2) was not run at full size; its
# transforms hold only 0, +-1 and +-1/2, the smallest error of all tiles, so F(4x4)'s bound stands for it.
MEASURED_REL_ERR = {
    "fp32": {2: 3.4e-6, 4: 3.4e-6, 5: 3.6e-6, 6: 6.1e-6, 7: 2.9e-5},
    "3xtf32": {2: 7.2e-6, 4: 7.2e-6, 5: 6.7e-6, 6: 1.1e-5, 7: 4.9e-5},
}
# Half the toolkit's acceptance bar of 1e-4: every measured tile passes it, F(7x7) with 3xTF32 only just.
DEFAULT_MAX_REL_ERR = 5e-5
PAIRS_FUSED = (2, 4)
# The largest candidate simulated at the problem's own batch. The compiled engine runs 0.4-0.66 M tasks/s
# (docs/model.md), so the largest layers of the four networks at batch 64 choose in at most ~10 s (vgg16/conv1_2,
# NHWC, 18 candidates; 2-core VM). A smaller batch scaled up over-counts its own waves' fill and drain: im2win/conv12
# at batch 128 was predicted 0.258 ms from batch 92 against 0.193 ms simulated whole (measured 0.161 on the H100).
CHOICE_MAX_TASKS = 1_000_000
CALIBRATED_DIR = Path(__file__).resolve().parents[2] / "hardware" / "calibrated"
# Device name fragment -> the calibrated spec of that GPU (FP32 GEMM).
CALIBRATED_SPECS = {"H200": "h200.json", "H100": "h100_from_h200.json"}


@dataclass(frozen=True)
class Candidate:
    plan: Plan
    predicted_us: float


@dataclass(frozen=True)
class Choice:
    """What runs a problem by default, and why."""

    problem: ConvProblem
    plan: Plan                      # the winning candidate, parameters resolved
    predicted_us: float             # the model's time of it at the problem's batch (scaled from simulated_batch)
    spec_name: str
    spec_reason: str
    layout: str
    max_rel_err: float
    simulated_batch: int
    candidates: tuple[Candidate, ...]

    def describe(self) -> str:
        lines = [f"{self.problem.spec_string()} ({self.layout}) on {self.spec_name} ({self.spec_reason}): "
                 f"{self.plan.schedule} {self.plan.param_string()}, predicted {self.predicted_us:.1f} us"
                 + (f" (simulated at batch {self.simulated_batch})" if self.simulated_batch != self.problem.n else "")]
        for c in sorted(self.candidates, key=lambda c: c.predicted_us):
            lines.append(f"  {c.predicted_us:10.1f} us  {c.plan.schedule} {c.plan.param_string()}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"problem": self.problem.spec_string(), "plan": _plan_dict(self.plan),
                "predicted_us": self.predicted_us, "spec_name": self.spec_name, "spec_reason": self.spec_reason,
                "layout": self.layout, "max_rel_err": self.max_rel_err, "simulated_batch": self.simulated_batch,
                "candidates": [{"plan": _plan_dict(c.plan), "predicted_us": c.predicted_us} for c in self.candidates]}

    @classmethod
    def from_dict(cls, problem: ConvProblem, d: dict[str, Any]) -> "Choice":
        return cls(problem, _plan_from(d["plan"]), float(d["predicted_us"]), d["spec_name"], d["spec_reason"],
                   d["layout"], float(d["max_rel_err"]), int(d["simulated_batch"]),
                   tuple(Candidate(_plan_from(c["plan"]), float(c["predicted_us"])) for c in d["candidates"]))


def _plan_dict(plan: Plan) -> dict[str, Any]:
    return {"schedule": plan.schedule, "params": dataclasses.asdict(plan.params)}


def _plan_from(d: dict[str, Any]) -> Plan:
    return Plan(d["schedule"], algorithm="winograd", params=WinogradParams(**d["params"]))


def device_spec(device_name: str) -> tuple[GPUSpec, str]:
    """(the spec the model uses for a GPU named ``device_name``, why that one)."""
    if not isinstance(device_name, str) or not device_name.strip():
        raise InputError(f"device name {device_name!r} is not allowed: want the GPU's name, e.g. 'NVIDIA H100 80GB HBM3'")
    upper = device_name.upper()
    for fragment, file in CALIBRATED_SPECS.items():
        if fragment in upper:
            return load_spec(CALIBRATED_DIR / file), f"calibrated spec {file} of this GPU"
    for name in preset_names():
        if name.upper() in upper:
            return get_gpu(name), f"no calibrated spec of this GPU; the {name} preset it names"
    return get_gpu("H100"), "no calibrated spec or preset of this GPU; the H100 preset"


def offered_tiles(max_rel_err: float, gemm_math: str = "fp32") -> tuple[int, ...]:
    """The tiles whose measured error is at most ``max_rel_err``."""
    if gemm_math not in GEMM_MATHS:
        raise InputError(f"gemm_math={gemm_math!r} is not allowed (allowed: {', '.join(GEMM_MATHS)})")
    if isinstance(max_rel_err, bool) or not isinstance(max_rel_err, (int, float)) or not max_rel_err > 0:
        raise InputError(f"max_rel_err={max_rel_err!r} is not allowed: want a number > 0 (default {DEFAULT_MAX_REL_ERR})")
    tiles = tuple(m for m in SUPPORTED_TILES if MEASURED_REL_ERR[gemm_math][m] <= max_rel_err)
    if not tiles:
        best = min(MEASURED_REL_ERR[gemm_math].values())
        raise InputError(f"max_rel_err={max_rel_err:g} admits no Winograd tile (the most accurate, F(2x2)/F(4x4) "
                         f"with {gemm_math}, measured {best:g})")
    return tiles


def candidates(problem: ConvProblem, layout: str = "NCHW", max_rel_err: float = DEFAULT_MAX_REL_ERR,
               gemm_math: str = "fp32") -> list[Plan]:
    """The plans the model chooses among (module docstring), their mappings resolved for ``problem``."""
    if layout not in LAYOUTS:
        raise InputError(f"layout={layout!r} is not allowed (allowed: {', '.join(LAYOUTS)})")
    plans = []
    for m in offered_tiles(max_rel_err, gemm_math):
        plans.append(Plan("nonfused", algorithm="winograd", params=WinogradParams(tile=m, gemm_math=gemm_math)))
        if layout == "NHWC":
            fused = Plan("fused", algorithm="winograd", params=WinogradParams(tile=m, gemm_math=gemm_math))
            plans += [candidate_plan(problem, fused, pairs) for pairs in PAIRS_FUSED]
    return plans


def _simulated_batch(problem: ConvProblem, layout: str, max_rel_err: float, gemm_math: str, max_tasks: int) -> int:
    one = problem.with_batch(1)
    most = max(estimate_tasks(one, p) or 1 for p in candidates(one, layout, max_rel_err, gemm_math))
    return max(1, min(problem.n, max_tasks // most))


def choose(problem: ConvProblem, spec: GPUSpec, *, layout: str = "NCHW", max_rel_err: float = DEFAULT_MAX_REL_ERR,
           gemm_math: str = "fp32", spec_reason: str = "given", max_tasks: int = CHOICE_MAX_TASKS) -> Choice:
    """The candidate ``spec`` predicts fastest for ``problem`` (module docstring)."""
    if not isinstance(problem, ConvProblem):
        raise InputError(f"problem must be a ConvProblem, got {type(problem).__name__}")
    batch = _simulated_batch(problem, layout, max_rel_err, gemm_math, max_tasks)
    sim_problem = problem.with_batch(batch)
    scored = []
    for plan in candidates(sim_problem, layout, max_rel_err, gemm_math):
        result, resolved = predict(sim_problem, spec, plan, max_tasks=max_tasks)
        scored.append(Candidate(resolved, predicted_time_us(result, resolved) * problem.n / batch))
    best = min(scored, key=lambda c: c.predicted_us)   # min keeps the first of equal times
    plan = best.plan
    if plan.schedule == "fused" and batch != problem.n:     # the same rule at the problem's own batch
        unmapped = dataclasses.replace(plan, params=dataclasses.replace(plan.params, d_ig=None, d_go=None, m=None))
        plan = candidate_plan(problem, unmapped, plan.params.transform_pairs_per_thread)
    return Choice(problem, plan, best.predicted_us, spec.name, spec_reason, layout, float(max_rel_err), batch,
                  tuple(scored))


class ChoiceCache:
    """Choices kept in a JSON file (``path``), keyed by spec (name and content hash), model fingerprint,
    problem, layout, tolerance and GEMM math; read on creation, written after each new choice."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else Path.home() / ".cache" / "megasim" / "winograd_choices.json"
        self._entries: dict[str, dict] = {}
        if self.path.exists():
            try:
                self._entries = json.loads(self.path.read_text())
            except (OSError, ValueError) as err:
                raise InputError(f"choice cache {self.path}: cannot read it ({err}); delete it or pass another path") from None

    @staticmethod
    def key(problem: ConvProblem, spec: GPUSpec, layout: str, max_rel_err: float, gemm_math: str) -> str:
        digest = hashlib.sha256(json.dumps(spec_to_dict(spec), sort_keys=True).encode()).hexdigest()[:12]
        return f"{spec.name}|{digest}|model-{model_fingerprint()}|{problem.spec_string()}|{layout}|{max_rel_err:g}|{gemm_math}"

    def choose(self, problem: ConvProblem, spec: GPUSpec, *, layout: str = "NCHW",
               max_rel_err: float = DEFAULT_MAX_REL_ERR, gemm_math: str = "fp32", spec_reason: str = "given") -> Choice:
        key = self.key(problem, spec, layout, max_rel_err, gemm_math)
        if key in self._entries:
            return Choice.from_dict(problem, self._entries[key])
        choice = choose(problem, spec, layout=layout, max_rel_err=max_rel_err, gemm_math=gemm_math,
                        spec_reason=spec_reason)
        self._entries[key] = choice.to_dict()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._entries, indent=1, sort_keys=True))
        tmp.replace(self.path)
        return choice
