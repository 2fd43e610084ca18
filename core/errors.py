"""Errors a user of rammer can meet.

Every error that reaches a user is a :class:`RammerError`: the CLI prints its
message on one line and exits non-zero (a traceback only with ``--debug``).
Messages name the node, op, tensor and what to do about it.
"""

from __future__ import annotations


class RammerError(Exception):
    """Base class for every error rammer reports to a user."""

    exit_code = 1


class ModelLoadError(RammerError):
    """The model file is missing, unreadable, malformed or unsafe."""


class UnsupportedOpError(RammerError):
    """One or more operators have no implementation (lists all of them)."""

    def __init__(self, message: str, ops: list[tuple[str, str, str]] | None = None):
        super().__init__(message)
        #: (op_type, domain, node name) for every unsupported node.
        self.ops = ops or []


class ShapeError(RammerError):
    """Shape or dtype inference failed, or a dimension is not static."""

    def __init__(self, message: str, needs_constant: str | None = None):
        super().__init__(message)
        #: The tensor whose value (not only shape) was needed at compile time.
        self.needs_constant = needs_constant


class IRVerificationError(RammerError):
    """The IR broke an invariant (a bug in a pass, or a malformed model)."""


class FeedError(RammerError):
    """A run-time input is missing, unknown, or of the wrong shape or dtype."""


class PluginError(RammerError):
    """A plugin could not be loaded, or registered something invalid."""


class BackendUnavailableError(RammerError):
    """The selected backend cannot run here (missing package or device)."""


class CompileError(RammerError):
    """A backend failed to compile a model."""


class ScheduleError(RammerError):
    """A schedule is invalid (lost rTask, broken dependency, deadlock...)."""


class OpExecutionError(RammerError):
    """An operator failed while executing; names the node and op."""


class IndexRangeError(OpExecutionError, FeedError):
    """An index read at run time lies outside the axis it indexes (say, a token id beyond a
    Gather's vocabulary).  The message names node, op, index, bound and position.  Both an
    :class:`OpExecutionError` (an op failed) and a :class:`FeedError`: the values are at fault, not
    the compiled program (a cached program is not rebuilt for it)."""
