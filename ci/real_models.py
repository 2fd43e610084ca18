"""Real published models on the ``cpu`` backend, timed against onnxruntime.

The set (``--list`` prints it) is models nobody here wrote:

* onnx's own test models, shipped inside the ``onnx`` wheel
  (``onnx/backend/test/data/light/*.onnx``: ResNet-50, DenseNet-121, Inception v1/v2,
  ShuffleNet, SqueezeNet, VGG-19, ZFNet-512, AlexNet);
* PaddleOCR text detector / recogniser / direction classifier from the
  ``rapidocr_onnxruntime`` wheel and the silero voice-activity detectors (an ``If`` on
  the sample rate, LSTM state inputs) from the ``silero-vad`` wheel;
* torch exports of common architectures written here in code (a ResNet-18-style
  net, a MobileNetV2-style net, a transformer encoder, a YOLOv8-style detector, a
  CNN + BiLSTM + CTC recogniser), exported when the tool runs.

Nothing is downloaded when the tool runs.  The two wheels are found either as
installed packages (``pip install rapidocr_onnxruntime silero-vad``) or, without
installing them, as wheel files in a cache folder (``--wheels``, default
``$RAMMER_REAL_MODELS`` or ``~/.cache/rammer/real-models``), filled once with

    pip download --no-deps rapidocr_onnxruntime==1.4.4 silero-vad==6.2.3 -d ~/.cache/rammer/real-models

Models whose source is absent are listed as skipped, with the set-up step to run.

Each model is compiled on ``cpu`` (compile time, fallbacks, outputs checked against
onnxruntime: past ``MAX_REL_ERR`` a model is a MISMATCH, and the run exits 1) and timed against onnxruntime with the same thread count
(``intra_op_num_threads = --threads``), each runtime in its own process, the
processes alternating, ``--rounds`` times; the best median per side is kept.

    python ci/real_models.py --threads 2 --rounds 2 [--models det-640,resnet50] [--json out.json]
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import io
import json
import math
import os
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DEFAULT_WHEELS = os.environ.get("RAMMER_REAL_MODELS", os.path.expanduser("~/.cache/rammer/real-models"))
SETUP = ("pip download --no-deps rapidocr_onnxruntime==1.4.4 silero-vad==6.2.3 -d "
         "~/.cache/rammer/real-models")


@dataclass(frozen=True)
class RealModel:
    name: str
    kind: str
    source: str  # "onnx:<file>", "wheel:<package>:<path in package>", "torch:<builder>"
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: Input values that are not random (e.g. the VAD's sample rate).
    fixed: dict[str, Any] = field(default_factory=dict)


_SR16K = {"sr": np.array(16000, dtype=np.int64)}

MODELS: list[RealModel] = [
    RealModel("resnet50", "image classifier (Caffe2)", "onnx:light_resnet50.onnx"),
    RealModel("densenet121", "image classifier (Caffe2)", "onnx:light_densenet121.onnx"),
    RealModel("inception-v1", "image classifier (Caffe2, LRN)", "onnx:light_inception_v1.onnx"),
    RealModel("inception-v2", "image classifier (Caffe2)", "onnx:light_inception_v2.onnx"),
    RealModel("shufflenet", "image classifier (Caffe2)", "onnx:light_shufflenet.onnx"),
    RealModel("squeezenet", "image classifier (Caffe2)", "onnx:light_squeezenet.onnx"),
    RealModel("vgg19", "image classifier (Caffe2)", "onnx:light_vgg19.onnx"),
    RealModel("zfnet512", "image classifier (Caffe2, LRN)", "onnx:light_zfnet512.onnx"),
    RealModel("alexnet", "image classifier (Caffe2, LRN)", "onnx:light_bvlc_alexnet.onnx"),
    RealModel("ocr-det-640", "text detector (PP-OCRv4, Paddle)",
              "wheel:rapidocr_onnxruntime:models/ch_PP-OCRv4_det_infer.onnx", {"x": (1, 3, 640, 640)}),
    RealModel("ocr-det-320", "text detector (PP-OCRv4, Paddle)",
              "wheel:rapidocr_onnxruntime:models/ch_PP-OCRv4_det_infer.onnx", {"x": (1, 3, 320, 320)}),
    RealModel("ocr-rec", "text recogniser (PP-OCRv4, SVTR)",
              "wheel:rapidocr_onnxruntime:models/ch_PP-OCRv4_rec_infer.onnx", {"x": (1, 3, 48, 320)}),
    RealModel("ocr-cls", "text direction classifier (PP-OCR v2)",
              "wheel:rapidocr_onnxruntime:models/ch_ppocr_mobile_v2.0_cls_infer.onnx", {"x": (1, 3, 48, 192)}),
    RealModel("vad", "voice activity (silero, If on sr, LSTM state)", "wheel:silero_vad:data/silero_vad.onnx",
              {"input": (1, 512), "state": (2, 1, 128)}, _SR16K),
    RealModel("vad-op15", "voice activity (silero 16k, opset 15)", "wheel:silero_vad:data/silero_vad_16k_op15.onnx",
              {"input": (1, 512), "state": (2, 1, 128)}, _SR16K),
    RealModel("vad-openvino", "voice activity (silero 16k, LSTM)",
              "wheel:silero_vad:data/silero_vad_openvino_16k.onnx", {"input": (1, 576), "state": (2, 1, 128)}),
    RealModel("torch-resnet18", "torch export: ResNet-18 style, 224px", "torch:resnet18"),
    RealModel("torch-mobilenet", "torch export: MobileNetV2 style, 224px", "torch:mobilenet"),
    RealModel("torch-encoder", "torch export: 4-layer transformer encoder, 128 tokens", "torch:encoder"),
    RealModel("torch-yolo", "torch export: YOLOv8-style detector (SiLU, C2f, SPPF, FPN), 320px", "torch:yolo"),
    RealModel("torch-crnn", "torch export: CNN + BiLSTM + CTC text recogniser, 32x128", "torch:crnn"),
]


# -- sources ---------------------------------------------------------------------------------------------
class Missing(Exception):
    """A model's source is not on this machine (with the set-up step that provides it)."""


