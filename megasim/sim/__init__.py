"""The SimPy engine that predicts the runtime of a schedule of a TaskGraph on a GPUSpec."""

from megasim.sim.clock import ModelEnvironment
from megasim.sim.engine import PLACEMENTS, SimOptions, Simulation, launch_footprint, simulate
from megasim.sim.occupancy import Footprint, Occupancy, occupancy
from megasim.sim.result import LaunchRecord, SimResult

__all__ = ["Footprint", "LaunchRecord", "ModelEnvironment", "Occupancy", "PLACEMENTS", "SimOptions", "SimResult", "Simulation",
           "launch_footprint", "occupancy", "simulate"]
