"""A GPU program does not depend on Python's string-hash seed: the arena's buffer numbering (and so
every offset in the emitted tables) follows the nodes' slot order, never a set's iteration order.
Two processes with different ``PYTHONHASHSEED`` must build the same program."""

from __future__ import annotations

import json
import os
import subprocess
import sys

CHILD = r"""
import hashlib, json
from rammer import plugins, zoo
from rammer.backends.gpu.compiler import compile_program
from rammer.frontend import load
be = plugins.backends()["cuda"]
graph = be.prepare_graph(load(zoo.build("seq2seq-small", seed=0))).graph
prog = compile_program(graph, be, be.vdevice("a100"))
print(json.dumps({"arena": prog.report["arena_bytes"], "tensors": sorted(prog.tensors.items()),
                  "tables": hashlib.sha256(repr(prog.tables).encode()).hexdigest()}))
"""


def _program(seed: str) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_program_is_the_same_under_two_hash_seeds():
    # Seeds 1 and 2 gave two arena sizes (48,640 and 48,000 bytes) while buffer ids followed set order.
    assert _program("1") == _program("2")
