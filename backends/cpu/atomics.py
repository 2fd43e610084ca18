"""CPU atomics for numba, written as llvmlite intrinsics.

numba has no atomic operations on CPU arrays, but LLVM does: these
intrinsics emit ``atomicrmw``, ``load atomic`` and ``store atomic`` on an
element of an ``int64`` array, with the memory ordering named in the
function, so that numba-compiled workers can publish progress to each other.

The protocol the runtime relies on:

* a producer finishes writing its output tensor, then ``store_release`` s (or
  ``atomic_add`` s, which is acq_rel) its progress counter;
* a consumer ``load_acquire`` s the counter until it reaches the value it
  needs, and only then reads the tensor.

Release/acquire pairs make the producer's plain stores visible to the
consumer (and stop the compiler from moving them across the counter
access), which is all a barrier needs.  ``cpu_relax`` is the spin-loop hint
(``pause`` on x86) that keeps a spinning core from starving its sibling
hyper-thread and from flooding the memory system with speculative loads.
"""

from __future__ import annotations

import ctypes
import platform

from llvmlite import binding as llvm_binding
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from . import _numba_cache  # noqa: F401  (drops stale numba caches first)
from .task_rows import CPUSET_WORDS, cpuset_words  # noqa: F401  (re-exported)

_MACHINE = platform.machine().lower()


def _element_pointer(context, builder, arrty, arr, idx, idxty):
    ary = context.make_array(arrty)(context, builder, arr)
    i = context.cast(builder, idx, idxty, types.intp)
    return cgutils.get_item_pointer(context, builder, arrty, ary, [i], wraparound=False)


def _is_i64_array(arr) -> bool:
    return isinstance(arr, types.Array) and arr.dtype == types.int64 and arr.ndim == 1


