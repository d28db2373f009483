/*
 * XXH3, 64 and 128 bits, with the default secret and seed 0: the hash of the compiled rule
 * tables (match/snapshot/format.py's keys) and of the seen stores' fingerprints (fingerprint.py).
 *
 * Written for urlsieve from the algorithm's published specification (xxHash's
 * doc/xxhash_spec.md, "XXH3 Algorithm Description"), so that the extension needs no
 * system header: its values are those of the `xxhash` package on the Python side, which
 * the tests hold it byte-for-byte equal to (every length 0-4,096, random and generated
 * inputs; tests/url/test_xxh3.py) and which the on-disk formats were written with.
 *
 * Only what urlsieve calls is here: XXH3_64bits(data, len) and XXH3_128bits(data, len),
 * unseeded. Inputs of 0-16, 17-128 and 129-240 bytes have their own short paths; longer
 * ones run the striped accumulator loop (scalar, or SSE2 where the target has it: the
 * same arithmetic on two lanes at a time). Python's reference of every caller hashes with
 * the `xxhash` package, so the compiled and pure-Python paths agree by construction.
 */
#ifndef URLSIEVE_XXH3_H
#define URLSIEVE_XXH3_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* URLSIEVE_XXH3_PORTABLE: no SSE2 and no 128-bit integer type, the code a target without
   them builds (the tests build this variant too, and compare its hashes). */
#if !defined(URLSIEVE_XXH3_PORTABLE) && \
    (defined(__SSE2__) || defined(_M_X64) || (defined(_M_IX86_FP) && _M_IX86_FP >= 2))
#include <emmintrin.h>
#define US_XXH3_SSE2 1
#endif

typedef struct {
    uint64_t low64, high64;
} us_xxh128;

#define US_P32_1 UINT64_C(0x9E3779B1)
#define US_P32_2 UINT64_C(0x85EBCA77)
#define US_P32_3 UINT64_C(0xC2B2AE3D)
#define US_P64_1 UINT64_C(0x9E3779B185EBCA87)
#define US_P64_2 UINT64_C(0xC2B2AE3D27D4EB4F)
#define US_P64_3 UINT64_C(0x165667B19E3779F9)
#define US_P64_4 UINT64_C(0x85EBCA77C2B2AE63)
#define US_P64_5 UINT64_C(0x27D4EB2F165667C5)
#define US_PMX1 UINT64_C(0x165667919E3779F9)
#define US_PMX2 UINT64_C(0x9FB21C651E98DF25)

/* The default secret (192 bytes), as the specification gives it. */
static const unsigned char us_xxh3_secret[192] = {
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad,
    0x1c, 0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3,
    0x67, 0x1f, 0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc,
    0xff, 0x72, 0x21, 0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6,
    0x81, 0x3a, 0x26, 0x4c, 0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65,
    0x8b, 0x1b, 0x53, 0x2e, 0xa3, 0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19,
    0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8, 0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9,
    0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d, 0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31,
    0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64, 0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb,
    0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb, 0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0,
    0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e, 0x2b, 0x16, 0xbe, 0x58, 0x7d,
    0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce, 0x45, 0xcb, 0x3a, 0x8f,
    0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};
#define US_SECRET_LEN 192
#define US_STRIPES (((US_SECRET_LEN) - 64) / 8) /* stripes a block: 16 */
#define US_BLOCK (64 * US_STRIPES)             /* 1,024 bytes */

/* ---- little-endian reads, byte swaps, rotations, the 64x64 -> 128 multiply ---------- */

#if defined(__GNUC__) || defined(__clang__)
#define US_BSWAP32(x) __builtin_bswap32(x)
#define US_BSWAP64(x) __builtin_bswap64(x)
#else
static inline uint32_t
US_BSWAP32(uint32_t x)
{
    return ((x << 24) & 0xff000000u) | ((x << 8) & 0x00ff0000u) | ((x >> 8) & 0x0000ff00u) |
           ((x >> 24) & 0x000000ffu);
}
static inline uint64_t
US_BSWAP64(uint64_t x)
{
    return ((uint64_t)US_BSWAP32((uint32_t)x) << 32) | US_BSWAP32((uint32_t)(x >> 32));
}
#endif

#if defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__) && \
    __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define US_LE32(x) US_BSWAP32(x)
#define US_LE64(x) US_BSWAP64(x)
#undef US_XXH3_SSE2
#else
#define US_LE32(x) (x)
#define US_LE64(x) (x)
#endif

static inline uint32_t
us_read32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return US_LE32(v);
}

static inline uint64_t
us_read64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return US_LE64(v);
}

