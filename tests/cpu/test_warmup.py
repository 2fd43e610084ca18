"""Cold kernel compiles split between this process and a helper (backends/cpu/warmup.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from rammer.time_limits import scaled_limit

_SCRIPT = textwrap.dedent("""
    import numpy as np
    import rammer
    from rammer.backends.cpu import warmup
    from cpu_helpers import compare, model, node, rand

    # Gemm with a fused Relu: the GEMM entry calls the elementwise interpreter by symbol, so
    # the helper's placeholder symbol must be replaced by the real one when it is loaded here.
    w, b = rand(48, 40, seed=1), rand(40, seed=2)
    m = model([node("Gemm", ["x", "w", "b"], ["g"]), node("Relu", ["g"], ["y"])],
              {"x": rand(7, 48)}, ["y"], {"w": w, "b": b})
    assert warmup.missing_entries(["k_gemm"]) == ["k_gemm"]
    report = compare(m, {"x": rand(7, 48, seed=3) - 0.5})
    assert "k_gemm" in warmup.LAST_HELPER["entries"], warmup.LAST_HELPER
    assert warmup.LAST_HELPER["returncode"] == 0, warmup.LAST_HELPER
    # the helper also compiled the micro-kernel modules the GEMM calls (its own, its panel packing and
    # the elementwise interpreter's, which any entry may run), and nothing built the others
    from rammer.backends.cpu import ukernel, ukernel_ew, ukernel_pack, ukernel_window, ukernel_winograd
    want = [ukernel.PACKED.key, ukernel_pack.PACK.key, ukernel_ew.EW.key]
    assert sorted(warmup.LAST_HELPER["code"]) == sorted(want), warmup.LAST_HELPER
    assert ukernel.PACKED._engine is not None
    for code in (ukernel.LDB, ukernel.ROWS, ukernel_window.WINDOW, ukernel_winograd.WINOGRAD):
        assert code._engine is None and not code.cached(), code.key
    assert warmup.missing_entries(["k_gemm"]) == []
    print("ok")
""")


@pytest.mark.slow
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="the warm-up helper needs a second CPU core")
def test_cold_entries_compile_in_a_helper_and_link_to_the_real_interpreter(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), RAMMER_CACHE_DIR=str(tmp_path / "rammer"),
               PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True,
                          timeout=scaled_limit(600))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")


def test_warm_cache_starts_no_helper():
    from rammer.backends.cpu import entries, warmup

    entries.entry_address("k_copy")
    warmup.LAST_HELPER.clear()
    warmup.warm(["k_copy"])
    assert warmup.LAST_HELPER == {}
