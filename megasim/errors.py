"""Domain errors. Every user-facing mistake raises a subclass of MegasimError with a one-line message
that names the offending value and what is allowed; the CLI turns them into exit status 2."""


class MegasimError(ValueError):
    """Base class of all errors caused by user input (specs, layers, mapping parameters)."""


class SpecError(MegasimError):
    """An unknown GPU name or an invalid GPU spec file."""


class WorkloadError(MegasimError):
    """An unknown layer name, a malformed layer spec or an impossible convolution problem."""


class LoweringError(MegasimError):
    """A problem or implementation parameter the lowering cannot handle."""


class MappingError(MegasimError):
    """Mapping parameters that cannot be satisfied, or an invalid task order."""


class SimulationError(MegasimError):
    """The model cannot finish: e.g. every resident block waits on a task that can never run."""