static inline uint32_t
us_rotl32(uint32_t x, int r)
{
    return (x << r) | (x >> (32 - r));
}

static inline uint64_t
us_rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static inline us_xxh128
us_mult64to128(uint64_t a, uint64_t b)
{
    us_xxh128 r;
#if defined(__SIZEOF_INT128__) && !defined(URLSIEVE_XXH3_PORTABLE)
    __uint128_t p = (__uint128_t)a * b;
    r.low64 = (uint64_t)p;
    r.high64 = (uint64_t)(p >> 64);
#else /* schoolbook on 32-bit halves */
    uint64_t lo_lo = (a & 0xFFFFFFFFu) * (b & 0xFFFFFFFFu);
    uint64_t hi_lo = (a >> 32) * (b & 0xFFFFFFFFu);
    uint64_t lo_hi = (a & 0xFFFFFFFFu) * (b >> 32);
    uint64_t hi_hi = (a >> 32) * (b >> 32);
    uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xFFFFFFFFu) + lo_hi;
    r.high64 = (hi_lo >> 32) + (cross >> 32) + hi_hi;
    r.low64 = (cross << 32) | (lo_lo & 0xFFFFFFFFu);
#endif
    return r;
}

/* the 128-bit product folded to 64 bits (low xor high) */
static inline uint64_t
us_mul128_fold64(uint64_t a, uint64_t b)
{
    us_xxh128 p = us_mult64to128(a, b);
    return p.low64 ^ p.high64;
}

/* ---- the final mixes ----------------------------------------------------------------- */

static inline uint64_t
us_avalanche(uint64_t x)
{
    x ^= x >> 37;
    x *= US_PMX1;
    x ^= x >> 32;
    return x;
}

static inline uint64_t
us_avalanche_xxh64(uint64_t x)
{
    x ^= x >> 33;
    x *= US_P64_2;
    x ^= x >> 29;
    x *= US_P64_3;
    x ^= x >> 32;
    return x;
}

/* ---- 0-16 bytes ---------------------------------------------------------------------- */

static inline uint32_t
us_combined_1to3(const unsigned char *in, size_t len)
{
    return (uint32_t)in[len - 1] | ((uint32_t)len << 8) | ((uint32_t)in[0] << 16) |
           ((uint32_t)in[len >> 1] << 24);
}

static inline uint64_t
us_xxh3_64_0to16(const unsigned char *in, size_t len)
{
    const unsigned char *s = us_xxh3_secret;
    if (len > 8) {
        uint64_t low = (us_read64(s + 24) ^ us_read64(s + 32)) ^ us_read64(in);
        uint64_t high = (us_read64(s + 40) ^ us_read64(s + 48)) ^ us_read64(in + len - 8);
        uint64_t v = (uint64_t)len + US_BSWAP64(low) + high + us_mul128_fold64(low, high);
        return us_avalanche(v);
    }
    if (len >= 4) {
        uint64_t combined = (uint64_t)us_read32(in + len - 4) | ((uint64_t)us_read32(in) << 32);
        uint64_t v = (us_read64(s + 8) ^ us_read64(s + 16)) ^ combined;
        v ^= us_rotl64(v, 49) ^ us_rotl64(v, 24);
        v *= US_PMX2;
        v ^= (v >> 35) + (uint64_t)len;
        v *= US_PMX2;
        v ^= v >> 28;
        return v;
    }
    if (len > 0) {
        uint64_t v = (uint64_t)(us_read32(s) ^ us_read32(s + 4)) ^ us_combined_1to3(in, len);
        return us_avalanche_xxh64(v);
    }
    return us_avalanche_xxh64(us_read64(s + 56) ^ us_read64(s + 64));
}

