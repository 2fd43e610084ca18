"""PoCL's optimised build of a model's OpenCL program, measured against the build rule's estimates.

    python ci/gpu_pocl_build.py --models real:ocr-det-640,real:zfnet512,full:bert
    python ci/gpu_pocl_build.py --models real:ocr-det-640 --src BEFORE      # an earlier tree's program
    python ci/gpu_pocl_build.py --models real:zfnet512 --estimate-only      # the rule's choice, nothing built

For each model (a corpus name at ci size, ``full:NAME`` at full size, or ``real:NAME`` of
``ci/real_models.py``): the opencl program is compiled (nothing run), its OpenCL text written to a
temporary file, and a fresh process (PoCL's kernel cache off, ``POCL_KERNEL_CACHE=0``) builds it with
the optimiser and launches it once with empty tables (no work), so PoCL builds its work-group function:
the CPU seconds of that launch are what the optimiser costs a first run.  One line per model: the text's
size, barrier and plain rKernels, the rule's two estimates (``backends/opencl/runtime.py``:
``optimiser_seconds``, ``unoptimised_seconds``) and its choice, and the measured CPU seconds.  ``--src
TREE`` compiles with an earlier tree's ``core/`` and ``backends/`` (a worktree of main: a before/after).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

_BUILD = r"""
import os, resource, sys
import numpy as np
import pyopencl as cl
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
src = open(sys.argv[1]).read()
dev = [d for p in cl.get_platforms() for d in p.get_devices()][0]
ctx = cl.Context([dev]); q = cl.CommandQueue(ctx)
c0 = cpu()
k = cl.Kernel(cl.Program(ctx, src).build(options=sys.argv[2]), "rammer_main")
c1 = cpu()
buf = lambda a: cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
z = lambda dt: buf(np.zeros(16, dt))
k(q, (2 * 256,), (256,), z(np.float32), z(np.int32), np.int32(0), z(np.int32), z(np.float32), z(np.int32))
q.finish()
print(f"build {c1 - c0:.1f} wgf {cpu() - c1:.1f}")
"""


def program_text(name: str) -> tuple[str, str]:
    """``(OpenCL text, one line of the rule's figures)`` of model ``name``'s opencl program."""
    sys.path.insert(0, "ci")
    from gpu_coverage import model_source  # type: ignore

    from rammer import plugins
    from rammer.backends.opencl import runtime
    from rammer.backends.opencl.codegen import render
    from rammer.frontend import load

    full = name.startswith("full:")
    source, shapes, _ = model_source(name.removeprefix("full:"), "full" if full else "ci")
    program = plugins.get_backend("opencl").program(load(source, shapes), {})
    text = render(program)
    barriers = runtime.barrier_rkernels(program.kernels)
    plain = sum(1 for k in program.kernels if k.device) - barriers
    # the estimates of this tree's rule, whichever tree made the program
    try:
        opt = runtime.optimiser_seconds(program.kernels, len(text))
    except TypeError:  # an earlier rule: no text size
        opt = runtime.optimiser_seconds(program.kernels)  # type: ignore[call-arg]
    unopt = runtime.unoptimised_seconds(program)
    choice = "optimised" if opt < runtime.POCL_OPTIMISE_FRACTION * unopt else "-O0"
    return text, (f"{len(text) / 1e3:.1f}k chars, {barriers} barrier / {plain} plain rKernels, estimates: "
                  f"optimiser {opt:.1f} s, unoptimised run {unopt:.1f} s -> {choice}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="", help="comma-separated: NAME, full:NAME, real:NAME")
    ap.add_argument("--src", default="", help="compile with this tree's core/ and backends/")
    ap.add_argument("--options", default="", help="build options of the measured build ('' = optimised)")
    ap.add_argument("--estimate-only", action="store_true", help="the rule's figures only, nothing built")
    ap.add_argument("--timeout", type=float, default=900.0, help="wall seconds per build before it is stopped")
    ap.add_argument("--text-one", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.text_one:  # a child: this tree's (or --src's) program text to a file, the figures to stdout
        if args.src:
            sys.path.insert(0, "ci")
            from session_creation import _use_source  # type: ignore

            _use_source(args.src)
        name, path = args.text_one.split("=", 1)
        text, figures = program_text(name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        print(figures, flush=True)
        return 0
    env = {**os.environ, "POCL_KERNEL_CACHE": "0"}
    with tempfile.TemporaryDirectory() as tmp:
        for name in [n for n in args.models.split(",") if n]:
            path = os.path.join(tmp, "program.cl")
            made = subprocess.run([sys.executable, __file__, "--text-one", f"{name}={path}",
                                   *(["--src", args.src] if args.src else [])], capture_output=True, text=True)
            if made.returncode != 0:
                print(f"{name}: FAIL compiling: {made.stderr.strip()[-300:]}", flush=True)
                continue
            figures = made.stdout.strip().splitlines()[-1]
            if args.estimate_only:
                print(f"{name}: {figures}", flush=True)
                continue
            try:
                built = subprocess.run([sys.executable, "-c", _BUILD, path, args.options], env=env,
                                       capture_output=True, text=True, timeout=args.timeout)
                measured = built.stdout.strip().splitlines()[-1] if built.returncode == 0 else \
                    f"FAIL {built.stderr.strip()[-200:]}"
            except subprocess.TimeoutExpired:
                measured = f"stopped after {args.timeout:.0f} s of wall"
            print(f"{name}: {figures}; measured (CPU s): {measured} (load {os.getloadavg()[0]:.1f})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
