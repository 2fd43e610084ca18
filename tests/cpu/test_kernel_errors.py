"""Run-time kernel errors name the node, op, index and bound; random feeds index their tables
within range (issue 38, point 6).

A BERT-style model (token ids and token types gathered from embedding tables, the
types through Cast and Unsqueeze) runs under ``rammer run`` with random feeds, and
a feed with a bad index gets the same exact message from the cpu backend (one or
two vEUs, compiled or from the compile cache) as from the reference.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import make_model
from onnx import TensorProto, helper, numpy_helper

import rammer
from rammer.api import random_feeds
from rammer.cli import main
from rammer.errors import FeedError, OpExecutionError
from rammer.feed_bounds import index_bounds

VOCAB, TYPES, HIDDEN, SEQ = 100, 2, 16, 8


def bert_like() -> onnx.ModelProto:
    """ids -> Gather(word table) ; types -> Cast(int32) -> Unsqueeze -> Reshape -> Gather(type table);
    sum, LayerNorm, times the attention mask (an integer input that indexes nothing)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32), "word_table"),
             numpy_helper.from_array(rng.standard_normal((TYPES, HIDDEN)).astype(np.float32), "type_table"),
             numpy_helper.from_array(np.ones(HIDDEN, np.float32), "gamma"),
             numpy_helper.from_array(np.zeros(HIDDEN, np.float32), "beta"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0"),
             numpy_helper.from_array(np.array([1, SEQ], np.int64), "shape_1s")]
    nodes = [
        helper.make_node("Gather", ["word_table", "tok"], ["words"], name="embeddings/Gather"),
        helper.make_node("Cast", ["seg"], ["seg32"], to=TensorProto.INT32, name="cast_types"),
        helper.make_node("Unsqueeze", ["seg32", "axis0"], ["seg3"], name="unsqueeze_types"),
        helper.make_node("Reshape", ["seg3", "shape_1s"], ["seg2"], name="reshape_types"),
        helper.make_node("Gather", ["type_table", "seg2"], ["types"], name="embeddings/Gather_1"),
        helper.make_node("Add", ["words", "types"], ["summed"], name="add"),
        helper.make_node("LayerNormalization", ["summed", "gamma", "beta"], ["normed"], axis=-1, name="ln"),
        helper.make_node("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT, name="cast_mask"),
        helper.make_node("Unsqueeze", ["maskf", "axes_last"], ["mask3"], name="unsqueeze_mask"),
        helper.make_node("Mul", ["normed", "mask3"], ["out"], name="masked"),
    ]
    inits.append(numpy_helper.from_array(np.array([2], np.int64), "axes_last"))
    return make_model(nodes, [("tok", TensorProto.INT64, [1, SEQ]), ("seg", TensorProto.INT64, [1, SEQ]),
                              ("mask", TensorProto.INT64, [1, SEQ])],
                      [("out", TensorProto.FLOAT, [1, SEQ, HIDDEN])], inits, name="bert_like")


def feeds(**bad) -> dict[str, np.ndarray]:
    out = {"tok": np.arange(SEQ, dtype=np.int64).reshape(1, SEQ), "seg": np.zeros((1, SEQ), np.int64),
           "mask": np.ones((1, SEQ), np.int64)}
    for name, (where, value) in bad.items():
        out[name][where] = value
    return out


WORD_MESSAGE = ("Gather node 'embeddings/Gather' (op Gather): index 130 out of range [-100, 100) in input 'tok' "
                "at [0, 5]; indices must lie in that range")


def test_index_bounds_follow_the_graph_not_the_names():
    graph = rammer.load(bert_like())
    # types reach their 2-row table through Cast, Unsqueeze and Reshape; the mask indexes nothing
    assert index_bounds(graph) == {"tok": VOCAB, "seg": TYPES}
    drawn = random_feeds(graph.inputs, 0, graph)
    assert drawn["tok"].max() < VOCAB and drawn["seg"].max() < TYPES and set(np.unique(drawn["seg"])) == {0, 1}
    assert drawn["mask"].max() >= TYPES  # the usual [0, 10) where no table bounds the values
    assert random_feeds(graph.inputs, 0)["seg"].max() >= TYPES  # without the graph: as before


def test_random_feeds_run_on_the_cpu_backend():
    model = rammer.compile(bert_like(), backend="cpu", cache=False, veus=2)
    out = model(model.random_feeds(0))["out"]
    assert out.shape == (1, SEQ, HIDDEN) and np.isfinite(out).all()


def test_random_feeds_of_a_cache_hit_draw_indices_within_their_tables(cache_dir, tmp_path):
    # a cache hit holds placeholders for its compiled nodes: the Gathers are found in the whole graph
    path = tmp_path / "bert_like.onnx"
    onnx.save(bert_like(), str(path))
    rammer.compile(str(path), backend="cpu")
    hit = rammer.compile(str(path), backend="cpu")
    assert not any(n.op_type == "Gather" for n in hit.graph.nodes)
    drawn = hit.random_feeds(0)
    assert drawn["tok"].max() < VOCAB and drawn["seg"].max() < TYPES
    assert set(hit.random_feeds(0, names=["seg"])) == {"seg"}


def test_rammer_run_with_random_feeds(tmp_path, capsys):
    path = tmp_path / "bert_like.onnx"
    onnx.save(bert_like(), str(path))
    assert main(["run", str(path), "-b", "cpu", "--repeat", "1", "--warmup", "0"]) == 0, capsys.readouterr().err
    assert "output out: float32[1, 8, 16]" in capsys.readouterr().out


def test_rammer_bench_cases_draw_indices_within_their_tables(tmp_path):
    from rammer.bench.matrix import build_case

    path = tmp_path / "bert_like.onnx"
    onnx.save(bert_like(), str(path))
    case = build_case(str(path), 1, 0)
    assert case.feeds["tok"].max() < VOCAB and case.feeds["seg"].max() < TYPES


@pytest.mark.parametrize("veus", [1, 2])
def test_a_bad_index_names_node_op_index_bound_and_input(veus):
    model = rammer.compile(bert_like(), backend="cpu", cache=False, veus=veus)
    with pytest.raises(OpExecutionError) as info:
        model(feeds(tok=((0, 5), 130)))
    assert str(info.value) == WORD_MESSAGE
    with pytest.raises(OpExecutionError, match=r"^Gather node 'embeddings/Gather_1' \(op Gather\): index -3 out of "
                                               r"range \[-2, 2\) in input 'seg2' at \[0, 2\];"):
        model(feeds(seg=((0, 2), -3)))
    assert model(feeds())["out"].shape == (1, SEQ, HIDDEN)  # and the model runs on


def test_the_reference_says_the_same():
    model = rammer.compile(bert_like(), backend="reference")
    with pytest.raises(OpExecutionError) as info:
        model(feeds(tok=((0, 5), 130)))
    assert str(info.value) == WORD_MESSAGE


def test_a_cached_program_names_the_node_too(cache_dir):
    rammer.compile(bert_like(), backend="cpu", veus=2)  # fills the cache
    model = rammer.compile(bert_like(), backend="cpu", veus=2)
    assert model.executable.cache_status == "hit"
    with pytest.raises(OpExecutionError) as info:
        model(feeds(tok=((0, 5), 130)))
    assert str(info.value) == WORD_MESSAGE
    # the values were at fault, not the cached program: it is not rebuilt for them
    assert isinstance(info.value, FeedError) and model.executable.cache_status == "hit"
    assert model(feeds())["out"].shape == (1, SEQ, HIDDEN)


def test_a_failure_the_host_check_cannot_locate_names_the_op_and_is_no_feed_error():
    # (a forged record: the row of a Gather marked failed while its indices are all in range)
    from rammer.backends.cpu.driver import FAILED_ROW, KERNEL_FAILED

    exe = rammer.compile(bert_like(), backend="cpu", cache=False, veus=1).executable
    exe.arena[exe.program.const_bytes:] = 0  # (every index 0: in range)
    names = exe.program.kernel_names
    row = next(r for r in range(exe.program.T.shape[0]) if names[int(exe.program.T[r, 0])] == "k_gather")
    exe.status[0] = KERNEL_FAILED
    exe.counters[FAILED_ROW] = row + 1
    with pytest.raises(OpExecutionError, match=r"^CPU backend: Gather node 'embeddings/Gather(_1)?': its kernel "
                                               r"k_gather reported an error .* could not locate") as info:
        exe._launch_failed(KERNEL_FAILED)
    assert not isinstance(info.value, FeedError)


def test_a_saved_model_names_the_node_too(tmp_path):
    rammer.compile(bert_like(), backend="cpu", cache=False, veus=2).save(str(tmp_path / "m.rammer"))
    loaded = rammer.load_compiled(str(tmp_path / "m.rammer"))
    with pytest.raises(OpExecutionError) as info:
        loaded(feeds(tok=((0, 5), 130)))
    assert str(info.value) == WORD_MESSAGE
