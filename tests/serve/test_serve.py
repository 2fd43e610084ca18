"""Serving: the KServe v2 codec and batching (plain Python), and a 2-replica Ray Serve deployment on loopback."""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import rammer
import rammer.zoo
from rammer.errors import FeedError
from rammer.ir import TensorInfo
from rammer.serve.batching import batch_size, run_batched
from rammer.serve.kserve import decode_request, encode_response
from rammer.time_limits import scaled_limit


def test_kserve_codec_round_trip_and_errors():
    inputs = [TensorInfo("x", "float32", (2, 3))]
    body = {"id": "7", "inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32", "data": list(range(6))}],
            "outputs": [{"name": "y"}]}
    feeds, names, rid = decode_request(body, inputs)
    assert feeds["x"].dtype == np.float32 and feeds["x"].shape == (2, 3) and names == ["y"] and rid == "7"
    out = encode_response("m", {"y": np.arange(4, dtype=np.int64).reshape(2, 2)}, names, rid)
    assert out["outputs"][0] == {"name": "y", "shape": [2, 2], "datatype": "INT64", "data": [0, 1, 2, 3]}
    assert out["id"] == "7"
    for bad, match in [({"inputs": [{"name": "z", "shape": [1], "datatype": "FP32", "data": [1]}]}, "unknown input"),
                       ({"inputs": [{"name": "x", "shape": [2, 3], "datatype": "INT64", "data": [0] * 6}]},
                        "expects FP32"),
                       ({"inputs": [{"name": "x", "shape": [4], "datatype": "FP32", "data": [0] * 6}]},
                        "has shape \\[4\\] but the model takes \\[2, 3\\]"),
                       ({"inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32", "data": [0] * 5}]},
                        "does not fill"),
                       ({"nope": 1}, "inputs")]:
        with pytest.raises(FeedError, match=match):
            decode_request(bad, inputs)


def test_bad_requests_name_the_input_and_what_to_send():
    inputs = [TensorInfo("x", "float32", (4, 5, 3)), TensorInfo("m", "int64", (4, 5))]
    ok_x = {"name": "x", "shape": [2, 5, 3], "datatype": "FP32", "data": [0.0] * 30}
    ok_m = {"name": "m", "shape": [2, 5], "datatype": "INT64", "data": [1] * 10}
    feeds, _, _ = decode_request({"inputs": [ok_x, ok_m]}, inputs, batch_dim=True)
    assert feeds["x"].shape == (2, 5, 3) and feeds["m"].dtype == np.int64
    for items, match in [
        ([ok_x], "missing input\\(s\\) 'm': send each in \"inputs\" as {\"name\": \"m\", \"shape\": \\[N, 5\\], "
                 "\"datatype\": \"INT64\""),
        ([ok_x, ok_m, {"name": "y", "shape": [1], "datatype": "FP32", "data": [1]}],
         "unknown input 'y': this model's inputs are 'x' \\(FP32, shape \\[N, 5, 3\\]\\), 'm'"),
        ([dict(ok_x, datatype="FP64"), ok_m],
         "input 'x' is FP64 but the model expects FP32; send \"datatype\": \"FP32\""),
        ([dict(ok_x, shape=[2, 5, 4], data=[0.0] * 40), ok_m], "input 'x' has shape \\[2, 5, 4\\] but the model takes "
                                                            "\\[N, 5, 3\\]"),
        ([dict(ok_x, shape=[2, 15]), ok_m], "input 'x' has shape \\[2, 15\\]"),
        ([dict(ok_x, shape=[0, 5, 3], data=[]), ok_m], "at least 1"),
        ([ok_x, dict(ok_m, shape=[1, 5], data=[1] * 5)], "different row counts \\(dim 0: 'x' 2, 'm' 1\\)"),
        ([ok_x, ok_x, ok_m], "input 'x' is given twice"),
        ([dict(ok_x, data=[0.0] * 29), ok_m], "input 'x': \"data\" does not fill shape \\[2, 5, 3\\].*send 30 FP32"),
    ]:
        with pytest.raises(FeedError, match=match):
            decode_request({"inputs": items}, inputs, batch_dim=True)
    # Without batching the model's whole shape is what a client sends.
    with pytest.raises(FeedError, match="input 'x' has shape \\[2, 5, 3\\] but the model takes \\[4, 5, 3\\]"):
        decode_request({"inputs": [ok_x, ok_m]}, inputs)
    # Batching on its own names a missing input too (not "rows in dim 0 (got None)").
    with pytest.raises(FeedError, match="request 0: missing input\\(s\\) \\['m'\\]"):
        run_batched(lambda f: f, inputs, [{"x": np.zeros((1, 5, 3), np.float32)}], 4)