@intrinsic
def atomic_add(typingctx, arr, idx, val):
    """``arr[idx] += val`` atomically (acq_rel); returns the old value."""
    if not (_is_i64_array(arr) and isinstance(idx, types.Integer) and isinstance(val, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ptr = _element_pointer(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        v = context.cast(builder, args[2], sig.args[2], types.int64)
        return builder.atomic_rmw("add", ptr, v, "acq_rel")

    return types.int64(arr, idx, val), codegen


@intrinsic
def atomic_max(typingctx, arr, idx, val):
    """``arr[idx] = max(arr[idx], val)`` atomically (acq_rel); returns the old value."""
    if not (_is_i64_array(arr) and isinstance(idx, types.Integer) and isinstance(val, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ptr = _element_pointer(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        v = context.cast(builder, args[2], sig.args[2], types.int64)
        return builder.atomic_rmw("max", ptr, v, "acq_rel")

    return types.int64(arr, idx, val), codegen


@intrinsic
def load_acquire(typingctx, arr, idx):
    """``arr[idx]`` as an acquire load: later reads cannot move before it."""
    if not (_is_i64_array(arr) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ptr = _element_pointer(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        return builder.load_atomic(ptr, "acquire", 8)

    return types.int64(arr, idx), codegen


@intrinsic
def store_release(typingctx, arr, idx, val):
    """``arr[idx] = val`` as a release store: earlier writes cannot move after it."""
    if not (_is_i64_array(arr) and isinstance(idx, types.Integer) and isinstance(val, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ptr = _element_pointer(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        v = context.cast(builder, args[2], sig.args[2], types.int64)
        builder.store_atomic(v, ptr, "release", 8)
        return context.get_dummy_value()

    return types.none(arr, idx, val), codegen


@intrinsic
def cpu_relax(typingctx):
    """The spin-wait hint: ``pause`` on x86, ``yield`` on arm64, nothing elsewhere."""

    def codegen(context, builder, sig, args):
        if _MACHINE in ("x86_64", "amd64", "i386", "i686"):
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                                "llvm.x86.sse2.pause")
            builder.call(fn, [])
        elif _MACHINE in ("aarch64", "arm64"):
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "yield", "", side_effect=True)
            builder.call(asm, [])
        return context.get_dummy_value()

    return types.none(), codegen


# -- sleeping without the GIL ---------------------------------------------------
# libc's sched_yield and usleep are declared as external LLVM functions (not
# called through ctypes, whose pointers would stop numba from caching the
# compiled workers); registering their addresses makes the JIT resolve them.
_libc = ctypes.CDLL(None)
for _name in ("sched_yield", "usleep", "sched_getcpu", "clock_gettime"):
    llvm_binding.add_symbol(_name, ctypes.cast(getattr(_libc, _name), ctypes.c_void_p).value)


@intrinsic
def os_yield(typingctx):
    """``sched_yield()``: give the core to another runnable thread."""

    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(32), []), "sched_yield")
        builder.call(fn, [])
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def os_sleep_us(typingctx, micros):
    """``usleep(micros)``."""
    if not isinstance(micros, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "usleep")
        builder.call(fn, [builder.trunc(args[0], ir.IntType(32)) if args[0].type.width > 32 else args[0]])
        return context.get_dummy_value()

    return types.none(micros), codegen


#: ``CLOCK_MONOTONIC``: the clock of Python's ``time.perf_counter_ns`` on Linux.
CLOCK_MONOTONIC = 1


@intrinsic
def monotonic_ns(typingctx):
    """``clock_gettime(CLOCK_MONOTONIC)`` in nanoseconds (for traces: comparable with
    ``time.perf_counter_ns()`` in the same process)."""

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32), ir.IntType(8).as_pointer()])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "clock_gettime")
        ts = cgutils.alloca_once(builder, ir.ArrayType(i64, 2))
        builder.call(fn, [ir.Constant(ir.IntType(32), CLOCK_MONOTONIC), builder.bitcast(ts, ir.IntType(8).as_pointer())])
        zero = ir.Constant(ir.IntType(32), 0)
        sec = builder.load(builder.gep(ts, [zero, zero]))
        nsec = builder.load(builder.gep(ts, [zero, ir.Constant(ir.IntType(32), 1)]))
        return builder.add(builder.mul(sec, ir.Constant(i64, 1_000_000_000)), nsec)

    return types.int64(), codegen


#: Spin iterations with ``pause`` before yielding the core, and yields before
#: sleeping.  A barrier wait that is short (the common case: a neighbour vEU
#: finishing its tile) is served by the first phase in well under a
#: microsecond; the later phases keep a vEU that waits on a long task (or on a
#: descheduled thread, when cores are oversubscribed) from burning its core.
SPIN_PAUSES = 1024
SPIN_YIELDS = 1024
SLEEP_US = 50


@njit(nogil=True, cache=True)
def wait_at_least(counters, idx, target, abort_idx, max_sleeps):
    """Spin until ``counters[idx] >= target``, backing off from ``pause`` to
    ``sched_yield`` to 50 us sleeps.

    Returns 0 on success, 1 when ``counters[abort_idx]`` became non-zero
    (another worker failed) and 2 after ``max_sleeps`` sleeps (a timeout, so
    that a scheduling bug shows as an error instead of a hang).
    """
    spins = 0
    sleeps = 0
    while load_acquire(counters, idx) < target:
        spins += 1
        if spins < SPIN_PAUSES:
            cpu_relax()
            continue
        if load_acquire(counters, abort_idx) != 0:
            return 1
        if spins < SPIN_PAUSES + SPIN_YIELDS:
            os_yield()
            continue
        if sleeps >= max_sleeps:
            return 2
        os_sleep_us(SLEEP_US)
        sleeps += 1
    return 0


# -- pinning a worker to a core ------------------------------------------------------
llvm_binding.add_symbol("sched_setaffinity", ctypes.cast(_libc.sched_setaffinity, ctypes.c_void_p).value)

#: cpu_set_t as glibc defines it: 1024 bits.
_CPUSET_WORDS = CPUSET_WORDS


@intrinsic
def pin_to_core(typingctx, core):
    """``sched_setaffinity(0, ...)`` for the calling thread: run only on ``core``.

    Returns the syscall's result (0 on success).
    """
    if not isinstance(core, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        arr_t = ir.ArrayType(i64, _CPUSET_WORDS)
        mask = cgutils.alloca_once(builder, arr_t)
        builder.store(ir.Constant(arr_t, [0] * _CPUSET_WORDS), mask)
        c = context.cast(builder, args[0], sig.args[0], types.int64)
        c = builder.and_(c, ir.Constant(i64, _CPUSET_WORDS * 64 - 1))
        word = builder.lshr(c, ir.Constant(i64, 6))
        bit = builder.shl(ir.Constant(i64, 1), builder.and_(c, ir.Constant(i64, 63)))
        slot = builder.gep(mask, [ir.Constant(ir.IntType(32), 0), word])
        builder.store(bit, slot)
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(i32, [i32, i64, ir.IntType(8).as_pointer()])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "sched_setaffinity")
        res = builder.call(fn, [ir.Constant(i32, 0), ir.Constant(i64, _CPUSET_WORDS * 8),
                                builder.bitcast(mask, ir.IntType(8).as_pointer())])
        return builder.sext(res, i64)

    return types.int64(core), codegen


@intrinsic
def current_cpu(typingctx):
    """``sched_getcpu()``: the core the calling thread runs on now (-1 on failure)."""

    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(32), []), "sched_getcpu")
        return builder.sext(builder.call(fn, []), ir.IntType(64))

    return types.int64(), codegen


@intrinsic
def set_pool_threads(typingctx, n):
    """numba's ``set_num_threads(n)`` for the calling thread, as a direct call of the threading
    layer's ``set_num_threads`` symbol.  (numba's own jit version refers to a ctypes pointer,
    which keeps the function that calls it out of the disk cache; the symbol is registered
    before any parallel function is compiled or loaded.)"""
    if not isinstance(n, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i32]), "set_num_threads")
        builder.call(fn, [builder.trunc(context.cast(builder, args[0], sig.args[0], types.int64), i32)])
        return context.get_dummy_value()

    return types.none(n), codegen


