/* CRC-32 (IEEE 802.3, reflected, zlib's crc32: same arguments, same value) for _native.pyx.

   Why not zlib's alone: zlib 1.2.13 checksums a 150-byte payload at about a quarter of its
   speed on a long buffer (a fixed cost per call), and a message's payload is that short. Here,
   on x86-64 CPUs with PCLMULQDQ (checked once, at run time), 16-byte blocks are folded with
   carry-less multiplies into one 16-byte remainder with the same CRC, which a table finishes
   with the last (< 16) bytes. Buffers under 64 bytes go to the table (slice-by-8) alone.
   Anywhere else (no PCLMULQDQ, another architecture) zlib's crc32 runs.

   The folding, in the reflected bit order (a register's bit 0 is the highest power): a
   16-byte block R = L (its first 8 bytes, the higher powers) * x^64 + H, moved D bits
   further, is L * x^(D+64) + H * x^D. A carry-less product of a 64-bit half with a 33-bit
   constant in this bit order carries one more factor x^-32, so the constants are
   x^(D+32) and x^(D-32) mod P, reflected over 33 bits: D = 128 folds one block into the
   next, D = 512 four blocks into the four after them (tests/protocol/test_native.py
   recomputes them, and compares this CRC with zlib's at every length and alignment). */

#ifndef LB_CRC32_H
#define LB_CRC32_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

static uint32_t lb_crc_table[8][256];

static void lb_crc32_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        lb_crc_table[0][i] = c;
    }
    for (int k = 1; k < 8; k++)
        for (int i = 0; i < 256; i++)
            lb_crc_table[k][i] = lb_crc_table[0][lb_crc_table[k - 1][i] & 0xFF]
                                 ^ (lb_crc_table[k - 1][i] >> 8);
}

/* The register (no inversions) after `n` more bytes: eight at a time, then one at a time. */
static inline uint32_t lb_crc32_table(uint32_t c, const unsigned char *p, size_t n)
{
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        v ^= c; /* little-endian: the register meets the first four bytes */
        c = lb_crc_table[7][v & 0xFF] ^ lb_crc_table[6][(v >> 8) & 0xFF]
            ^ lb_crc_table[5][(v >> 16) & 0xFF] ^ lb_crc_table[4][(v >> 24) & 0xFF]
            ^ lb_crc_table[3][(v >> 32) & 0xFF] ^ lb_crc_table[2][(v >> 40) & 0xFF]
            ^ lb_crc_table[1][(v >> 48) & 0xFF] ^ lb_crc_table[0][v >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = lb_crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(LB_CRC32_ZLIB_ONLY)
#include <immintrin.h>
#define LB_CRC32_CLMUL 1

__attribute__((target("pclmul,sse4.1")))
static inline __m128i lb_fold(__m128i x, __m128i k, __m128i next)
{
    return _mm_xor_si128(
        _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next);
}

/* n >= 64 */
__attribute__((target("pclmul,sse4.1")))
static uint32_t lb_crc32_clmul(uint32_t crc, const unsigned char *p, size_t n)
{
    /* (low half: x^(D+32), high half: x^(D-32)), mod P, reflected over 33 bits */
    const __m128i one = _mm_set_epi64x(0x0CCAA009Eull, 0x1751997D0ull);  /* D = 128 */
    const __m128i four = _mm_set_epi64x(0x1C6E41596ull, 0x154442BD4ull); /* D = 512 */
    __m128i x0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p),
                               _mm_cvtsi32_si128((int)~crc));
    p += 16;
    n -= 16;
    if (n >= 112) { /* four chains while 64 bytes remain, then folded into one */
        __m128i x1 = _mm_loadu_si128((const __m128i *)p);
        __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 16));
        __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 32));
        p += 48;
        n -= 48;
        while (n >= 64) {
            x0 = lb_fold(x0, four, _mm_loadu_si128((const __m128i *)p));
            x1 = lb_fold(x1, four, _mm_loadu_si128((const __m128i *)(p + 16)));
            x2 = lb_fold(x2, four, _mm_loadu_si128((const __m128i *)(p + 32)));
            x3 = lb_fold(x3, four, _mm_loadu_si128((const __m128i *)(p + 48)));
            p += 64;
            n -= 64;
        }
        x0 = lb_fold(lb_fold(lb_fold(x0, one, x1), one, x2), one, x3);
    }
    while (n >= 16) {
        x0 = lb_fold(x0, one, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    unsigned char rest[16];
    _mm_storeu_si128((__m128i *)rest, x0);
    return ~lb_crc32_table(lb_crc32_table(0, rest, 16), p, n);
}

static int lb_crc32_has_clmul = -1;
#endif

static const char *lb_crc32_setup(void)
{
    lb_crc32_init();
#ifdef LB_CRC32_CLMUL
    __builtin_cpu_init();
    lb_crc32_has_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    if (lb_crc32_has_clmul)
        return "pclmulqdq";
#endif
    return "zlib";
}

static inline uint32_t lb_crc32(uint32_t crc, const unsigned char *p, size_t n)
{
#ifdef LB_CRC32_CLMUL
    if (lb_crc32_has_clmul > 0) {
        if (n >= 64)
            return lb_crc32_clmul(crc, p, n);
        return ~lb_crc32_table(~crc, p, n);
    }
#endif
    return (uint32_t)crc32(crc, p, (unsigned int)n);
}

#endif
