"""A register-blocked SIMD GEMM micro-kernel, generated as LLVM IR for this CPU.

The OpenBLAS that scipy bundles picks its AVX2 ("Haswell") kernels on every
x86 CPU it does not know, so on AVX-512 machines it reaches about half of
the core's peak.  This module writes the inner kernel of a GEMM directly in
LLVM IR with ``<W x float>`` vectors::

    C[MR x NR] (+)= A_packed[MR x k] . B_packed[k x NR]

keeping the MR x NR accumulators in vector registers (loop-carried phi
nodes) and issuing one broadcast and NR/W fused multiply-adds per row per
k step, then compiles it with llvmlite for the host CPU (so LLVM uses the
widest vector unit there is) and registers its address as a symbol the
numba kernels call (see :func:`ukernel`).  The packing and blocking loops
around it are ordinary numba code (:mod:`.kernels_gemm`).

With AVX-512 the tile is 12 x 32 (24 zmm accumulators); elsewhere 6 x 16
(AVX2: 12 ymm accumulators).
"""

from __future__ import annotations

import ctypes

from llvmlite import binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

SYMBOL = "rammer_cpu_ukernel"


def _host_features() -> tuple[str, str, set[str]]:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    cpu = llvm.get_host_cpu_name()
    feats = llvm.get_host_cpu_features()
    enabled = {k for k, v in feats.items() if v}
    return cpu, feats.flatten(), enabled


CPU_NAME, CPU_FEATURES, _ENABLED = _host_features()
WIDTH = 16 if "avx512f" in _ENABLED else 8
MR, NR = (12, 32) if WIDTH == 16 else (6, 16)


def _module() -> ir.Module:
    mod = ir.Module(name="rammer_ukernel")
    f32 = ir.FloatType()
    i64 = ir.IntType(64)
    vec = ir.VectorType(f32, WIDTH)
    nv = NR // WIDTH
    fp = f32.as_pointer()
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [i64, fp, fp, fp, i64, i64]), name=SYMBOL)
    k, a, b, c, ldc, acc = fn.args
    for arg, name in zip(fn.args, ("k", "a", "b", "c", "ldc", "acc")):
        arg.name = name
    fma = ir.Function(mod, ir.FunctionType(vec, [vec, vec, vec]), name=f"llvm.fma.v{WIDTH}f32")
    entry = fn.append_basic_block("entry")
    head = fn.append_basic_block("head")
    body = fn.append_basic_block("body")
    done = fn.append_basic_block("done")
    add = fn.append_basic_block("add")
    put = fn.append_basic_block("put")

    bld = ir.IRBuilder(entry)
    zero = ir.Constant(vec, [0.0] * WIDTH)
    bld.branch(head)

    bld = ir.IRBuilder(head)
    kk = bld.phi(i64, name="kk")
    kk.add_incoming(ir.Constant(i64, 0), entry)
    accs = []
    for r in range(MR):
        row = []
        for v in range(nv):
            ph = bld.phi(vec, name=f"c{r}_{v}")
            ph.add_incoming(zero, entry)
            row.append(ph)
        accs.append(row)
    bld.cbranch(bld.icmp_signed("<", kk, k), body, done)

    bld = ir.IRBuilder(body)
    bvals = []
    bbase = bld.gep(b, [bld.mul(kk, ir.Constant(i64, NR))])
    for v in range(nv):
        ptr = bld.bitcast(bld.gep(bbase, [ir.Constant(i64, v * WIDTH)]), vec.as_pointer())
        bvals.append(bld.load(ptr, align=4))
    abase = bld.gep(a, [bld.mul(kk, ir.Constant(i64, MR))])
    undef = ir.Constant(vec, ir.Undefined)
    mask = ir.Constant(ir.VectorType(ir.IntType(32), WIDTH), [0] * WIDTH)
    new_accs = []
    for r in range(MR):
        av = bld.load(bld.gep(abase, [ir.Constant(i64, r)]), align=4)
        splat = bld.shuffle_vector(bld.insert_element(undef, av, ir.Constant(ir.IntType(32), 0)), undef, mask)
        new_accs.append([bld.call(fma, [splat, bvals[v], accs[r][v]]) for v in range(nv)])
    nxt = bld.add(kk, ir.Constant(i64, 1))
    bld.branch(head)
    kk.add_incoming(nxt, body)
    for r in range(MR):
        for v in range(nv):
            accs[r][v].add_incoming(new_accs[r][v], body)

    bld = ir.IRBuilder(done)
    bld.cbranch(bld.icmp_signed("!=", acc, ir.Constant(i64, 0)), add, put)
    for block, accumulate in ((add, True), (put, False)):
        bld = ir.IRBuilder(block)
        for r in range(MR):
            rowp = bld.gep(c, [bld.mul(ir.Constant(i64, r), ldc)])
            for v in range(nv):
                ptr = bld.bitcast(bld.gep(rowp, [ir.Constant(i64, v * WIDTH)]), vec.as_pointer())
                val = accs[r][v]
                if accumulate:
                    val = bld.fadd(bld.load(ptr, align=4), val)
                bld.store(val, ptr, align=4)
        bld.ret_void()
    return mod


def _compile() -> tuple[object, int]:
    target = llvm.Target.from_default_triple()
    tm = target.create_target_machine(cpu=CPU_NAME, features=CPU_FEATURES, opt=3)
    parsed = llvm.parse_assembly(str(_module()))
    parsed.verify()
    try:
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(parsed, pb)
    except AttributeError:  # older llvmlite: the phi form needs no optimisation to be register-resident
        pass
    engine = llvm.create_mcjit_compiler(parsed, tm)
    engine.finalize_object()
    return engine, engine.get_function_address(SYMBOL)


_ENGINE, ADDRESS = _compile()
llvm.add_symbol(SYMBOL, ADDRESS)
#: The kernel as a ctypes function, for tests.
CFUNC = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                         ctypes.c_int64)(ADDRESS)


@intrinsic
def ukernel(typingctx, k, A, a_off, Bp, b_off, C, c_off, ldc, acc):
    """C[c_off + r*ldc + j] (+)= sum_k A[a_off + k*MR + r] * Bp[b_off + k*NR + j] for the MR x NR tile."""
    for arr in (A, Bp, C):
        if not (isinstance(arr, types.Array) and arr.dtype == types.float32):
            return None
    sig = types.none(k, A, a_off, Bp, b_off, C, c_off, ldc, acc)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        f32p = ir.FloatType().as_pointer()

        def as_i64(v, t):
            return context.cast(builder, v, t, types.int64)

        def ptr(arr, arrty, off, offty):
            ary = context.make_array(arrty)(context, builder, arr)
            return builder.gep(ary.data, [context.cast(builder, off, offty, types.intp)])

        s = signature.args
        fnty = ir.FunctionType(ir.VoidType(), [i64, f32p, f32p, f32p, i64, i64])
        fn = cgutils.get_or_insert_function(builder.module, fnty, SYMBOL)
        builder.call(fn, [as_i64(args[0], s[0]), ptr(args[1], s[1], args[2], s[2]), ptr(args[3], s[3], args[4], s[4]),
                          ptr(args[5], s[5], args[6], s[6]), as_i64(args[7], s[7]), as_i64(args[8], s[8])])
        return context.get_dummy_value()

    return sig, codegen
