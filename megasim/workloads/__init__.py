"""Convolution problems and the built-in layer catalogue."""

from megasim.workloads.catalogue import (CATALOGUE, DEFAULT_BATCH, TABLE2_NAMES, layer_names,
                                         network_layers, parse_layer)
from megasim.workloads.problem import ConvProblem

__all__ = ["CATALOGUE", "ConvProblem", "DEFAULT_BATCH", "TABLE2_NAMES", "layer_names",
           "network_layers", "parse_layer"]
