"""The C text of the mcu backend that is not kernel IR: two tiny helpers of the bit-serial kernels.

Every kernel (requantization, int8 path, bit-serial direct and memoised) is kernel IR in
:mod:`.kernels_ir`, rendered by the core's C99 dialect (``rammer.codegen.cunit``).  What is left here
is a compiler-dependent spelling the IR does not model: the byte order of a word read with
``memcpy`` (the pattern bits follow the channel order, so a big-endian target swaps) and the
doubling helper the bit-serial sums use.

Portable C99 without heap or floating point.  Assumes what every C compiler for Cortex-M and x86
does: two's complement, ``>>`` of a negative integer is arithmetic (implementation-defined in C99;
GCC and Clang define it so).
"""

from __future__ import annotations

#: Before every kernel (nothing here is a function a model may leave unused without a warning).
KERNELS_C = r"""
/* A little-endian word from memcpy'd bytes; on a big-endian target swap (the pattern bits follow
 * the channel order). */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define MCU_LE32(w) (((w) >> 24) | (((w) >> 8) & 0xFF00u) | (((w) << 8) & 0xFF0000u) | ((w) << 24))
#else
#define MCU_LE32(w) (w)
#endif
"""

#: Before the bit-serial kernels (emitted only when a layer is pooled).
BITSERIAL_HELPERS_C = r"""
/* v + v: GCC then folds the doubling into one add with a shifted operand (with * 2 it spent a
 * register on the constant 2 for smlabb and spilled a table row). */
static int32_t mcu_dbl(int32_t v) { return v + v; }
/* 4 bytes as a little-endian word (any alignment) */
static uint32_t mcu_le32_at(const int8_t *p) { uint32_t w; memcpy(&w, p, 4); return MCU_LE32(w); }
"""
