"""Schedules of what the backend compiles pass ``rammer.schedule.verify``.

Only for backends that declare ``capabilities.schedules``.  The contract:
the executable returned by ``Backend.compile`` exposes the rTask schedule
it runs as ``executable.schedule``, or as ``executable.schedules`` (a list,
e.g. one per compiled segment); ``rammer.schedule.verify(schedule)``
raises :class:`~rammer.errors.ScheduleError` (or returns a non-empty list
of problems) when an rTask is lost, a dependency is broken, or two rTasks
overlap on one vEU.  These checks compile only, so they also run for GPU
backends on machines without the GPU.
"""

from __future__ import annotations

from typing import Any

import pytest

from .target import Target, first_line
from .tiny import tiny_graph

TINY = "tiny"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "schedule_model" in metafunc.fixturenames:
        from .. import zoo

        metafunc.parametrize("schedule_model", [TINY] + [e.name for e in zoo.list_models() if e.small])


def _verify_function() -> Any:
    try:
        from .. import schedule as schedule_module
    except ImportError as exc:
        pytest.skip(f"rammer.schedule is not part of this build ({first_line(exc)})")
    verify = getattr(schedule_module, "verify", None)
    if verify is None:
        pytest.skip("rammer.schedule has no verify() in this build")
    return verify


def test_compiled_schedule_verifies(schedule_model: str, conformance_target: Target) -> None:
    from .. import zoo
    from ..errors import ScheduleError
    from ..frontend import load

    target = conformance_target
    if not target.caps.schedules:
        pytest.skip("the backend does not declare capabilities.schedules")
    verify = _verify_function()
    graph = tiny_graph(target) if schedule_model == TINY else load(zoo.build(schedule_model, seed=0))
    target.skip_unless_dtypes(graph)
    target.skip_unless_compilable(graph)
    compiled = target.compile(graph)
    schedules = _schedules_of(compiled.executable)
    assert schedules, (
        f"backend '{target.name}' declares capabilities.schedules but its executable "
        f"({type(compiled.executable).__name__}) has no .schedule or .schedules to verify")
    for i, schedule in enumerate(schedules):
        where = f"{schedule_model}" + (f" (schedule {i + 1} of {len(schedules)})" if len(schedules) > 1 else "")
        try:
            result = verify(schedule)
        except ScheduleError as exc:
            pytest.fail(f"the schedule of {where} is invalid: {exc}", pytrace=False)
        if isinstance(result, (list, tuple)):
            assert not result, f"the schedule of {where} is invalid: " + "; ".join(map(str, result[:10]))
        else:
            assert result is not False, f"rammer.schedule.verify rejected the schedule of {where}"


def _schedules_of(executable: Any) -> list[Any]:
    one = getattr(executable, "schedule", None)
    if one is not None:
        return [one]
    return list(getattr(executable, "schedules", None) or [])
