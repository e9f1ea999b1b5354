"""Errors raised by the GPU executors (all subclasses of megasim's one domain-error base)."""

from megasim.errors import MegasimError


class KernelInputError(MegasimError):
    """An input the kernels cannot take: wrong shape, dtype, layout or option value."""


class MegakernelError(MegasimError):
    """A kernel reported a failure through its error array, e.g. a dependency wait that hit its poll
    bound (a child listed before its parent, or a parent that never ran)."""