def _from_wheel(package: str, inner: str, wheels: str) -> bytes:
    spec = importlib.util.find_spec(package)
    if spec is not None and spec.submodule_search_locations:
        path = os.path.join(list(spec.submodule_search_locations)[0], inner)
        if os.path.exists(path):
            with open(path, "rb") as f:
                return f.read()
    dist = package.replace("_", "[-_]")
    for whl in sorted(glob.glob(os.path.join(wheels, "*.whl"))):
        if not any(os.path.basename(whl).lower().startswith(p) for p in (package.lower(), package.replace("_", "-"))):
            continue
        with zipfile.ZipFile(whl) as z:
            name = f"{package}/{inner}"
            if name in z.namelist():
                return z.read(name)
    raise Missing(f"{package} is neither installed nor a wheel in {wheels} ({dist}); run: {SETUP}")


def _torch_module(which: str):
    import torch
    from torch import nn

    def conv_bn(cin: int, cout: int, k: int, s: int, groups: int = 1, act: bool = True) -> nn.Sequential:
        layers = [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return nn.Sequential(*layers, nn.ReLU6() if act else nn.Identity())

    class Basic(nn.Module):
        def __init__(self, cin: int, cout: int, s: int) -> None:
            super().__init__()
            self.a = conv_bn(cin, cout, 3, s)
            self.b = conv_bn(cout, cout, 3, 1, act=False)
            self.skip = conv_bn(cin, cout, 1, s, act=False) if (s != 1 or cin != cout) else nn.Identity()

        def forward(self, x):
            return torch.relu(self.b(self.a(x)) + self.skip(x))

    class ResNet18(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1))
            blocks, c = [], 64
            for cout, s in ((64, 1), (128, 2), (256, 2), (512, 2)):
                blocks += [Basic(c, cout, s), Basic(cout, cout, 1)]
                c = cout
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(512, 1000)

        def forward(self, x):
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))

    class Inverted(nn.Module):
        def __init__(self, cin: int, cout: int, s: int, t: int) -> None:
            super().__init__()
            h = cin * t
            self.body = nn.Sequential(conv_bn(cin, h, 1, 1), conv_bn(h, h, 3, s, groups=h), conv_bn(h, cout, 1, 1, act=False))
            self.res = s == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.res else self.body(x)

    class MobileNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layers, c = [conv_bn(3, 32, 3, 2)], 32
            for t, cout, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                                  (6, 160, 3, 2), (6, 320, 1, 1)):
                for i in range(n):
                    layers.append(Inverted(c, cout, s if i == 0 else 1, t))
                    c = cout
            layers.append(conv_bn(c, 1280, 1, 1))
            self.features = nn.Sequential(*layers)
            self.fc = nn.Linear(1280, 1000)

        def forward(self, x):
            return self.fc(self.features(x).mean((2, 3)))

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(8000, 256)
            layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True, activation="gelu")
            self.enc = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
            self.head = nn.Linear(256, 2)

        def forward(self, ids):
            return self.head(self.enc(self.embed(ids)).mean(1))

    def cbs(cin: int, cout: int, k: int = 1, s: int = 1) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), nn.SiLU())

    class C2f(nn.Module):  # YOLOv8's split-bottleneck-concat block
        def __init__(self, cin: int, cout: int, n: int) -> None:
            super().__init__()
            h = cout // 2
            self.cv1, self.cv2 = cbs(cin, 2 * h), cbs((2 + n) * h, cout)
            self.m = nn.ModuleList(nn.Sequential(cbs(h, h, 3), cbs(h, h, 3)) for _ in range(n))

        def forward(self, x):
            ys = list(self.cv1(x).chunk(2, 1))
            for m in self.m:
                ys.append(ys[-1] + m(ys[-1]))
            return self.cv2(torch.cat(ys, 1))

    class SPPF(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.cv1, self.cv2, self.pool = cbs(c, c // 2), cbs(2 * c, c), nn.MaxPool2d(5, 1, 2)

        def forward(self, x):
            y = [self.cv1(x)]
            for _ in range(3):
                y.append(self.pool(y[-1]))
            return self.cv2(torch.cat(y, 1))

    class Yolo(nn.Module):  # backbone, FPN/PAN neck and one conv head per scale (80 classes + 4 box)
        def __init__(self) -> None:
            super().__init__()
            self.b1 = nn.Sequential(cbs(3, 16, 3, 2), cbs(16, 32, 3, 2), C2f(32, 32, 1), cbs(32, 64, 3, 2), C2f(64, 64, 2))
            self.b2 = nn.Sequential(cbs(64, 128, 3, 2), C2f(128, 128, 2))
            self.b3 = nn.Sequential(cbs(128, 256, 3, 2), C2f(256, 256, 1), SPPF(256))
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.n1, self.n2 = C2f(384, 128, 1), C2f(192, 64, 1)
            self.d1, self.n3 = cbs(64, 64, 3, 2), C2f(192, 128, 1)
            self.heads = nn.ModuleList(nn.Conv2d(c, 84, 1) for c in (64, 128))

        def forward(self, x):
            p3 = self.b1(x)
            p4 = self.b2(p3)
            p5 = self.b3(p4)
            t4 = self.n1(torch.cat([self.up(p5), p4], 1))
            o3 = self.n2(torch.cat([self.up(t4), p3], 1))
            o4 = self.n3(torch.cat([self.d1(o3), t4], 1))
            return torch.cat([h(o).flatten(2) for h, o in zip(self.heads, (o3, o4))], 2)

    class CRNN(nn.Module):  # conv features -> BiLSTM over the width -> per-step class scores (CTC)
        def __init__(self) -> None:
            super().__init__()
            def block(cin, cout, pool):
                return [nn.Conv2d(cin, cout, 3, 1, 1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(pool, pool)]
            self.cnn = nn.Sequential(*block(1, 32, (2, 2)), *block(32, 64, (2, 2)), *block(64, 128, (2, 1)),
                                     *block(128, 128, (2, 1)))
            self.rnn = nn.LSTM(256, 128, bidirectional=True, batch_first=True)
            self.fc = nn.Linear(256, 97)

        def forward(self, x):
            f = self.cnn(x)                      # (1, 128, 2, 32)
            f = f.flatten(1, 2).permute(0, 2, 1)  # (1, 32, 256)
            return self.fc(self.rnn(f)[0]).log_softmax(-1)

    torch.manual_seed(0)
    module = {"resnet18": ResNet18, "mobilenet": MobileNet, "encoder": Encoder, "yolo": Yolo,
              "crnn": CRNN}[which]().eval()
    if which == "yolo":
        return module, torch.randn(1, 3, 320, 320), ["image"]
    if which == "crnn":
        return module, torch.randn(1, 1, 32, 128), ["image"]
    if which == "encoder":
        example = torch.from_numpy(np.random.default_rng(0).integers(0, 8000, (1, 128)))
        names = ["ids"]
    else:
        example = torch.randn(1, 3, 224, 224)
        names = ["image"]
    return module, example, names


def _from_torch(which: str) -> bytes:
    import warnings

    import torch

    module, example, names = _torch_module(which)
    buf = io.BytesIO()
    # (the fused inference fast path of nn.TransformerEncoderLayer has no ONNX export)
    torch.backends.mha.set_fastpath_enabled(False)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (example,), buf, input_names=names, output_names=["out"], opset_version=17,
                          dynamo=False)
    return buf.getvalue()


def model_bytes(m: RealModel, wheels: str = DEFAULT_WHEELS) -> bytes:
    kind, _, rest = m.source.partition(":")
    if kind == "onnx":
        import onnx

        path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", rest)
        if not os.path.exists(path):
            raise Missing(f"{path} is not in this onnx wheel")
        with open(path, "rb") as f:
            return f.read()
    if kind == "wheel":
        package, _, inner = rest.partition(":")
        return _from_wheel(package, inner, wheels)
    if kind == "torch":
        if importlib.util.find_spec("torch") is None:
            raise Missing("torch is not installed (pip install -e '.[torch]')")
        return _from_torch(rest)
    raise ValueError(m.source)


def feeds_for(m: RealModel, data: bytes) -> dict[str, np.ndarray]:
    import onnx

    proto = onnx.load_from_string(data)
    inits = {i.name for i in proto.graph.initializer}
    rng = np.random.default_rng(0)
    types = {1: np.float32, 10: np.float16, 6: np.int32, 7: np.int64, 9: np.bool_}
    feeds = {}
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        if vi.name in m.fixed:
            feeds[vi.name] = np.asarray(m.fixed[vi.name])
            continue
        dt = types[vi.type.tensor_type.elem_type]
        shape = m.shapes.get(vi.name) or tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        if np.issubdtype(dt, np.integer):
            feeds[vi.name] = rng.integers(0, 100, shape).astype(dt)
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(dt) * (0.1 if "state" in vi.name else 1.0)
    return feeds


# -- one side, in its own process ------------------------------------------------------------------------
def _time(call: Callable[[], Any], seconds: float, max_iters: int = 200) -> float:
    for _ in range(2):
        call()
    samples = []
    stop = time.perf_counter() + seconds
    while (len(samples) < 5 or time.perf_counter() < stop) and len(samples) < max_iters:
        t = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t)
    return float(np.median(samples)) * 1e3


def _ort_session(data: bytes, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def measure_one(runtime: str, m: RealModel, threads: int, seconds: float, wheels: str) -> dict:
    data = model_bytes(m, wheels)
    feeds = feeds_for(m, data)
    if runtime == "ort":
        sess = _ort_session(data, threads)
        return {"ms": _time(lambda: sess.run(None, feeds), seconds)}
    import logging

    import onnx

    import rammer
    from rammer.diagnostics import fallbacks_of

    logging.getLogger("rammer").setLevel(logging.ERROR)  # fallbacks are reported in the table instead
    proto = onnx.load_from_string(data)
    ops = len(proto.graph.node)
    shapes = {k: v.shape for k, v in feeds.items()}
    start = time.perf_counter()
    try:
        model = rammer.compile(data, backend="cpu", input_shapes=shapes, veus=threads, cache=False)
    except Exception as exc:  # the table reports a failed compile instead of stopping the run
        return {"ops": ops, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    compile_s = time.perf_counter() - start
    fallbacks = sorted({str(f.get("op")) for f in fallbacks_of(model.executable)})
    report = getattr(model.executable, "report", None) or {}
    control = sorted({str(c.get("op")) for c in report.get("control_flow", [])})
    sess = _ort_session(data, threads)
    want = sess.run(None, feeds)
    got = model.run(feeds)
    worst = 0.0
    for out, w in zip(sess.get_outputs(), want):
        g = np.asarray(got[out.name], dtype=np.float64)
        w = np.asarray(w, dtype=np.float64)
        if g.shape != w.shape:
            return {"ops": ops, "error": f"output {out.name} has shape {g.shape}, onnxruntime {w.shape}"}
        worst = max(worst, float(np.max(np.abs(g - w) / (np.abs(w) + 1e-3)))) if w.size else worst
    del sess
    return {"ops": ops, "compile_s": compile_s, "fallbacks": fallbacks, "control_flow": control, "max_rel_err": worst,
            "ms": _time(lambda: model.run(feeds), seconds)}


#: The largest ``|got - ort| / (|ort| + 1e-3)`` over a model's outputs that counts as matching onnxruntime
#: (float32 models: the rest is summation order).  A model past it is a MISMATCH, and the run exits 1.
MAX_REL_ERR = 1e-3


def _mismatch(r: dict) -> bool:
    return "cpu_max_rel_err" in r and not r["cpu_max_rel_err"] <= MAX_REL_ERR


# -- the driver ------------------------------------------------------------------------------------------
def _run_side(runtime: str, name: str, args: argparse.Namespace) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.setdefault("NUMBA_NUM_THREADS", str(args.threads))
    cmd = [sys.executable, __file__, "--one", runtime, name, "--threads", str(args.threads),
           "--seconds", str(args.seconds), "--wheels", args.wheels]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="", help="comma-separated names (default: all); --list shows them")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=2.0, help="timing window per side and round")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--wheels", default=DEFAULT_WHEELS, help="folder holding the downloaded wheels")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--one", nargs=2, metavar=("RUNTIME", "MODEL"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    by_name = {m.name: m for m in MODELS}
    if args.one:
        runtime, name = args.one
        try:
            out = measure_one(runtime, by_name[name], args.threads, args.seconds, args.wheels)
        except Missing as exc:
            out = {"missing": str(exc)}
        print(json.dumps(out), flush=True)
        return 0
    if args.list:
        for m in MODELS:
            print(f"{m.name:16s} {m.kind:48s} {m.source}")
        return 0
    names = [n for n in args.models.split(",") if n] or [m.name for m in MODELS]
    unknown = [n for n in names if n not in by_name]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; --list shows the set")
    rows = []
    for name in names:
        best: dict[str, dict] = {}
        for _ in range(args.rounds):
            for runtime in ("cpu", "ort"):
                r = _run_side(runtime, name, args)
                if "ms" not in r or "ms" not in best.get(runtime, {}) or r["ms"] < best[runtime]["ms"]:
                    best[runtime] = r if ("ms" in r or runtime not in best) else best[runtime]
            if "missing" in best["cpu"] or "error" in best["cpu"]:
                break
        row = {"name": name, "kind": by_name[name].kind, **{f"cpu_{k}": v for k, v in best["cpu"].items()},
               "ort_ms": best.get("ort", {}).get("ms")}
        if row.get("cpu_ms") and row.get("ort_ms"):
            row["ratio"] = row["cpu_ms"] / row["ort_ms"]
        rows.append(row)
        print(_format_row(row), flush=True)
    ratios = [r["ratio"] for r in rows if "ratio" in r]
    print()
    print(_table(rows))
    if ratios:
        gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(f"\ngeometric mean cpu/onnxruntime over {len(ratios)} models: {gm:.2f}x (threads={args.threads}); "
              f"worst {max(ratios):.2f}x; compiled {sum('cpu_ms' in r for r in rows)}/{len(rows)}, "
              f"with no fallback {sum('cpu_ms' in r and not r.get('cpu_fallbacks') for r in rows)}, "
              f"matching onnxruntime {sum('cpu_ms' in r and not _mismatch(r) for r in rows)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "rows": rows}, f, indent=1)
    wrong = [r["name"] for r in rows if _mismatch(r) or "cpu_error" in r]
    if wrong:
        print(f"not matching onnxruntime or failing: {', '.join(wrong)}", file=sys.stderr)
        return 1
    return 0


def _format_row(r: dict) -> str:
    if "cpu_missing" in r:
        return f"{r['name']}: skipped: {r['cpu_missing']}"
    if "cpu_error" in r:
        return f"{r['name']}: FAILS: {r['cpu_error']}"
    return (f"{r['name']}: cpu {r['cpu_ms']:.2f} ms, onnxruntime {r.get('ort_ms') or float('nan'):.2f} ms, "
            f"compile {r['cpu_compile_s']:.1f} s, fallbacks {r['cpu_fallbacks'] or 'none'}, "
            f"max rel err {r['cpu_max_rel_err']:.1e}" + (f" MISMATCH (over {MAX_REL_ERR:g})" if _mismatch(r) else ""))


def _table(rows: list[dict]) -> str:
    lines = ["| model | kind | ops | compile (s) | cpu (ms) | onnxruntime (ms) | ratio | max rel err | fallbacks |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if "cpu_missing" in r:
            lines.append(f"| {r['name']} | {r['kind']} | | | skipped (source absent) | | | | |")
        elif "cpu_error" in r:
            lines.append(f"| {r['name']} | {r['kind']} | {r.get('cpu_ops', '')} | fails | "
                         f"{r['cpu_error'][:80]} | {r.get('ort_ms') or 0:.2f} | | | |")
        else:
            lines.append(f"| {r['name']} | {r['kind']} | {r['cpu_ops']} | {r['cpu_compile_s']:.1f} | "
                         f"{r['cpu_ms']:.2f} | {r.get('ort_ms') or float('nan'):.2f} | {r.get('ratio', float('nan')):.2f} | "
                         f"{r['cpu_max_rel_err']:.1e}{' MISMATCH' if _mismatch(r) else ''} | "
                         f"{', '.join(r['cpu_fallbacks']) or 'none'}"
                         + (f" ({', '.join(r['cpu_control_flow'])}: host control flow, branches compiled)"
                            if r.get("cpu_control_flow") else "") + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
