"""Differential fuzzing: random and mutated ONNX models run on a backend and on ``reference``.

``graphs`` makes valid random models, ``mutate`` breaks valid ones, ``oracle``
runs one case and classifies it, ``minimize`` shrinks a failing graph and
``campaign`` runs many cases in worker processes (a crash or a hang is a
finding, not the end of the run).  ``python ci/fuzz.py`` is the command line;
``tests/fuzz`` runs a bounded campaign in CI.  See docs/reliability.md.
"""
