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


def _run_leaf(nb: int, pair: bool, unroll: int) -> str:
    """``bs_run{nb}``: the bit-serial sums of a run of ``n`` consecutive 8-channel blocks (one kernel
    row of taps inside the input: contiguous activations and, block-major, contiguous index rows).

    Per block, the nb patterns are built from two 32-bit words of activations in registers: the
    two words merged into nibble planes once (bits 4..7 of all 8 bytes in one word, bits 0..3 in
    another), then per bit one shift, one mask and one multiply that gathers the 8 bits into the
    top byte; then the channel loop (unrolled by
    ``unroll``) adds ``sum_s T[p_s][idx] << s`` to ``acc[k]``; ``pair``: two blocks per channel step
    (one accumulator load/store per two blocks)."""
    lo = 8 - nb

    def rows(tag: str, w0: str, w1: str) -> str:
        # Nibble planes of both words: byte i of {tag}h holds bits 4..7 of byte i of w0 (low nibble)
        # and of w1 (high nibble), the sign bits flipped (u = q + 128); {tag}l the same for bits 0..3.
        out = [f"        const uint32_t {tag}h = ((({w0} >> 4) & 0x0F0F0F0Fu) | ({w1} & 0xF0F0F0F0u)) ^ 0x88888888u;"]
        if lo < 4:
            out.append(f"        const uint32_t {tag}l = ({w0} & 0x0F0F0F0Fu) | (({w1} & 0x0F0F0F0Fu) << 4);")
        for s in range(nb):
            bit = lo + s
            src, sh = (f"{tag}h", bit - 4) if bit >= 4 else (f"{tag}l", bit)
            out.append(f"        const int16_t *const {tag}{s} = table + (long)BS_GATHER({src}, {sh}) * BS_POOL;")
        return "\n".join(out)

    def words(tag: str, at: str) -> str:
        return (f"        uint32_t {tag}0, {tag}1;\n        memcpy(&{tag}0, {at}, 4); memcpy(&{tag}1, {at} + 4, 4);\n"
                f"        {tag}0 = MCU_LE32({tag}0); {tag}1 = MCU_LE32({tag}1);")

    def term(k: str) -> str:
        e = horner(nb, f"ia[{k}]", "r")
        if pair:
            e += " + " + horner(nb, f"ib[{k}]", "q")
        return e

    step = 2 if pair else 1
    body = [words("a", "ip")]
    if pair:
        body.append(words("b", "ip + 8"))
    body.append(rows("r", "a0", "a1"))
    if pair:
        body.append(rows("q", "b0", "b1"))
    body.append("        const uint8_t *ia = ix;" + ("\n        const uint8_t *ib = ix + oc;" if pair else ""))
    unrolled = " ".join(f"acc[k + {u}] += {term(f'k + {u}')};" for u in range(unroll))
    body.append(f"        int k = 0;\n        for (; k + {unroll} <= oc; k += {unroll}) {{ {unrolled} }}\n"
                f"        for (; k < oc; ++k) acc[k] += {term('k')};")
    return (f"MCU_LEAF void bs_run{nb}{'p' if pair else ''}(const int16_t *table, const int8_t *ip, "
            f"const uint8_t *ix, int n, int32_t *acc, int oc)\n{{\n"
            f"    for (; n >= {step}; n -= {step}, ip += {8 * step}, ix += {step} * oc) {{\n"
            + "\n".join(body) + "\n    }\n}\n")


#: Bit counts whose direct kernel takes two blocks per channel step (registers: 2 * nb table rows).
PAIR_BITS = (2, 3, 4)