static inline us_xxh128
us_xxh3_128_0to16(const unsigned char *in, size_t len)
{
    const unsigned char *s = us_xxh3_secret;
    us_xxh128 r;
    if (len > 8) {
        uint64_t first = us_read64(in), last = us_read64(in + len - 8);
        uint64_t val1 = (us_read64(s + 32) ^ us_read64(s + 40)) ^ first ^ last;
        uint64_t val2 = (us_read64(s + 48) ^ us_read64(s + 56)) ^ last;
        us_xxh128 m = us_mult64to128(val1, US_P64_1);
        uint64_t low = m.low64 + ((uint64_t)(len - 1) << 54);
        uint64_t high = m.high64 + ((val2 >> 32) << 32) + (uint64_t)(uint32_t)val2 * US_P32_2;
        low ^= US_BSWAP64(high);
        us_xxh128 m2 = us_mult64to128(low, US_P64_2);
        r.low64 = us_avalanche(m2.low64);
        r.high64 = us_avalanche(m2.high64 + high * US_P64_2);
        return r;
    }
    if (len >= 4) {
        uint64_t combined = (uint64_t)us_read32(in) | ((uint64_t)us_read32(in + len - 4) << 32);
        uint64_t v = (us_read64(s + 16) ^ us_read64(s + 24)) ^ combined;
        us_xxh128 m = us_mult64to128(v, US_P64_1 + ((uint64_t)len << 2));
        uint64_t high = m.high64 + (m.low64 << 1);
        uint64_t low = m.low64 ^ (high >> 3);
        low ^= low >> 35;
        low *= US_PMX2;
        low ^= low >> 28;
        r.low64 = low;
        r.high64 = us_avalanche(high);
        return r;
    }
    if (len > 0) {
        uint32_t c = us_combined_1to3(in, len);
        uint64_t low = (uint64_t)(us_read32(s) ^ us_read32(s + 4)) ^ c;
        uint64_t high = (uint64_t)(us_read32(s + 8) ^ us_read32(s + 12)) ^
                        (uint64_t)us_rotl32(US_BSWAP32(c), 13);
        r.low64 = us_avalanche_xxh64(low);
        r.high64 = us_avalanche_xxh64(high);
        return r;
    }
    r.low64 = us_avalanche_xxh64(us_read64(s + 64) ^ us_read64(s + 72));
    r.high64 = us_avalanche_xxh64(us_read64(s + 80) ^ us_read64(s + 88));
    return r;
}

/* ---- 17-240 bytes -------------------------------------------------------------------- */

static inline uint64_t
us_mix16(const unsigned char *in, const unsigned char *s)
{
    return us_mul128_fold64(us_read64(in) ^ us_read64(s), us_read64(in + 8) ^ us_read64(s + 8));
}

static inline uint64_t
us_xxh3_64_17to240(const unsigned char *in, size_t len)
{
    const unsigned char *s = us_xxh3_secret;
    uint64_t acc = (uint64_t)len * US_P64_1;
    if (len <= 128) {
        for (ptrdiff_t i = (ptrdiff_t)((len - 1) >> 5); i >= 0; i--) {
            acc += us_mix16(in + 16 * i, s + 32 * i);
            acc += us_mix16(in + len - 16 * i - 16, s + 32 * i + 16);
        }
        return us_avalanche(acc);
    }
    size_t chunks = len >> 4;
    for (size_t i = 0; i < 8; i++) acc += us_mix16(in + 16 * i, s + 16 * i);
    acc = us_avalanche(acc);
    for (size_t i = 8; i < chunks; i++) acc += us_mix16(in + 16 * i, s + 16 * (i - 8) + 3);
    acc += us_mix16(in + len - 16, s + 119);
    return us_avalanche(acc);
}

/* mixTwoChunks of the specification: two 16-byte chunks into the two accumulators */
static inline void
us_mix32(uint64_t acc[2], const unsigned char *a, const unsigned char *b, const unsigned char *s)
{
    acc[0] += us_mix16(a, s);
    acc[1] += us_mix16(b, s + 16);
    acc[0] ^= us_read64(b) + us_read64(b + 8);
    acc[1] ^= us_read64(a) + us_read64(a + 8);
}

static inline us_xxh128
us_xxh3_128_17to240(const unsigned char *in, size_t len)
{
    const unsigned char *s = us_xxh3_secret;
    uint64_t acc[2] = {(uint64_t)len * US_P64_1, 0};
    if (len <= 128) {
        for (ptrdiff_t i = (ptrdiff_t)((len - 1) >> 5); i >= 0; i--)
            us_mix32(acc, in + 16 * i, in + len - 16 * i - 16, s + 32 * i);
    } else {
        size_t chunks = len >> 5;
        for (size_t i = 0; i < 4; i++) us_mix32(acc, in + 32 * i, in + 32 * i + 16, s + 32 * i);
        acc[0] = us_avalanche(acc[0]);
        acc[1] = us_avalanche(acc[1]);
        for (size_t i = 4; i < chunks; i++)
            us_mix32(acc, in + 32 * i, in + 32 * i + 16, s + 32 * (i - 4) + 3);
        us_mix32(acc, in + len - 16, in + len - 32, s + 103); /* seed 0: -seed is 0 too */
    }
    us_xxh128 r;
    uint64_t high = acc[0] * US_P64_1 + acc[1] * US_P64_4 + (uint64_t)len * US_P64_2;
    r.low64 = us_avalanche(acc[0] + acc[1]);
    r.high64 = (uint64_t)0 - us_avalanche(high);
    return r;
}

