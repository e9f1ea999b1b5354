"""Domain errors. Every user-facing mistake raises a subclass of MegasimError with a one-line message
that names the offending value, where it came from (a flag, a file and its field, an argument) and
what is allowed; the CLI prints it as one line, ``megasim: error: ...``, and exits with status 2.
docs/errors.md lists every class with an example and the documented limits."""


class MegasimError(ValueError):
    """Base class of all errors caused by user input (specs, layers, mapping parameters, files, flags)."""


class SpecError(MegasimError):
    """An unknown GPU name or an invalid GPU spec file (or measurements file)."""


class WorkloadError(MegasimError):
    """An unknown layer name, a malformed layer spec or an impossible convolution problem."""


class LoweringError(MegasimError):
    """A problem or implementation parameter the lowering cannot handle."""


class MappingError(MegasimError):
    """Mapping parameters that cannot be satisfied, or an invalid task order."""


class SimulationError(MegasimError):
    """The model cannot finish: e.g. every resident block waits on a task that can never run."""


class InputError(MegasimError):
    """A command-line value or an input file (options, CSV rows, paths) that is malformed or out of range."""


class ResourceError(MegasimError):
    """Work above a documented limit (tasks, tensor size), refused before it starts (docs/errors.md)."""


class OutcomeError(MegasimError):
    """A run that finished without results it can stand behind (e.g. no data points to summarise)."""
