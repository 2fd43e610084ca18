"""The C99 kernels of the mcu backend (int8 path and bit-serial weight pool).

KERNEL C LIVES HERE, IN ONE PLACE: the core's C-style renderer (``core/codegen`` render/dialects)
did not exist when this backend was written; when it does, these kernels move to it and
:mod:`.codegen` keeps emitting only the model's data and calls.

Portable C99 without heap or floating point.  Assumes what every C compiler for Cortex-M and x86
does: two's complement, ``>>`` of a negative integer is arithmetic (implementation-defined in C99;
GCC and Clang define it so).  The arithmetic is that of :mod:`.kernels` (the numpy specification):
TFLite's SaturatingRoundingDoublingHighMul and RoundingDivideByPOT.
"""

from __future__ import annotations

KERNELS_C = r"""
/* Kernels a model does not use are compiled but unused: not a warning. */
#if defined(__GNUC__)
#define MCU_KERNEL static __attribute__((unused))
#else
#define MCU_KERNEL static
#endif
/* A little-endian word from memcpy'd bytes; on a big-endian target swap (the pattern bits follow
 * the channel order). */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define MCU_LE32(w) (((w) >> 24) | (((w) >> 8) & 0xFF00u) | (((w) << 8) & 0xFF0000u) | ((w) << 24))
#else
#define MCU_LE32(w) (w)
#endif

/* ---- fixed-point requantization (TFLite / gemmlowp) ---- */
MCU_KERNEL int32_t q_srdhm(int32_t a, int32_t b)
{
    int64_t ab, s;
    int32_t q;
    if (a == INT32_MIN && b == INT32_MIN) return INT32_MAX;
    ab = (int64_t)a * (int64_t)b;
    s = ab + (ab >= 0 ? ((int64_t)1 << 30) : (1 - ((int64_t)1 << 30)));
    /* s / 2^31 truncated toward zero: floor, plus one for a negative s with a remainder */
    q = (int32_t)(s >> 31);
    if (s < 0 && (s & 0x7FFFFFFF) != 0) q += 1;
    return q;
}

MCU_KERNEL int32_t q_rdbpot(int32_t x, int32_t e)
{
    const int32_t mask = (int32_t)((1u << e) - 1u);
    const int32_t remainder = x & mask;
    const int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
    return (x >> e) + (remainder > threshold ? 1 : 0);
}

MCU_KERNEL int32_t q_mbqm(int32_t x, int32_t mult, int32_t shift)
{
    if (shift > 0) {  /* multiplier >= 1: saturating left shift first (TFLite: int32 x << shift) */
        const int64_t v = (int64_t)x * ((int64_t)1 << shift);
        x = v > INT32_MAX ? INT32_MAX : (v < INT32_MIN ? INT32_MIN : (int32_t)v);
        return q_srdhm(x, mult);
    }
    return q_rdbpot(q_srdhm(x, mult), -shift);
}

MCU_KERNEL int8_t q_out(int32_t acc, int32_t mult, int32_t shift, int32_t zp, int32_t lo, int32_t hi)
{
    int32_t y = q_mbqm(acc, mult, shift) + zp;
    if (y < lo) y = lo;
    if (y > hi) y = hi;
    return (int8_t)y;
}

/* A layer's geometry: a const int32_t array (generated per layer), read through these indices. */
#define G_IH 0
#define G_IW 1
#define G_IC 2
#define G_OH 3
#define G_OW 4
#define G_OC 5
#define G_KH 6
#define G_KW 7
#define G_SH 8
#define G_SW 9
#define G_PT 10
#define G_PL 11
#define G_IN_ZP 12
#define G_OUT_ZP 13
#define G_ACT_MIN 14
#define G_ACT_MAX 15

/* ---- int8 path: kernels_ir.py (kernel IR, rendered after this text) ---- */

/* ---- bit-serial weight pool ----
 * For every tap inside the input (padded taps add nothing, as in the int8 kernel, and are skipped)
 * and 8-channel block j: blk[n] = the block's index (tap * J + j), and
 * rows[n * nb + s] = &table[pattern(block, bit lo + s) * P].  The pattern is rebuilt from scratch for
 * every block and bit.  Returns the number of blocks n. */
MCU_KERNEL int bs_patterns(const int32_t *g, const int8_t *in, int oy, int ox, int nb, const int16_t *table,
                           int32_t pool, const int16_t **rows, uint16_t *blk)
{
    const int lo = 8 - nb;
    const int J = g[G_IC] / 8;
    int ky, kx, j, s, n = 0;
    for (ky = 0; ky < g[G_KH]; ++ky) {
        const int iy = oy * g[G_SH] - g[G_PT] + ky;
        if (iy < 0 || iy >= g[G_IH]) continue;
        for (kx = 0; kx < g[G_KW]; ++kx) {
            const int ix = ox * g[G_SW] - g[G_PL] + kx;
            const int8_t *ip;
            if (ix < 0 || ix >= g[G_IW]) continue;
            ip = in + ((long)iy * g[G_IW] + ix) * g[G_IC];
            for (j = 0; j < J; ++j) {
                /* u = q - zp = q + 128: flip the sign bit of each byte (byte order is irrelevant:
                 * both words are split back into bytes the same way). */
                uint32_t w0, w1;
                memcpy(&w0, ip + 8 * j, 4);
                memcpy(&w1, ip + 8 * j + 4, 4);
                w0 = MCU_LE32(w0) ^ 0x80808080u;
                w1 = MCU_LE32(w1) ^ 0x80808080u;
                blk[n] = (uint16_t)((ky * g[G_KW] + kx) * J + j);
                for (s = 0; s < nb; ++s) {
                    /* bit (lo+s) of the 4 bytes of a word gathered into 4 bits by one multiply */
                    const uint32_t p0 = ((((w0 >> (lo + s)) & 0x01010101u) * 0x01020408u) >> 24) & 0xFu;
                    const uint32_t p1 = ((((w1 >> (lo + s)) & 0x01010101u) * 0x01020408u) >> 24) & 0xFu;
                    *rows++ = table + (long)(p0 | (p1 << 4)) * pool;
                }
                ++n;
            }
        }
    }
    return n;
}
"""