@intrinsic
def set_affinity(typingctx, words, skip_core):
    """``sched_setaffinity(0, ...)`` for the calling thread: the cores whose bits are set in
    ``words`` (an int64 array laid out as glibc's cpu_set_t), except ``skip_core`` when >= 0.

    Returns the syscall's result (0 on success; an empty set fails and changes nothing).
    """
    if not (_is_i64_array(words) and isinstance(skip_core, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        i32 = ir.IntType(32)
        arr_t = ir.ArrayType(i64, _CPUSET_WORDS)
        mask = cgutils.alloca_once(builder, arr_t)
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        skip = context.cast(builder, args[1], sig.args[1], types.int64)
        for w in range(_CPUSET_WORDS):
            word = builder.load(builder.gep(ary.data, [ir.Constant(i64, w)]))
            here = builder.icmp_signed("==", builder.lshr(skip, ir.Constant(i64, 6)), ir.Constant(i64, w))
            here = builder.and_(here, builder.icmp_signed(">=", skip, ir.Constant(i64, 0)))
            bit = builder.shl(ir.Constant(i64, 1), builder.and_(skip, ir.Constant(i64, 63)))
            cleared = builder.and_(word, builder.not_(bit))
            builder.store(builder.select(here, cleared, word), builder.gep(mask, [ir.Constant(i32, 0),
                                                                                ir.Constant(i32, w)]))
        fnty = ir.FunctionType(i32, [i32, i64, ir.IntType(8).as_pointer()])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "sched_setaffinity")
        res = builder.call(fn, [ir.Constant(i32, 0), ir.Constant(i64, _CPUSET_WORDS * 8),
                                builder.bitcast(mask, ir.IntType(8).as_pointer())])
        return builder.sext(res, i64)

    return types.int64(words, skip_core), codegen


# -- calling compiled kernels through their addresses ----------------------------------

@intrinsic
def data_ptr(typingctx, arr, index):
    """Address of ``arr[index]`` as a void pointer (no bounds check)."""
    if not (isinstance(arr, types.Array) and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ptr = _element_pointer(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        return builder.bitcast(ptr, ir.IntType(8).as_pointer())

    return types.voidptr(arr, index), codegen


@intrinsic(prefer_literal=True)
def copy_block(typingctx, arr, dst, src, count):
    """``arr[dst:dst + count] = arr[src:src + count]`` as one ``llvm.memcpy``.

    A loop copying within one array is not vectorized (LLVM cannot tell that
    the two ranges do not overlap; the caller guarantees they do not).  With a
    constant ``count`` this is a few vector moves; otherwise a ``memcpy`` call.
    """
    if not (isinstance(arr, types.Array) and isinstance(dst, types.Integer) and isinstance(src, types.Integer)
            and isinstance(count, types.Integer)):
        return None
    itemsize = arr.dtype.bitwidth // 8
    literal = int(count.literal_value) if isinstance(count, types.IntegerLiteral) else None

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        d = builder.bitcast(_element_pointer(context, builder, sig.args[0], args[0], args[1], sig.args[1]),
                            ir.IntType(8).as_pointer())
        s = builder.bitcast(_element_pointer(context, builder, sig.args[0], args[0], args[2], sig.args[2]),
                            ir.IntType(8).as_pointer())
        if literal is not None:
            n = ir.Constant(i64, literal * itemsize)
        else:
            n = builder.mul(context.cast(builder, args[3], sig.args[3], types.int64), ir.Constant(i64, itemsize))
        cgutils.raw_memcpy(builder, d, s, n, 1)
        return context.get_dummy_value()

    return types.none(arr, dst, src, count), codegen


@intrinsic
def call_kernel(typingctx, addr, arena, nbytes, side_i, n_i, side_f, n_f, row, sbase):
    """Call the kernel entry at address ``addr``:
    ``int64 entry(void* arena, int64 nbytes, void* X, int64 nX, void* R, int64 nR, void* row, int64 sbase)``."""
    sig = types.int64(addr, arena, nbytes, side_i, n_i, side_f, n_f, row, sbase)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        vp = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(i64, [vp, i64, vp, i64, vp, i64, vp, i64])
        target = builder.inttoptr(context.cast(builder, args[0], signature.args[0], types.int64), fnty.as_pointer())
        vals = []
        for v, t in zip(args[1:], signature.args[1:]):
            vals.append(v if t == types.voidptr else context.cast(builder, v, t, types.int64))
        return builder.call(target, vals)

    return sig, codegen
