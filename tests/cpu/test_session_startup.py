"""A process that only asks for the ``cpu`` backend loads only the ``cpu`` plugin (the other backends'
compilers cost 0.3-0.5 s to import), while listing the backends still loads and checks them all."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from rammer.time_limits import scaled_limit

_CHILD = textwrap.dedent("""
    import json, sys
    from rammer import plugins

    backend = plugins.get_backend("cpu")
    loaded = sorted(m for m in sys.modules if m.startswith("rammer.backends.") and m.count(".") == 2)
    everything = sorted(plugins.backends())
    print(json.dumps({"name": backend.name, "loaded": loaded, "numba": "numba" in sys.modules,
                      "listed": everything}))
""")


def test_asking_for_the_cpu_backend_loads_only_its_plugin():
    done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=scaled_limit(120))
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["name"] == "cpu"
    assert got["loaded"] == ["rammer.backends.cpu"]
    assert not got["numba"]  # the availability check finds numba without importing it
    assert {"cpu", "reference", "cuda"} <= set(got["listed"])