/* ---- more than 240 bytes: blocks of 16 stripes of 64 bytes, 8 accumulators ----------- */

static inline void
us_accumulate(uint64_t acc[8], const unsigned char *stripe, const unsigned char *s)
{
#ifdef US_XXH3_SSE2
    for (int i = 0; i < 8; i += 2) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(acc + i));
        __m128i d = _mm_loadu_si128((const __m128i *)(const void *)(stripe + 8 * i));
        __m128i k = _mm_loadu_si128((const __m128i *)(const void *)(s + 8 * i));
        __m128i v = _mm_xor_si128(d, k);
        /* low 32 bits times high 32 bits of each lane, 64-bit products */
        __m128i prod = _mm_mul_epu32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(0, 3, 0, 1)));
        /* each lane gets the other lane's data: acc[i ^ 1] += stripe[i] */
        __m128i swapped = _mm_shuffle_epi32(d, _MM_SHUFFLE(1, 0, 3, 2));
        a = _mm_add_epi64(a, _mm_add_epi64(prod, swapped));
        _mm_storeu_si128((__m128i *)(void *)(acc + i), a);
    }
#else
    for (int i = 0; i < 8; i++) {
        uint64_t d = us_read64(stripe + 8 * i);
        uint64_t v = d ^ us_read64(s + 8 * i);
        acc[i ^ 1] += d;
        acc[i] += (v & 0xFFFFFFFFu) * (v >> 32);
    }
#endif
}

static inline void
us_scramble(uint64_t acc[8], const unsigned char *s)
{
    for (int i = 0; i < 8; i++) {
        uint64_t a = acc[i];
        a ^= a >> 47;
        a ^= us_read64(s + 8 * i);
        acc[i] = a * US_P32_1;
    }
}

static inline uint64_t
us_merge(const uint64_t acc[8], const unsigned char *s, uint64_t init)
{
    uint64_t r = init;
    for (int i = 0; i < 4; i++)
        r += us_mul128_fold64(acc[2 * i] ^ us_read64(s + 16 * i),
                              acc[2 * i + 1] ^ us_read64(s + 16 * i + 8));
    return us_avalanche(r);
}

static inline void
us_xxh3_long(uint64_t acc[8], const unsigned char *in, size_t len)
{
    const unsigned char *s = us_xxh3_secret;
    acc[0] = US_P32_3;
    acc[1] = US_P64_1;
    acc[2] = US_P64_2;
    acc[3] = US_P64_3;
    acc[4] = US_P64_4;
    acc[5] = US_P32_2;
    acc[6] = US_P64_5;
    acc[7] = US_P32_1;
    size_t blocks = (len - 1) / US_BLOCK; /* the last block, full or not, is left over */
    for (size_t b = 0; b < blocks; b++) {
        const unsigned char *block = in + b * US_BLOCK;
        for (size_t n = 0; n < US_STRIPES; n++) us_accumulate(acc, block + 64 * n, s + 8 * n);
        us_scramble(acc, s + US_SECRET_LEN - 64);
    }
    const unsigned char *last = in + blocks * US_BLOCK;
    size_t left = len - blocks * US_BLOCK; /* 1 ..= US_BLOCK */
    size_t stripes = (left - 1) / 64;
    for (size_t n = 0; n < stripes; n++) us_accumulate(acc, last + 64 * n, s + 8 * n);
    us_accumulate(acc, in + len - 64, s + US_SECRET_LEN - 71);
}

/* ---- the two entry points ------------------------------------------------------------ */

static inline uint64_t
XXH3_64bits(const void *data, size_t len)
{
    const unsigned char *in = (const unsigned char *)data;
    if (len <= 16) return us_xxh3_64_0to16(in, len);
    if (len <= 240) return us_xxh3_64_17to240(in, len);
    uint64_t acc[8];
    us_xxh3_long(acc, in, len);
    return us_merge(acc, us_xxh3_secret + 11, (uint64_t)len * US_P64_1);
}

static inline us_xxh128
XXH3_128bits(const void *data, size_t len)
{
    const unsigned char *in = (const unsigned char *)data;
    if (len <= 16) return us_xxh3_128_0to16(in, len);
    if (len <= 240) return us_xxh3_128_17to240(in, len);
    uint64_t acc[8];
    us_xxh3_long(acc, in, len);
    us_xxh128 r;
    r.low64 = us_merge(acc, us_xxh3_secret + 11, (uint64_t)len * US_P64_1);
    r.high64 = us_merge(acc, us_xxh3_secret + US_SECRET_LEN - 75, ~((uint64_t)len * US_P64_2));
    return r;
}

#endif /* URLSIEVE_XXH3_H */