def test_batching_pads_and_splits_back():
    inputs = [TensorInfo("x", "float32", (4, 2))]
    seen = []

    def run(feeds):
        seen.append(feeds["x"].shape[0])
        return {"y": feeds["x"] * 2}

    reqs = [{"x": np.full((n, 2), n, np.float32)} for n in (1, 3, 2, 5)]
    outs = run_batched(run, inputs, reqs, 4)
    assert seen == [4, 4, 4]  # 11 rows -> 3 full batches, the last padded
    for n, o in zip((1, 3, 2, 5), outs):
        np.testing.assert_array_equal(o["y"], np.full((n, 2), 2 * n, np.float32))
    with pytest.raises(FeedError, match="rows are"):
        run_batched(run, inputs, [{"x": np.zeros((1, 3), np.float32)}], 4)


def test_batch_size_needs_dim0_everywhere():
    model = rammer.compile(rammer.zoo.build("lstm-tc-small", batch=4), backend="reference")
    assert batch_size(model) == 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=scaled_limit(60)) as r:
        return json.loads(r.read())


@pytest.mark.slow
def test_two_replicas_answer_concurrent_requests_correctly(capfd):
    pytest.importorskip("ray.serve", reason="needs Ray Serve: pip install -e \".[serve]\"")
    from rammer.serve.deployment import ServeConfig, start, stop

    proto = rammer.zoo.build("lstm-tc-small", batch=4)
    ref = rammer.compile(proto, backend="reference")
    port = _free_port()
    config = ServeConfig(model=proto.SerializeToString(), name="lstm", backend="cpu", veus=1, replicas=2, batch=4)
    try:
        url = start(config, port=port)
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{base}/v2/health/ready", timeout=scaled_limit(30)) as r:
            assert json.loads(r.read())["ready"]
        with urllib.request.urlopen(f"{base}/v2/models/lstm", timeout=scaled_limit(30)) as r:
            meta = json.loads(r.read())
        assert meta["inputs"][0]["shape"] == [-1, 5, 32] and meta["inputs"][0]["datatype"] == "FP32"
        rng = np.random.default_rng(0)

        def one(i: int) -> tuple[int, int]:
            rows = 1 + i % 3
            x = rng.standard_normal((rows, 5, 32)).astype(np.float32)
            out = _post(url, {"id": str(i), "inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                                                        "data": x.reshape(-1).tolist()}]})
            assert out["id"] == str(i)
            y = np.asarray(out["outputs"][0]["data"], np.float32).reshape(out["outputs"][0]["shape"])
            padded = np.concatenate([x, np.zeros((4 - rows, 5, 32), np.float32)])
            want = ref.run({"x": padded})["h_final"][:rows]
            np.testing.assert_allclose(y, want, rtol=1e-3, atol=1e-4)
            return out["parameters"]["replica_pid"], rows

        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(one, range(240)))
        assert len(results) == 240
        assert len({pid for pid, _ in results}) == 2  # both replicas served
        with pytest.raises(urllib.error.HTTPError) as err:
            _post(url, {"inputs": [{"name": "x", "shape": [1, 5, 31], "datatype": "FP32", "data": [0.0] * 155}]})
        assert err.value.code == 400
        assert "input 'x' has shape [1, 5, 31] but the model takes [N, 5, 32]" in json.loads(err.value.read())["error"]
        with pytest.raises(urllib.error.HTTPError) as err:  # KServe v2 errors: {"error": ...}, HTTP 400
            _post(url, {"inputs": []})
        assert err.value.code == 400
        assert json.loads(err.value.read())["error"].startswith("missing input(s) 'x': send each in \"inputs\"")
        with pytest.raises(urllib.error.HTTPError) as err:
            _post(f"{base}/v2/models/nope/infer", {"inputs": []})
        assert err.value.code == 404 and "unknown model 'nope'" in json.loads(err.value.read())["error"]
    finally:
        stop()
        os.environ.pop("RAY_ADDRESS", None)
    # A clean start and stop print none of Ray Serve's misleading notices.
    printed = capfd.readouterr()
    assert "will not be applied" not in printed.err + printed.out
    assert "graceful_shutdown failed" not in printed.err + printed.out


def test_start_waits_for_a_slow_proxy_then_names_its_state(monkeypatch):
    pytest.importorskip("ray.serve", reason="needs Ray Serve: pip install -e \".[serve]\"")
    from types import SimpleNamespace

    from rammer.serve import deployment

    states = iter(["STARTING", "STARTING", "HEALTHY"])
    monkeypatch.setattr(deployment.time, "sleep", lambda s: None)
    monkeypatch.setattr(deployment.serve, "status", lambda: SimpleNamespace(proxies={"node-a": next(states)}))
    deployment._wait_for_proxies(60)  # returns once the proxy is healthy
    monkeypatch.setattr(deployment.serve, "status", lambda: SimpleNamespace(proxies={"node-a": "STARTING"}))
    with pytest.raises(TimeoutError, match="node-a: STARTING"):
        deployment._wait_for_proxies(0)
