"""Where the ipu backend's memory goes, stage by stage, on one model of ci/real_models.py.

Prints VmRSS after each stage and VmHWM since the previous mark (the kernel's peak counter is reset
at each mark through /proc/self/clear_refs), for: the model's bytes and feeds, load + the ipu graph
passes, the core scheduler in three parts (the problem: each op's candidate rKernels; the wavefront
placement with its barriers, whose count and recorded wait skips are printed; ``ScheduleBuilder.finish``),
the lowering's per-op pass (slices, remote reads), its table of distinct reads,
each candidate program build, the lowering's end and, with --run, every tenth superstep of the
simulation.  Hooks wrap the backend's functions; nothing else changes.

    python ci/ipu_memory_stages.py resnet50 [--run] [--out outputs.npz] [--exact-waits]

The ipu's vDevice reads no exact barrier waits (``VDevice.exact_waits`` False, s13-ipu), so the
scheduler keeps no per-barrier skips for it.  ``--exact-waits`` measures the schedule as it was
before: the ipu's vDevice declared as reading exact waits (every barrier's skips recorded).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time

import numpy as np

T0 = time.perf_counter()


def mark(name: str) -> None:
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                fields[line.split(":")[0]] = int(line.split()[1]) / 1024
    print(f"{name:45s} RSS {fields['VmRSS']:7.0f} MB  peak since last mark {fields['VmHWM']:7.0f} MB  "
          f"t {time.perf_counter() - T0:7.1f} s", flush=True)
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
    except OSError:
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", help="a name of ci/real_models.py")
    ap.add_argument("--run", action="store_true", help="simulate the program too")
    ap.add_argument("--out", help="--run: save the simulated outputs here (.npz)")
    ap.add_argument("--exact-waits", action="store_true",
                    help="the ipu's vDevice declared as reading exact waits (the barrier skips recorded)")
    args = ap.parse_args()
    mark("start")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import real_models

    import rammer
    import rammer.backends.ipu as ipu
    import rammer.plugins
    from rammer.backends.ipu import codegen, device, simulator

    if "ipu" not in rammer.plugins.backends():
        rammer.plugins.register_plugin(ipu, "rammer-ipu-stages")
    entry = next(m for m in real_models.MODELS if m.name == args.model)
    data = real_models.model_bytes(entry)
    feeds = real_models.feeds_for(entry, data)
    mark("model bytes + feeds")

    prepare, lower, lower_once, parts = (device.IpuBackend.prepare_graph, device.lower, codegen._lower_with_owners,
                                         codegen._Parts)

    def marked_prepare(self, *a, **k):
        out = prepare(self, *a, **k)
        mark("load + ipu graph passes")
        return out

    def marked_lower(*a, **k):
        mark("schedule: ScheduleBuilder.finish")
        out = lower(*a, **k)
        gc.collect()
        mark("lowering returned")
        return out

    def marked_lower_once(*a, **k):
        mark("  lowering round: start")
        try:
            return lower_once(*a, **k)
        finally:
            mark("  lowering round: end")

    class MarkedParts(parts):  # type: ignore[misc,valid-type]
        def __init__(self, *a, **k):
            mark("  per-op pass (slices, remote reads)")
            super().__init__(*a, **k)
            mark("  table of distinct reads")

        def build(self, *a, **k):
            try:
                return super().build(*a, **k)
            finally:
                mark("  candidate program build")

    from rammer.schedule import schedule as core_schedule
    from rammer.schedule import wavefront

    policy_schedule, finish = wavefront.WavefrontPolicy.schedule, core_schedule.ScheduleBuilder.finish

    def marked_policy_schedule(self, problem):
        mark("schedule: problem (candidate rKernels)")
        return policy_schedule(self, problem)

    def marked_finish(self):
        mark("schedule: wavefront placement, barriers")
        skips = sum(int(np.asarray(x).size) for x in self._barrier_skips)
        print(f"    {len(self._handle_op)} rTasks, {len(self._barrier_group)} barriers, {skips} wait skips "
              f"recorded ({skips * 8 / 2**20:.0f} MB as int64)", flush=True)
        return finish(self)

    if args.exact_waits:
        from dataclasses import replace

        check_vdevice = device.IpuBackend.check_vdevice

        def exact_vdevice(self, vdevice):
            return replace(check_vdevice(self, vdevice), exact_waits=True)

        device.IpuBackend.check_vdevice = exact_vdevice
    wavefront.WavefrontPolicy.schedule = marked_policy_schedule
    core_schedule.ScheduleBuilder.finish = marked_finish
    device.IpuBackend.prepare_graph = marked_prepare
    device.lower = marked_lower
    codegen._lower_with_owners = marked_lower_once
    codegen._Parts = MarkedParts
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, f"{entry.name}.onnx")
        with open(path, "wb") as f:
            f.write(data)
        compiled = rammer.compile(path, backend="ipu", input_shapes={k: tuple(v.shape) for k, v in feeds.items()})
    gc.collect()
    mark("compile returned")
    program = compiled.executable.program
    print(f"supersteps {program.num_supersteps}, estimate {program.latency_us:.1f} us, peak tile "
          f"{int(program.tile_peak_bytes.max())} B, exchanges {program.num_exchanges}", flush=True)
    weights, live = simulator.model_bytes(program, compiled.executable.graph)
    print(f"issue 39's bound: 3 x ({weights / 2**20:.1f} MB weights + {live / 2**20:.1f} MB largest live "
          f"activations) + 300 MB = {3 * (weights + live) / 2**20 + 300:.0f} MB", flush=True)
    if not args.run:
        return
    compute_op, seen = simulator._compute_op, [-1]

    def marked_compute_op(tasks, schedule, graph, memory, step):
        if step != seen[0]:
            seen[0] = step
            if step % 10 == 0:
                mark(f"  simulation: superstep {step}")
        return compute_op(tasks, schedule, graph, memory, step)

    simulator._compute_op = marked_compute_op
    got = compiled.run(feeds)
    mark("simulation done")
    if args.out:
        np.savez(args.out, **got)


if __name__ == "__main__":
    main()