def bitserial_kernel_c(pool_size: int, unroll: int = 8) -> str:
    """The direct and memoised bit-serial conv kernels, the inner loop unrolled per bit count.

    The direct kernel walks, per output, the kernel rows of taps inside the input; each is one run of
    consecutive blocks (``bs_run{nb}``, one small leaf function per bit count so the table rows stay
    in registers).  One int32 accumulator per output channel (``acc``, static scratch); the indices
    are stored block-major ([block][channel]) so the channel loop reads them in order."""
    memo_leaves = "".join(
        f"MCU_LEAF void bs_memo{nb}(const int16_t *const *r, int32_t *sums, unsigned pool)\n{{\n"
        f"    {_rows(nb)}\n    unsigned i;\n"
        f"    for (i = 0; i < pool; ++i) sums[i] = {horner(nb)};\n}}\n"
        for nb in range(2, 9))
    run_leaves = "".join(_run_leaf(nb, False, unroll) for nb in range(2, 9))
    run_leaves += "".join(_run_leaf(nb, True, unroll) for nb in PAIR_BITS)
    run_cases = "\n".join(
        f"                case {nb}: "
        + (f"bs_run{nb}p(table, ip, ix, n, acc, oc); if (n & 1) "
           f"bs_run{nb}(table, ip + 8 * (n - 1), ix + (long)(n - 1) * oc, 1, acc, oc); break;"
           if nb in PAIR_BITS else f"bs_run{nb}(table, ip, ix, n, acc, oc); break;")
        for nb in range(2, 9))
    memo_cases = "\n".join(f"                case {nb}: bs_memo{nb}(r, sums, (unsigned)pool); break;"
                            for nb in range(2, 9))
    head = ("#if defined(__GNUC__)\n#define MCU_LEAF static __attribute__((noinline, unused))\n#else\n"
            "#define MCU_LEAF static\n#endif\n"
            f"#define BS_POOL {int(pool_size)}\n"
            "/* The 8-bit pattern in bits 0, 4, 8, .. 28 of x >> s (bit 8i: byte i of the first word, 8i + 4:\n"
            " * of the second), gathered into the top byte by one multiply (the partial products do not\n"
            " * overlap, so no carries). */\n"
            "#define BS_GATHER(x, s) ((((x) >> (s)) & 0x11111111u) * 0x01020408u >> 24)\n"
            "static int32_t mcu_dbl(int32_t v) { return v + v; }\n")
    return head + memo_leaves + run_leaves + r"""
/* acc[k] = sum over blocks of sum_s T[pattern_s][idx[block][k]] << (lo + s), + bias + correction */
MCU_KERNEL void k_conv_bs(const int32_t *g, const int8_t *in, const uint8_t *idx, const int32_t *bias,
                          const int32_t *wsum, const int32_t *mult, const int32_t *shift, const int16_t *table,
                          int nb, int32_t *acc, int8_t *out)
{
    const int lo = 8 - nb;
    const int oc = g[G_OC];
    const int J = g[G_IC] / 8;
    int oy, ox, k, ky;
    for (oy = 0; oy < g[G_OH]; ++oy)
        for (ox = 0; ox < g[G_OW]; ++ox) {
            /* the taps inside the input: kernel columns kx0..kx1-1 of every kernel row inside */
            const int x0 = ox * g[G_SW] - g[G_PL];
            const int kx0 = x0 < 0 ? -x0 : 0;
            const int kx1 = g[G_IW] - x0 < g[G_KW] ? g[G_IW] - x0 : g[G_KW];
            for (k = 0; k < oc; ++k) acc[k] = 0;
            for (ky = 0; kx0 < kx1 && ky < g[G_KH]; ++ky) {
                const int iy = oy * g[G_SH] - g[G_PT] + ky;
                const int8_t *ip;
                const uint8_t *ix;
                int n;
                if (iy < 0 || iy >= g[G_IH]) continue;
                ip = in + ((long)iy * g[G_IW] + x0 + kx0) * g[G_IC];
                ix = idx + (long)(ky * g[G_KW] + kx0) * J * oc;
                n = (kx1 - kx0) * J;
                switch (nb) {
""" + run_cases + r"""
                default: break;
                }
            }
            for (k = 0; k < oc; ++k) {
                const int32_t a = acc[k] * (1 << lo) + bias[k] + ((wsum[k] * ((1 << lo) - 1)) >> 1);
                *out++ = q_out(a, mult[k], shift[k], g[G_OUT_ZP], g[G_ACT_MIN], g[G_ACT_MAX]);
            }
        }
}

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
