#!/usr/bin/env python
"""The mcu backend's experiment: the digits CNN in fp32, int8 and weight pool at 2..8 activation bits;
weight bytes; Cortex-M4 instruction counts (unicorn) of the bit-serial layers vs the int8 path on the
same layer shapes; whole-model flash/RAM; a small ResNet on 32x32 against a 256 KiB / 1 MiB budget.

    python ci/bench_mcu.py [--plots docs] [--json out.json] [--pool 64] [--epochs 30] [--ft-epochs 15]

Prints a markdown table.  Needs torch and scikit-learn; the Cortex-M parts need arm-none-eabi-gcc
and unicorn (ci/install_mcu_tools.sh) and are skipped, with a note, without them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

import rammer
from rammer import plugins
from rammer.errors import CompileError

#: ARM builds of this run (removed at exit).
TMP = tempfile.TemporaryDirectory(prefix="rammer-mcu-bench-")


def _register() -> None:
    if "mcu" not in plugins.backends():
        import rammer.backends.mcu as mod

        plugins.register_plugin(mod, "rammer-mcu-bench")


def accuracy(exe, x, y, bits) -> float:
    out = exe.run({exe.graph.inputs[0].name: x}, act_bits=bits)
    return float((next(iter(out.values())).argmax(1) == y).mean())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plots", default=None, help="folder for mcu-accuracy.png and mcu-instructions.png")
    ap.add_argument("--json", default=None)
    ap.add_argument("--pool", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--ft-epochs", type=int, default=15)
    args = ap.parse_args(argv)
    _register()
    from rammer.backends.mcu import arm, models
    from rammer.backends.mcu.layers import run_float
    from rammer.backends.mcu.lower import lower_graph
    from rammer.frontend import load

    res: dict = {"pool_size": args.pool}
    t0 = time.perf_counter()
    onnx_model = models.train_digits_cnn(seed=0, epochs=args.epochs)
    xtr, ytr, xte, yte = models.digits_data(0)
    res["train_seconds"] = round(time.perf_counter() - t0, 1)
    net = lower_graph(load(onnx_model))
    fp32 = float((run_float(net, np.ascontiguousarray(xte.transpose(0, 2, 3, 1))).reshape(len(xte), -1).argmax(1)
                  == yte).mean())
    calib = xtr[:512]
    int8 = rammer.compile(onnx_model, backend="mcu", calibration=calib, pool_size=0).executable
    int8_direct = rammer.compile(onnx_model, backend="mcu", calibration=calib, pool_size=0,
                                 int8_kernel="direct").executable
    # the column kernel with its dot products unrolled by 16: a stronger int8 baseline (sensitivity)
    int8_col16 = rammer.compile(onnx_model, backend="mcu", calibration=calib, pool_size=0,
                                int8_kernel="col16").executable
    raw = rammer.compile(onnx_model, backend="mcu", calibration=calib, pool_size=args.pool).executable
    t0 = time.perf_counter()
    ft = rammer.compile(onnx_model, backend="mcu", calibration=calib, pool_size=args.pool,
                        finetune={"x": xtr, "y": ytr, "epochs": args.ft_epochs, "lr": 1e-3}).executable
    res["finetune_seconds"] = round(time.perf_counter() - t0, 1)
    bits_range = list(range(2, 9))
    res["accuracy"] = {
        "fp32": fp32, "int8": accuracy(int8, xte, yte, 8),
        "pool": {b: accuracy(raw, xte, yte, b) for b in bits_range},
        "pool_finetuned": {b: accuracy(ft, xte, yte, b) for b in bits_range},
    }
    res["test_samples"] = len(yte)

    # weight bytes of the pooled layers
    rows = ft.layer_table
    pooled_rows = [r for r in rows if r["path"].startswith("weight pool")]
    int8_bytes = sum(r["int8_weight_bytes"] for r in pooled_rows)
    q = ft.program.model
    index_bytes = sum(int(l.indices.size) for l in q.layers if l.pooled)
    res["weights"] = {"pooled_layers": [r["layer"] for r in pooled_rows], "int8_bytes": int8_bytes,
                      "index_bytes": index_bytes, "pool_vector_bytes": int(q.pool.size),
                      "ratio_indices": int8_bytes / index_bytes,
                      "ratio_with_pool": int8_bytes / (index_bytes + q.pool.size),
                      "table_bytes": ft.report["table_bytes"],
                      "not_pooled": ft.report["not_pooled"]}
    res["memory_plan"] = {name: {"flash_constants": e.report["flash_bytes_constants"],
                                 "ram": e.report["ram_arena_bytes"] + e.report["ram_scratch_bytes"]
                                 + e.report["ram_io_bytes"]} for name, e in (("int8", int8), ("pool", ft))}

    missing = arm.missing_tools()
    try:
        import elftools  # noqa: F401
        import unicorn  # noqa: F401
    except ImportError:
        missing.append("unicorn/pyelftools")
    if missing:
        res["cortex_m4"] = f"skipped: needs {', '.join(missing)}"
    else:
        res["cortex_m4"] = cortex_m4(int8, int8_direct, ft, xte[:1], bits_range, int8_col16)
    res["resnet"] = resnet()
    report(res)
    if args.plots:
        plots(res, args.plots)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2, default=str)
    return 0


def cortex_m4(int8, int8_direct, pooled, x, bits_range, int8_col16=None) -> dict:
    from rammer.backends.mcu import arm

    out: dict = {}
    counts: dict = {}
    runs = [("int8", int8), ("int8_direct", int8_direct), ("pool", pooled)]
    if int8_col16 is not None:
        runs.insert(2, ("int8_col16", int8_col16))
    for name, exe in runs:
        prog = exe.program
        q = prog.model
        xq = exe.quantize(x)
        build = arm.build(prog.source, "cortex-m4", xq, [8], q.input_tensor.nbytes, q.output_tensor.nbytes,
                          folder=tempfile.mkdtemp(prefix="rammer-mcu-bench-", dir=TMP.name))
        emu = arm.UnicornM4(build.elf, prog.source.functions)
        by_bits = {}
        for b in (bits_range if name == "pool" else [8]):
            y, c = emu.run(xq[0], q.output_tensor.nbytes, b)
            want = exe.run_int8(xq, b)[0]
            if not np.array_equal(y, want):
                raise SystemExit(f"unicorn output differs from the host build ({name}, {b} bits)")
            by_bits[b] = {q.layers[li].name: n for li, n in c.items() if li >= 0}
        counts[name] = by_bits
        out[f"{name}_size"] = {"text": build.text, "data": build.data, "bss": build.bss}
    pooled_names = [l.name for l in pooled.program.model.layers if l.pooled]
    base = {n: counts["int8"][8][n] for n in pooled_names}
    out["int8_pooled_layers"] = base
    direct = {n: counts["int8_direct"][8][n] for n in pooled_names}
    out["int8_direct_pooled_layers"] = direct
    out["int8_direct_total"] = sum(counts["int8_direct"][8].values())
    out["pool_by_bits"] = {b: {n: counts["pool"][b][n] for n in pooled_names} for b in bits_range}
    out["int8_total"] = sum(counts["int8"][8].values())
    out["pool_total_by_bits"] = {b: sum(counts["pool"][b].values()) for b in bits_range}
    tot4 = sum(out["pool_by_bits"][4].values())
    out["speedup_4bit_pooled_layers"] = sum(base.values()) / tot4
    out["speedup_4bit_per_layer"] = {n: base[n] / out["pool_by_bits"][4][n] for n in pooled_names}
    out["speedup_4bit_vs_direct"] = sum(direct.values()) / tot4
    if int8_col16 is not None:
        col16 = {n: counts["int8_col16"][8][n] for n in pooled_names}
        out["int8_col16_pooled_layers"] = col16
        out["int8_col16_total"] = sum(counts["int8_col16"][8].values())
        out["speedup_4bit_vs_col16"] = sum(col16.values()) / tot4
        out["speedup_vs_col16_by_bits"] = {b: sum(col16.values()) / sum(out["pool_by_bits"][b].values())
                                           for b in bits_range}
    macs = {l.name: int(np.prod(pooled.program.model.tensors[l.output].shape)) * int(np.prod(l.weight.shape[1:]))
            for l in pooled.program.model.layers if l.pooled}
    out["instructions_per_mac"] = {
        "int8 col": sum(base.values()) / sum(macs.values()),
        "int8 direct": sum(direct.values()) / sum(macs.values()),
        **({"int8 col16": sum(out["int8_col16_pooled_layers"].values()) / sum(macs.values())}
           if int8_col16 is not None else {}),
        **{f"pool {b} bits": sum(out["pool_by_bits"][b].values()) / sum(macs.values()) for b in bits_range}}
    return out


def resnet() -> dict:
    from rammer.backends.mcu import arm, models

    out = {}
    if not arm.missing_tools():
        # the width-16 ResNet on the Cortex-M4 under QEMU, bit for bit with the host build
        exe = rammer.compile(models.resnet32(width=16), backend="mcu").executable
        q = exe.program.model
        x = exe.quantize(np.random.default_rng(0).random((2, 3, 32, 32), dtype=np.float32))
        build = arm.build(exe.program.source, "cortex-m4", x, [8, 4], q.input_tensor.nbytes, q.output_tensor.nbytes,
                          folder=tempfile.mkdtemp(prefix="rammer-mcu-bench-", dir=TMP.name))
        got = arm.run_qemu(build, timeout=600)
        same = all(np.array_equal(got[(b, n)], exe.run_int8(x[n:n + 1], b)[0]) for b in (8, 4) for n in range(2))
        out["width 16 on qemu mps2-an386"] = (f"{'bit-exact' if same else 'DIFFERS'} with the host build at 8 and 4 "
                                               f"bits; arm-none-eabi-size model.o text {build.text} B, bss {build.bss} B")
    for width in (16, 64, 128):
        try:
            exe = rammer.compile(models.resnet32(width=width), backend="mcu").executable
            r = exe.report
            out[f"width {width}"] = (f"fits: flash {r['flash_bytes_constants']} B of constants, RAM "
                                     f"{r['ram_arena_bytes'] + r['ram_scratch_bytes'] + r['ram_io_bytes']} B")
        except CompileError as e:
            out[f"width {width}"] = f"refused: {e}"
    return out


def report(res: dict) -> None:
    a = res["accuracy"]
    print(f"## mcu backend: digits CNN ({res['test_samples']} test images), pool {res['pool_size']}\n")
    print("| path | 8 | 7 | 6 | 5 | 4 | 3 | 2 bits |\n|---|---|---|---|---|---|---|---|")
    print(f"| fp32 | {a['fp32']:.4f} | | | | | | |")
    print(f"| int8 | {a['int8']:.4f} | | | | | | |")
    for key in ("pool", "pool_finetuned"):
        print(f"| {key} | " + " | ".join(f"{a[key][b]:.4f}" for b in range(8, 1, -1)) + " |")
    w = res["weights"]
    print(f"\npooled layers {', '.join(w['pooled_layers'])}: int8 weights {w['int8_bytes']} B, indices "
          f"{w['index_bytes']} B ({w['ratio_indices']:.2f}x), with the pool vectors {w['ratio_with_pool']:.2f}x; "
          f"pattern table {w['table_bytes']} B (network-wide)")
    print(f"not pooled: {w['not_pooled']}")
    for k, v in res["memory_plan"].items():
        print(f"memory plan {k}: flash constants {v['flash_constants']} B, RAM {v['ram']} B")
    c = res["cortex_m4"]
    if isinstance(c, str):
        print(f"\nCortex-M4: {c}")
    else:
        print("\n| Cortex-M4 instructions (unicorn) | int8 col | int8 direct | " + " | ".join(f"{b} bits" for b in range(2, 9))
              + " |")
        print("|---|---|---|" + "---|" * 7)
        for n, base in c["int8_pooled_layers"].items():
            print(f"| {n} | {base} | {c['int8_direct_pooled_layers'][n]} | "
                  + " | ".join(str(c["pool_by_bits"][b][n]) for b in range(2, 9)) + " |")
        print(f"| whole model | {c['int8_total']} | {c['int8_direct_total']} | "
              + " | ".join(str(c["pool_total_by_bits"][b]) for b in range(2, 9)) + " |")
        print("\ninstructions per MAC of the pooled layers: "
              + ", ".join(f"{k} {v:.2f}" for k, v in c["instructions_per_mac"].items()))
        print(f"pooled layers at 4 bits vs the direct int8 loop: {c['speedup_4bit_vs_direct']:.2f}x")
        if "int8_col16_pooled_layers" in c:
            print(f"int8 col16 (dot products unrolled by 16) pooled layers: {c['int8_col16_pooled_layers']}, "
                  f"whole model {c['int8_col16_total']}; bit-serial fewer by bits: "
                  + ", ".join(f"{b}: {v:.2f}x" for b, v in c["speedup_vs_col16_by_bits"].items()))
        print(f"\npooled layers at 4 bits: {c['speedup_4bit_pooled_layers']:.2f}x fewer instructions than int8 "
              f"(per layer: {', '.join(f'{k} {v:.2f}x' for k, v in c['speedup_4bit_per_layer'].items())})")
        print(f"arm-none-eabi-size model.o: int8 {c['int8_size']}, pool {c['pool_size']}")
    print("\nResNet 32x32 (256 KiB RAM / 1 MiB flash):")
    for k, v in res["resnet"].items():
        print(f"- {k}: {v}")


def plots(res: dict, folder: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(folder, exist_ok=True)
    a = res["accuracy"]
    bits = list(range(2, 9))
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.axhline(a["fp32"] * 100, color="k", ls="--", label="fp32")
    ax.axhline(a["int8"] * 100, color="gray", ls=":", label="int8")
    ax.plot(bits, [a["pool"][b] * 100 for b in bits], "o-", label="weight pool")
    ax.plot(bits, [a["pool_finetuned"][b] * 100 for b in bits], "s-", label="weight pool, fine-tuned")
    ax.set_xlabel("activation bits (run time)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"digits CNN, pool of {res['pool_size']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(folder, "mcu-accuracy.png"), dpi=110)
    c = res["cortex_m4"]
    if not isinstance(c, str):
        fig, ax = plt.subplots(figsize=(5, 3.4))
        base = sum(c["int8_pooled_layers"].values())
        ax.plot(bits, [sum(c["pool_by_bits"][b].values()) / 1e3 for b in bits], "o-", label="bit-serial pool")
        ax.axhline(base / 1e3, color="gray", ls=":", label="int8 path (column + dot products by 4: default)")
        ax.axhline(sum(c["int8_direct_pooled_layers"].values()) / 1e3, color="gray", ls="--",
                   label="int8 path (reference loop nest)")
        if "int8_col16_pooled_layers" in c:
            ax.axhline(sum(c["int8_col16_pooled_layers"].values()) / 1e3, color="gray", ls="-.",
                       label="int8 path (column, dot products unrolled by 16)")
        ax.set_xlabel("activation bits (run time)")
        ax.set_ylabel("Cortex-M4 instructions (thousands)")
        ax.set_title("pooled layers of the digits CNN (unicorn)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(folder, "mcu-instructions.png"), dpi=110)


if __name__ == "__main__":
    sys.exit(main())