def horner(nb: int, index: str = "i", row: str = "r") -> str:
    """sum_s row_s[i] << s as a Horner expression over the nb bit rows (most significant first).
    Doubling is written v + v: GCC then uses one add with a shifted operand (with * 2 it spent a
    register on the constant 2 for smlabb and spilled a table row)."""
    expr = f"(int32_t){row}{nb - 1}[{index}]"
    for s in range(nb - 2, -1, -1):
        expr = f"mcu_dbl({expr}) + {row}{s}[{index}]"
    return expr


def _rows(nb: int, first: int = 0, row: str = "r") -> str:
    return " ".join(f"const int16_t *const {row}{s} = r[{first + s}];" for s in range(nb))


def bitserial_kernel_c(pool_size: int) -> str:
    """The helpers of the bit-serial kernels and the memoised kernel (the direct kernel is kernel IR:
    :func:`.kernels_ir.bitserial_direct`).  ``pool_size`` is not needed by the text (kept for the
    callers)."""
    del pool_size
    memo_leaves = "".join(
        f"MCU_LEAF void bs_memo{nb}(const int16_t *const *r, int32_t *sums, unsigned pool)\n{{\n"
        f"    {_rows(nb)}\n    unsigned i;\n"
        f"    for (i = 0; i < pool; ++i) sums[i] = {horner(nb)};\n}}\n"
        for nb in range(2, 9))
    memo_cases = "\n".join(f"                case {nb}: bs_memo{nb}(r, sums, (unsigned)pool); break;"
                            for nb in range(2, 9))
    head = ("#if defined(__GNUC__)\n#define MCU_LEAF static __attribute__((noinline, unused))\n#else\n"
            "#define MCU_LEAF static\n#endif\n"
            "static int32_t mcu_dbl(int32_t v) { return v + v; }\n"
            "/* 4 bytes as a little-endian word (any alignment) */\n"
            "MCU_KERNEL uint32_t mcu_le32_at(const int8_t *p) { uint32_t w; memcpy(&w, p, 4); return MCU_LE32(w); }\n")
    return head + memo_leaves + r"""
/* Memoised: per block, the bit-serial sums of all pool vectors once, then one lookup per channel. */
MCU_KERNEL void k_conv_bs_memo(const int32_t *g, const int8_t *in, const uint8_t *idx, const int32_t *bias,
                               const int32_t *wsum, const int32_t *mult, const int32_t *shift,
                               const int16_t *table, int32_t pool, int nb, const int16_t **rows,
                               uint16_t *blk, int32_t *sums, int32_t *acc, int8_t *out)
{
    const int lo = 8 - nb;
    const int oc = g[G_OC];
    int oy, ox, k, b;
    for (oy = 0; oy < g[G_OH]; ++oy)
        for (ox = 0; ox < g[G_OW]; ++ox) {
            const int n = bs_patterns(g, in, oy, ox, nb, table, pool, rows, blk);
            for (k = 0; k < oc; ++k) acc[k] = 0;
            for (b = 0; b < n; ++b) {
                const int16_t *const *r = rows + (long)b * nb;
                const uint8_t *ip = idx + (long)blk[b] * oc;
                switch (nb) {
""" + memo_cases + r"""
                default: break;
                }
                for (k = 0; k < oc; ++k) acc[k] += sums[ip[k]];
            }
            for (k = 0; k < oc; ++k) {
                const int32_t a = acc[k] * (1 << lo) + bias[k] + ((wsum[k] * ((1 << lo) - 1)) >> 1);
                *out++ = q_out(a, mult[k], shift[k], g[G_OUT_ZP], g[G_ACT_MIN], g[G_ACT_MAX]);
            }
        }
}
"""
