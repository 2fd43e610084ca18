"""The steps of a block program (:class:`Call`, :class:`Signal`, :class:`Wait`) and :class:`CallColumns`,
what every rTask of a schedule runs as columns indexed by rTask id, the form a compiler with a million
rTasks hands to :func:`rammer.schedule.programs.from_schedule` instead of one :class:`Call` each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Union

import numpy as np

__all__ = ["Call", "Signal", "Wait", "Task", "Step", "ProgramError", "CallColumns"]


class ProgramError(ValueError):
    """A program that cannot be built or would race."""


class Call(NamedTuple):
    """Run rTask ``rtask_id`` of device function ``kernel``; ``args`` are, per parameter, an arena
    offset (pointer parameters) or a number (scalars).  ``reads``/``writes`` are arena ranges
    ``(start, length)`` in floats, used by :func:`check_races`.  A named tuple, not a frozen
    dataclass: a full-size model has 10^5 calls, which the GPU compiler makes with
    :meth:`_make` at a fraction of a frozen dataclass's ``__init__`` (six ``object.__setattr__``)."""

    kernel: str
    rtask_id: int
    args: tuple[int | float, ...]
    reads: tuple[tuple[int, int], ...] = ()
    writes: tuple[tuple[int, int], ...] = ()
    #: Calls of one operator (``op >= 0``) write disjoint parts of its outputs by construction:
    #: :func:`check_races` does not order them against each other.
    op: int = -1


@dataclass(frozen=True)
class Signal:
    """This block has finished everything before this step."""


class Wait(NamedTuple):
    """Wait until block ``block`` has signalled ``count`` times in this launch.  A named tuple, not
    a dataclass: a full-size model's programs have a million waits, and :func:`from_schedule` makes
    them with ``tuple.__new__`` at a fraction of a dataclass's cost (``count`` hides the tuple's
    ``count`` method, which nothing here calls: the field keeps the name every reader uses)."""

    block: int
    count: int  # type: ignore[assignment]


Step = Union[Call, Signal, Wait]  # noqa: UP007 -- a runtime alias, kept in the typing spelling


@dataclass(frozen=True)
class Task:
    """One rTask of a wave (for :func:`from_waves`)."""

    kernel: str
    rtask_id: int
    args: tuple[int | float, ...]
    reads: tuple[tuple[int, int], ...] = ()
    writes: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class CallColumns:
    """What each rTask runs, indexed by rTask id: rKernel ``kernels[kernel[r]]``, its rTask
    ``rtask_id[r]``, arguments ``args[arg[r]]``, arena ranges ``accesses[access[r]]`` (``(reads,
    writes)``) and operator ``op[r]``.  The distinct argument tuples and ranges are listed once: the
    rTasks of an operator share them, and a full-size model has a million rTasks, whose
    :class:`Call` objects alone cost seconds to make and to read back."""

    kernels: list[str]
    kernel: np.ndarray
    rtask_id: np.ndarray
    args: list[tuple[int | float, ...]]
    arg: np.ndarray
    accesses: list[tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]]
    access: np.ndarray
    op: np.ndarray

    def __len__(self) -> int:
        return int(self.kernel.size)

    def call(self, r: int) -> Call:
        """rTask ``r`` as a :class:`Call`."""
        reads, writes = self.accesses[int(self.access[r])]
        return Call(self.kernels[int(self.kernel[r])], int(self.rtask_id[r]), self.args[int(self.arg[r])], reads,
                    writes, int(self.op[r]))

    def calls(self, rtasks: np.ndarray) -> list[Call]:
        """The :class:`Call` of every rTask in ``rtasks``, in order, from C-level passes (calls of one
        operator share their argument and range tuples, as the compiler's own calls do)."""
        kernels = map(self.kernels.__getitem__, self.kernel[rtasks].tolist())
        args = map(self.args.__getitem__, self.arg[rtasks].tolist())
        accesses = list(map(self.accesses.__getitem__, self.access[rtasks].tolist()))
        return list(map(Call._make, zip(kernels, self.rtask_id[rtasks].tolist(), args, (a[0] for a in accesses),
                                        (a[1] for a in accesses), self.op[rtasks].tolist())))
