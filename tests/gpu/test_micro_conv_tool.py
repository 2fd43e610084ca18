"""``ci/gpu_micro_conv.py --kernel-ab``: its numpy reference, and its refusal to compare conv rKernels whose
tiles differ (the lowering of this tree sizes the rTasks by its own tile, so an older tree's kernel with
another tile would run over the wrong rTasks: wrong outputs, or out-of-bounds reads)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from test_kernels_nn import _conv_ref

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "ci"))

import gpu_micro_conv  # noqa: E402


@pytest.mark.parametrize("case", [(1, 3, 7, 9, 5, 3, 1, 1, 1, 1), (2, 4, 8, 8, 6, 3, 2, 1, 2, 2)], ids=str)
def test_the_numpy_reference_is_the_tests_one(case):
    n, c, h, w, oc, k, s, p, d, g = case
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((oc, c // g, k, k)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    np.testing.assert_allclose(gpu_micro_conv._conv_numpy(x, wt, b, s, p, d, g),
                               _conv_ref(x, wt, b, (s, s), (p, p), (d, d), g), rtol=1e-5, atol=1e-5)


def test_kernel_ab_refuses_trees_whose_conv_tiles_differ(tmp_path):
    source = (ROOT / "backends" / "gpu" / "kernels_conv.py").read_text(encoding="utf-8")
    assert "CONV_REG_TILE = (2, 4)" in source
    old = tmp_path / "backends" / "gpu"
    old.mkdir(parents=True)
    (old / "kernels_conv.py").write_text(source.replace("CONV_REG_TILE = (2, 4)", "CONV_REG_TILE = (4, 4)"),
                                         encoding="utf-8")
    with pytest.raises(SystemExit, match="conv tiles differ"):
        gpu_micro_conv.kernel_ab(str(tmp_path), 1, ["c1x1 64->64 64px b2"])
