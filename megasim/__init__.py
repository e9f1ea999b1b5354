"""megasim: a discrete-event model of a GPU for studying how task mappings of megakernels perform.

Data flows one way: a ConvProblem (``megasim.workloads``) is lowered (``megasim.lowering``) into a
TaskGraph (``megasim.taskgraph``); a mapping (``megasim.mapping``) orders its tasks into launches; the
engine (``megasim.sim``) predicts the runtime on a GPUSpec (``megasim.hardware``).
"""

from megasim.errors import MegasimError

__all__ = ["MegasimError"]
__version__ = "0.1.0"
