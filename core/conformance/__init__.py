"""The backend conformance suite, shipped with rammer as a pytest plugin.

    pytest --pyargs rammer.conformance --backend NAME -rs

checks any registered rammer backend, built-in or third-party, against what
it declares in its :class:`~rammer.backend.Capabilities`.  Each check skips,
with the reason shown, when the capability it needs is not declared; none
looks at the backend's name.

=====================  =====================================================
module                 checks
=====================  =====================================================
``check_node_cases``   ONNX's node test cases of the ops the backend claims
``check_zoo``          every small zoo model against ``reference`` within the
                       backend's declared rtol/atol
``check_feeds``        run-time errors for missing, unknown, mistyped and
                       misshapen feeds
``check_repeat``       repeat runs give bit-identical results; outputs and
                       feeds are not aliased
``check_schedules``    schedules of what the backend compiles pass
                       ``rammer.schedule.verify`` (``schedules``)
``check_cache``        the compile cache survives corrupt entries
                       (``compile_cache``)
``check_source``       generated source compiles with the declared compiler
                       (``emits_source``, ``source_compiler``)
=====================  =====================================================

A backend that is not available on this machine (a GPU backend on a CPU box)
gets the compile-only parts of the checks.  ``docs/writing-a-backend.md``
walks through a toy backend that passes the suite.
"""
