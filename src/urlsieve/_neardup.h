/* Near-duplicate documents: the SimHash of a text, and the near-duplicate index's table walk.
 *
 * Included once by _sp_neardup.c, after _speedups.h (Python.h, stdint.h, _xxh3.h); all here
 * is static. The pure-Python references are urlsieve/neardup/simhash.py (_vote, _features,
 * _token_bytes) and urlsieve/neardup/index.py (_Tables._lookup_py), held equal by
 * tests/neardup/test_neardup_speedups.py.
 *
 * simhash_text(text, shingle) -> int | None
 *     The SimHash of an ASCII str: tokens are the runs of [A-Za-z0-9_], letters lowered (what
 *     _token_bytes does for ASCII text); None for a text that is not all ASCII (the caller
 *     normalises it and calls simhash_str). Two paths, chosen at run time (nd_simd): a byte
 *     at a time (portable), or with AVX-512 (F, BW, DQ): 64 bytes classified and lowered at
 *     a time into a padded copy, the tokens found from the edges of the word bitmap, the
 *     tokens of 1-16 bytes hashed eight at a time (XXH3-64's three short cases in vector
 *     lanes, blended), the votes counted by VPMOVM2B.
 * simhash_tokens(tokens, shingle) -> int
 *     The SimHash of a list of token bytes.
 * simhash_str(text, shingle) -> int
 *     The SimHash of a str of any characters, already NFKC-normalised and case-folded by the
 *     caller but for ASCII letters, lowered here (simhash._prepared): tokens are the runs of
 *     \w (alphanumeric or "_"), a run of kana, CJK ideographs or hangul inside one becoming
 *     its character bigrams (what simhash.tokens gives), each hashed as UTF-8 (lone
 *     surrogates passed through).
 *     Both: each token hashed with XXH3-64; with shingle > 1, each run of `shingle` tokens
 *     combined by a polynomial (rolling: linear in the tokens whatever the width) and
 *     murmur3's finaliser; the distinct features kept (a hash set with a per-process random
 *     multiplier, so crafted tokens cannot make it quadratic, probed without a branch on
 *     whether a token is new); each bit the majority vote.
 * nd_simd(name | None) -> str
 *     The SimHash path of ASCII text in use ("plain", "avx512"), after choosing name: for
 *     the tests, which hold every path the CPU has equal to the reference.
 * nd_build(fps, n, tables) -> capsule
 *     The tables of the first n fingerprints of fps (a uint64 buffer); tables: per table, the
 *     (shift, mask, offset) of each block keying it (index.Layout). Per table, the documents
 *     sorted by key with their fingerprints beside them (the walk reads one run of memory)
 *     and, for keys of up to 20 bits, where each key's run starts (else a binary search).
 * nd_query(capsule, fp, k, fps, n_total[, keys]) -> list[tuple[int | str, int]]
 *     (document, distance) of every document within k bits of fp, each once: the built ones
 *     by the tables, then the documents built since ([n, n_total) of fps) by a scan. With
 *     keys (a list of str), (keys[document], distance) sorted by distance, then key: what
 *     MemoryIndex.query returns, without a Python loop and sort around the call.
 */

#include <time.h>
#if defined(__x86_64__) && (defined(__clang__) || __GNUC__ >= 8)
/* The VPOPCNTQ candidate scan, chosen at run time where the CPU has it (nd_seed). Its own
   macro: since the extension's split, _sp_scan.c's SCAN_AVX512 is not seen here, and the
   scan had quietly fallen back to popcnt. */
#include <immintrin.h>
#define ND_AVX512 1
/* The SimHash of ASCII text 64 bytes, eight tokens and one vote at a time (nd_wide). */
#define ND_WIDE __attribute__((target("avx512f,avx512bw,avx512dq,bmi,bmi2")))
#endif

#define ND_MAX_TEXT (8 << 20) /* simhash.MAX_TEXT */
#define ND_MAX_TABLES 64
#define ND_DIRECT_BITS 20
#define ND_SMALL_SET 2048 /* hash set slots on the stack (texts of up to 1024 tokens) */
#define ND_SMALL_TEXT 2048 /* token hashes on the stack (texts of up to 4094 characters) */
#define ND_CAPSULE "urlsieve._speedups.neardup"

static const uint64_t nd_mul = 0x9E3779B97F4A7C15ULL;

static uint64_t nd_set_mult; /* odd, random per process: the hash set's multiplier */
static void nd_first_use(void);

/* The first j in [lo, hi) with f[j] within k bits of fp, or hi: with the popcnt instruction
   where the CPU has it (chosen once, in nd_seed), else the compiler's popcount. */
#define ND_NEXT_BODY                                                                           \
    for (; lo < hi; lo++)                                                                      \
        if (__builtin_popcountll(f[lo] ^ fp) <= k) break;                                      \
    return lo;

static size_t
nd_next_plain(const uint64_t *f, size_t lo, size_t hi, uint64_t fp, int k)
{
    ND_NEXT_BODY
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("popcnt"))) static size_t
nd_next_popcnt(const uint64_t *f, size_t lo, size_t hi, uint64_t fp, int k)
{
    ND_NEXT_BODY
}
#endif

#ifdef ND_AVX512
/* Eight at a time: VPOPCNTQ, an unsigned compare to k, the first lane that passes. */
__attribute__((target("avx512f,avx512vpopcntdq"))) static size_t
nd_next_avx512(const uint64_t *f, size_t lo, size_t hi, uint64_t fp, int k)
{
    const __m512i q = _mm512_set1_epi64((long long)fp), limit = _mm512_set1_epi64(k);
    for (; lo + 8 <= hi; lo += 8) {
        __m512i x = _mm512_xor_si512(_mm512_loadu_si512((const void *)(f + lo)), q);
        __mmask8 m = _mm512_cmple_epu64_mask(_mm512_popcnt_epi64(x), limit);
        if (m) return lo + (size_t)__builtin_ctz((unsigned)m);
    }
    for (; lo < hi; lo++)
        if (__builtin_popcountll(f[lo] ^ fp) <= k) break;
    return lo;
}
#endif

static size_t (*nd_next)(const uint64_t *, size_t, size_t, uint64_t, int) = nd_next_plain;
static const char *nd_next_name = "plain";

/* The argument of nd_popcount and nd_simd (after the first use's choices): *name the str's
   text, or NULL for None; -1 with TypeError for anything else. */
static int
nd_choice(PyObject *arg, const char *usage, const char **name)
{
    nd_first_use();
    *name = NULL;
    if (arg == Py_None) return 0;
    *name = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    if (*name != NULL) return 0;
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, usage);
    return -1;
}

/* The SimHash of ASCII text with AVX-512 (nd_hash_ascii_avx512, nd_distinct_avx512): chosen
   once, in nd_seed, where the CPU has it. */
static int nd_wide = 0;

static int
nd_wide_here(void)
{
#ifdef ND_AVX512
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("bmi") &&
           __builtin_cpu_supports("bmi2");
#else
    return 0;
#endif
}

/* nd_simd(name | None) -> str: the SimHash path in use ("plain", "avx512"), after choosing
   `name` (ValueError when this build or CPU lacks it): for the tests. */
static PyObject *
nd_simd(PyObject *self, PyObject *arg)
{
    const char *name = NULL;
    if (nd_choice(arg, "nd_simd(name)", &name) < 0) return NULL;
    if (name != NULL) {
        if (strcmp(name, "plain") == 0) nd_wide = 0;
        else if (strcmp(name, "avx512") == 0 && nd_wide_here()) nd_wide = 1;
        else {
            PyErr_Format(PyExc_ValueError, "nd_simd: %s is not available here", name);
            return NULL;
        }
    }
    return PyUnicode_FromString(nd_wide ? "avx512" : "plain");
}

/* nd_popcount(name | None) -> str: the candidate scan in use ("plain", "popcnt", "avx512"),
   after choosing `name` (ValueError when this build or CPU lacks it): for the tests. */
static PyObject *
nd_popcount(PyObject *self, PyObject *arg)
{
    const char *name = NULL;
    if (nd_choice(arg, "nd_popcount(name)", &name) < 0) return NULL;
    if (name != NULL) {
        if (strcmp(name, "plain") == 0) {
            nd_next = nd_next_plain;
            nd_next_name = "plain";
        }
#if defined(__x86_64__) && defined(__GNUC__)
        else if (strcmp(name, "popcnt") == 0 && __builtin_cpu_supports("popcnt")) {
            nd_next = nd_next_popcnt;
            nd_next_name = "popcnt";
        }
#endif
#ifdef ND_AVX512
        else if (strcmp(name, "avx512") == 0 && __builtin_cpu_supports("avx512f") &&
                 __builtin_cpu_supports("avx512vpopcntdq")) {
            nd_next = nd_next_avx512;
            nd_next_name = "avx512";
        }
#endif
        else {
            PyErr_Format(PyExc_ValueError, "nd_popcount: %s is not available here", name);
            return NULL;
        }
    }
    return PyUnicode_FromString(nd_next_name);
}

static void
nd_seed(void)
{
    if (nd_set_mult) return;
    /* addresses (randomised by ASLR), the time and the clock: not secret, only unknown to
       whoever writes the text in advance */
    uint64_t seed = (uint64_t)(uintptr_t)&nd_set_mult ^ ((uint64_t)(uintptr_t)&seed << 17) ^
                    (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    seed ^= seed >> 29;
    seed *= 0xBF58476D1CE4E5B9ULL;
    seed ^= seed >> 32;
    nd_set_mult = seed | 1;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("popcnt")) {
        nd_next = nd_next_popcnt;
        nd_next_name = "popcnt";
    }
#endif
#ifdef ND_AVX512
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vpopcntdq")) {
        nd_next = nd_next_avx512;
        nd_next_name = "avx512";
    }
#endif
    nd_wide = nd_wide_here();
}

static inline uint64_t
nd_fmix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDULL;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ULL;
    x ^= x >> 33;
    return x;
}

/* Shingles in place: h[j] <- fmix(h[j]*M^(w-1) + ... + h[j+w-1]) for j < n - w + 1, by a
   rolling sum (mod 2^64, equal to simhash._features' Horner form); returns the count. */
static size_t
nd_shingles(uint64_t *h, size_t n, size_t shingle)
{
    if (shingle <= 1 || n <= 1) return n;
    size_t width = shingle < n ? shingle : n, runs = n - width + 1;
    uint64_t top = 1; /* M^(width-1) */
    for (size_t i = 1; i < width; i++) top *= nd_mul;
    uint64_t c = 0;
    for (size_t i = 0; i < width; i++) c = c * nd_mul + h[i];
    for (size_t j = 0; j < runs; j++) {
        uint64_t next = c;
        if (j + 1 < runs) next = (c - h[j] * top) * nd_mul + h[j + width];
        h[j] = nd_fmix(c);
        c = next;
    }
    return runs;
}

/* spread[v]: byte j is bit j of v. */
static uint64_t nd_spread[256];
/* lower[c]: c lowered for a word byte ([A-Za-z0-9_]), 0 for a separator. */
static unsigned char nd_lower[256];

static void
nd_init_spread(void)
{
    for (int c = 0; c < 256; c++) {
        int word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                   (c >= '0' && c <= '9') || c == '_';
        nd_lower[c] = word ? (unsigned char)((c >= 'A' && c <= 'Z') ? (c | 0x20) : c) : 0;
    }
    for (int v = 0; v < 256; v++) {
        uint64_t s = 0;
        for (int j = 0; j < 8; j++)
            if (v >> j & 1) s |= (uint64_t)1 << (8 * j);
        nd_spread[v] = s;
    }
}

/* A hash set of uint64 (a per-process random multiplier picks the slot: crafted tokens
   cannot make it quadratic); on the stack for up to ND_SMALL_SET / 2 values. */
typedef struct {
    int bits;
    size_t mask;
    uint64_t *set;
    unsigned char *used;
    uint64_t set_here[ND_SMALL_SET];
    unsigned char used_here[ND_SMALL_SET];
} nd_set;

static int
nd_set_open(nd_set *s, size_t n)
{
    nd_first_use();
    s->bits = 4;
    while (((size_t)1 << s->bits) < 2 * n) s->bits++;
    size_t size = (size_t)1 << s->bits;
    s->mask = size - 1;
    s->set = s->set_here;
    s->used = s->used_here;
    if (size > ND_SMALL_SET) { /* a long text: on the heap */
        s->set = (uint64_t *)malloc(size * sizeof(uint64_t));
        s->used = (unsigned char *)malloc(size);
        if (s->set == NULL || s->used == NULL) {
            free(s->set);
            free(s->used);
            return -1;
        }
    }
    memset(s->used, 0, size);
    return 0;
}

static void
nd_set_close(nd_set *s)
{
    if (s->set != s->set_here) {
        free(s->set);
        free(s->used);
    }
}

/* Slot `at` holds another value than x (probe on): one branch, taken on a collision only.
   Written with && (or left to the compiler, &), the branch on an empty slot and the one on
   an equal value each mispredict on half of a page's tokens; the asm hides from the
   compiler that `differs` is 0 or 1, so it cannot split the test. An unused slot's value is
   read and ignored. */
static inline int
nd_set_collides(const nd_set *s, size_t at, uint64_t x)
{
    unsigned used = s->used[at], differs = s->set[at] != x;
#if defined(__GNUC__)
    __asm__("" : "+r"(differs));
#endif
    return (int)(used & differs);
}

/* Adds x: 1 when it is new, 0 when it was there. */
static inline int
nd_set_add(nd_set *s, uint64_t x)
{
    size_t at = (size_t)((x * nd_set_mult) >> (64 - s->bits));
    while (nd_set_collides(s, at, x)) at = (at + 1) & s->mask;
    int fresh = s->used[at] == 0;
    s->used[at] = 1;
    s->set[at] = x;
    return fresh;
}

/* x is in the set (without a branch on the answer: a candidate shares half of its
   features with the query, or so). */
static inline int
nd_set_has(const nd_set *s, uint64_t x)
{
    size_t at = (size_t)((x * nd_set_mult) >> (64 - s->bits));
    while (nd_set_collides(s, at, x)) at = (at + 1) & s->mask;
    unsigned used = s->used[at], same = s->set[at] == x;
    return (int)(used & same);
}

/* The majority vote of each bit over distinct values, counted as they come: eight byte
   lanes per 64 bits (nd_spread puts bit j of a byte in byte j), added to the totals
   before a lane can pass 255. */
typedef struct {
    uint64_t lanes[8], ones[64];
    unsigned pending;
} nd_votes;

static void
nd_votes_flush(nd_votes *v)
{
    for (int b = 0; b < 8; b++) {
        for (int j = 0; j < 8; j++) v->ones[8 * b + j] += (v->lanes[b] >> (8 * j)) & 0xff;
        v->lanes[b] = 0;
    }
    v->pending = 0;
}

static inline void
nd_votes_add(nd_votes *v, uint64_t x)
{
    for (int b = 0; b < 8; b++) v->lanes[b] += nd_spread[(x >> (8 * b)) & 0xff];
    if (++v->pending == 255) nd_votes_flush(v);
}

/* Each bit set where more than half of the n values voted have it. */
static uint64_t
nd_votes_result(nd_votes *v, size_t n)
{
    nd_votes_flush(v);
    uint64_t fp = 0;
    for (int i = 0; i < 64; i++)
        if (2 * v->ones[i] > n) fp |= (uint64_t)1 << i;
    return fp;
}

/* The loop of nd_distinct: each value looked up in the set s without a branch on whether
   it is new (half of a page's tokens are repeats: a branch mispredicts), kept at h[kept]
   (overwritten by the next one when it was a repeat) and VOTE(value, or 0 for a repeat). */
#define ND_DISTINCT_LOOP(VOTE)                                                                 \
    for (size_t i = 0; i < n; i++) {                                                           \
        uint64_t x = h[i], fresh = (uint64_t)nd_set_add(&s, x);                                \
        h[kept] = x;                                                                           \
        kept += (size_t)fresh;                                                                 \
        VOTE(x & (0 - fresh));                                                                 \
    }

static size_t
nd_distinct_plain(uint64_t *h, size_t n, uint64_t *fp)
{
    nd_set s;
    if (nd_set_open(&s, n) < 0) return (size_t)-1;
    nd_votes v;
    memset(&v, 0, sizeof v);
    size_t kept = 0;
#define ND_VOTE_PLAIN(x) nd_votes_add(&v, (x))
    ND_DISTINCT_LOOP(ND_VOTE_PLAIN)
#undef ND_VOTE_PLAIN
    nd_set_close(&s);
    *fp = nd_votes_result(&v, kept);
    return kept;
}

#ifdef ND_AVX512
/* Votes as 64 byte counters: VPMOVM2B makes a value's bits 64 bytes of 0 or -1, subtracted;
   widened to 32-bit counters every 255 values. */
#define ND_VOTE_WIDE(x)                                                                        \
    do {                                                                                       \
        votes = _mm512_sub_epi8(votes, _mm512_movm_epi8((__mmask64)(x)));                     \
        if (++pending == 255) {                                                                \
            ND_VOTES_WIDEN();                                                                  \
        }                                                                                      \
    } while (0)
#define ND_VOTES_WIDEN()                                                                       \
    do {                                                                                       \
        for (int q = 0; q < 4; q++) /* each quarter: 16 byte counters to 32 bits */           \
            ones[q] = _mm512_add_epi32(ones[q], _mm512_cvtepu8_epi32(nd_quarter(votes, q)));   \
        votes = _mm512_setzero_si512();                                                        \
        pending = 0;                                                                           \
    } while (0)

/* Quarter q (0-3) of v: _mm512_extracti32x4_epi32 takes a constant. */
ND_WIDE static inline __m128i
nd_quarter(__m512i v, int q)
{
    switch (q) {
    case 0: return _mm512_extracti32x4_epi32(v, 0);
    case 1: return _mm512_extracti32x4_epi32(v, 1);
    case 2: return _mm512_extracti32x4_epi32(v, 2);
    default: return _mm512_extracti32x4_epi32(v, 3);
    }
}

ND_WIDE static size_t
nd_distinct_avx512(uint64_t *h, size_t n, uint64_t *fp)
{
    nd_set s;
    if (nd_set_open(&s, n) < 0) return (size_t)-1;
    __m512i votes = _mm512_setzero_si512();
    __m512i ones[4] = {votes, votes, votes, votes};
    unsigned pending = 0;
    size_t kept = 0;
    ND_DISTINCT_LOOP(ND_VOTE_WIDE)
    ND_VOTES_WIDEN();
    nd_set_close(&s);
    /* 2 * ones > kept, as ones > kept / 2 (rounded down) */
    const __m512i half = _mm512_set1_epi32((int)(uint32_t)(kept / 2));
    uint64_t out = 0;
    for (int j = 0; j < 4; j++)
        out |= (uint64_t)_mm512_cmpgt_epu32_mask(ones[j], half) << (16 * j);
    *fp = out;
    return kept;
}
#undef ND_VOTE_WIDE
#undef ND_VOTES_WIDEN
#endif

/* h[0..n) compacted to its distinct values, first occurrences in order, and *fp their
   SimHash (each bit the majority vote): their count, or (size_t)-1 when memory runs out. */
static size_t
nd_distinct(uint64_t *h, size_t n, uint64_t *fp)
{
    *fp = 0;
    if (n == 0) return 0;
#ifdef ND_AVX512
    if (nd_wide) return nd_distinct_avx512(h, n, fp);
#endif
    return nd_distinct_plain(h, n, fp);
}

/* The SimHash (features = 0), or it and the distinct features as bytes (features = 1), of
   the token hashes h[0..n); h is overwritten, and freed unless it is `keep`. */
static PyObject *
nd_finish(uint64_t *h, size_t n, Py_ssize_t shingle, const uint64_t *keep, int features)
{
    n = nd_shingles(h, n, (size_t)shingle);
    nd_first_use();
    uint64_t fp;
    size_t kept = nd_distinct(h, n, &fp);
    PyObject *out = NULL;
    if (kept == (size_t)-1) PyErr_NoMemory();
    else if (features)
        out = Py_BuildValue("(Ky#)", (unsigned long long)fp, (const char *)h,
                            (Py_ssize_t)(kept * 8));
    else out = PyLong_FromUnsignedLongLong(fp);
    if (h != keep) free(h);
    return out;
}

static int
nd_shingle_arg(PyObject *arg, Py_ssize_t *shingle)
{
    *shingle = PyLong_AsSsize_t(arg);
    if (*shingle == -1 && PyErr_Occurred()) return -1;
    if (*shingle < 1) {
        PyErr_Format(PyExc_ValueError, "shingle must be at least 1, not %zd", *shingle);
        return -1;
    }
    return 0;
}

/* The (text: str, shingle) arguments of simhash_text and simhash_str: the text, or NULL. */
static PyObject *
nd_text_args(PyObject *const *args, Py_ssize_t nargs, const char *name, Py_ssize_t *shingle)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "%s(text, shingle)", name);
        return NULL;
    }
    if (!PyUnicode_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "%s: text must be str", name);
        return NULL;
    }
    return nd_shingle_arg(args[1], shingle) < 0 ? NULL : args[0];
}

/* The token hashes of ASCII text p[0..len) into h (room for len / 2 + 1): the runs of
   [A-Za-z0-9_], letters lowered, each hashed with XXH3-64, in order. Their count, or
   (size_t)-1 when memory runs out. The portable path: a byte at a time. */
static size_t
nd_hash_ascii_plain(const unsigned char *p, size_t len, uint64_t *h)
{
    unsigned char word_here[256];
    size_t n = 0, i = 0;
    while (i < len) {
        while (i < len && !nd_lower[p[i]]) i++;
        size_t start = i;
        int upper = 0;
        while (i < len && nd_lower[p[i]]) upper |= nd_lower[p[i]] != p[i], i++;
        size_t w = i - start;
        if (w == 0) break;
        if (!upper) { /* already lower case: hashed where it is */
            h[n++] = XXH3_64bits(p + start, w);
            continue;
        }
        unsigned char *word = w <= sizeof word_here ? word_here : (unsigned char *)malloc(w);
        if (word == NULL) return (size_t)-1;
        for (size_t j = 0; j < w; j++) word[j] = nd_lower[p[start + j]];
        h[n++] = XXH3_64bits(word, w);
        if (word != word_here) free(word);
    }
    return n;
}

#ifdef ND_AVX512
#define ND_BATCH 64 /* tokens hashed together */

/* The 128-bit product of each pair of 64-bit lanes, folded (low ^ high): us_mul128_fold64
   on four 32 x 32 -> 64 bit products. */
ND_WIDE static inline __m512i
nd_fold_x8(__m512i a, __m512i b)
{
    const __m512i low32 = _mm512_set1_epi64(0xFFFFFFFF);
    __m512i ah = _mm512_srli_epi64(a, 32), bh = _mm512_srli_epi64(b, 32);
    __m512i ll = _mm512_mul_epu32(a, b), hl = _mm512_mul_epu32(ah, b);
    __m512i lh = _mm512_mul_epu32(a, bh), hh = _mm512_mul_epu32(ah, bh);
    __m512i cross = _mm512_add_epi64(_mm512_add_epi64(_mm512_srli_epi64(ll, 32),
                                                      _mm512_and_si512(hl, low32)), lh);
    __m512i high = _mm512_add_epi64(_mm512_add_epi64(_mm512_srli_epi64(hl, 32),
                                                     _mm512_srli_epi64(cross, 32)), hh);
    __m512i low = _mm512_or_si512(_mm512_slli_epi64(cross, 32), _mm512_and_si512(ll, low32));
    return _mm512_xor_si512(low, high);
}

/* The secret's 8 bytes at a xor those at b, in every lane. */
ND_WIDE static inline __m512i
nd_secret_x8(const unsigned char *s, int a, int b)
{
    return _mm512_set1_epi64((long long)(us_read64(s + a) ^ us_read64(s + b)));
}

/* XXH3-64 of eight tokens of 1 to 16 bytes (us_xxh3_64_0to16, its three cases computed and
   blended): first / last the 8 bytes at the token's start / ending at its end (the buffer
   is padded on both sides), len its length. */
ND_WIDE static inline __m512i
nd_xxh3_x8(__m512i first, __m512i last, __m512i len)
{
    const unsigned char *s = us_xxh3_secret;
    /* 9 to 16 bytes */
    __m512i low = _mm512_xor_si512(nd_secret_x8(s, 24, 32), first);
    __m512i high = _mm512_xor_si512(nd_secret_x8(s, 40, 48), last);
    const __m512i swap = _mm512_set_epi64( /* each lane's bytes reversed (US_BSWAP64) */
        0x08090A0B0C0D0E0FLL, 0x0001020304050607LL, 0x08090A0B0C0D0E0FLL, 0x0001020304050607LL,
        0x08090A0B0C0D0E0FLL, 0x0001020304050607LL, 0x08090A0B0C0D0E0FLL, 0x0001020304050607LL);
    __m512i v9 = _mm512_add_epi64(_mm512_add_epi64(len, _mm512_shuffle_epi8(low, swap)),
                                  _mm512_add_epi64(high, nd_fold_x8(low, high)));
    v9 = _mm512_xor_si512(v9, _mm512_srli_epi64(v9, 37));
    v9 = _mm512_mullo_epi64(v9, _mm512_set1_epi64((long long)US_PMX1));
    v9 = _mm512_xor_si512(v9, _mm512_srli_epi64(v9, 32));
    /* 4 to 8 bytes */
    __m512i v4 = _mm512_or_si512(_mm512_srli_epi64(last, 32), _mm512_slli_epi64(first, 32));
    v4 = _mm512_xor_si512(v4, nd_secret_x8(s, 8, 16));
    v4 = _mm512_xor_si512(v4, _mm512_xor_si512(_mm512_rol_epi64(v4, 49), _mm512_rol_epi64(v4, 24)));
    v4 = _mm512_mullo_epi64(v4, _mm512_set1_epi64((long long)US_PMX2));
    v4 = _mm512_xor_si512(v4, _mm512_add_epi64(_mm512_srli_epi64(v4, 35), len));
    v4 = _mm512_mullo_epi64(v4, _mm512_set1_epi64((long long)US_PMX2));
    v4 = _mm512_xor_si512(v4, _mm512_srli_epi64(v4, 28));
    /* 1 to 3 bytes: in[len - 1] | len << 8 | in[0] << 16 | in[len >> 1] << 24 */
    const __m512i byte = _mm512_set1_epi64(0xFF);
    __m512i mid = _mm512_srlv_epi64(first, _mm512_slli_epi64(_mm512_srli_epi64(len, 1), 3));
    __m512i v1 = _mm512_or_si512(
        _mm512_or_si512(_mm512_srli_epi64(last, 56), _mm512_slli_epi64(len, 8)),
        _mm512_or_si512(_mm512_slli_epi64(_mm512_and_si512(first, byte), 16),
                        _mm512_slli_epi64(_mm512_and_si512(mid, byte), 24)));
    v1 = _mm512_xor_si512(v1, _mm512_set1_epi64((long long)(us_read32(s) ^ us_read32(s + 4))));
    v1 = _mm512_xor_si512(v1, _mm512_srli_epi64(v1, 33));
    v1 = _mm512_mullo_epi64(v1, _mm512_set1_epi64((long long)US_P64_2));
    v1 = _mm512_xor_si512(v1, _mm512_srli_epi64(v1, 29));
    v1 = _mm512_mullo_epi64(v1, _mm512_set1_epi64((long long)US_P64_3));
    v1 = _mm512_xor_si512(v1, _mm512_srli_epi64(v1, 32));
    __mmask8 over8 = _mm512_cmpgt_epu64_mask(len, _mm512_set1_epi64(8));
    __mmask8 over3 = _mm512_cmpgt_epu64_mask(len, _mm512_set1_epi64(3));
    return _mm512_mask_blend_epi64(over8, _mm512_mask_blend_epi64(over3, v1, v4), v9);
}

/* The hashes of count (1..ND_BATCH) tokens of buf at starts[i], of lens[i] bytes, into h:
   eight at a time, a token longer than 16 bytes by XXH3_64bits. */
ND_WIDE static void
nd_hash_batch(const unsigned char *buf, uint64_t *starts, uint64_t *lens, size_t count,
              uint64_t *h)
{
    for (size_t i = count; i % 8; i++) { /* the last lanes: a harmless 1-byte token */
        starts[i] = 0;
        lens[i] = 1;
    }
    const __m512i eight = _mm512_set1_epi64(8), sixteen = _mm512_set1_epi64(16);
    for (size_t i = 0; i < count; i += 8) {
        __m512i at = _mm512_loadu_si512((const void *)(starts + i));
        __m512i len = _mm512_loadu_si512((const void *)(lens + i));
        __m512i first = _mm512_i64gather_epi64(at, (const void *)buf, 1);
        __m512i end = _mm512_sub_epi64(_mm512_add_epi64(at, len), eight);
        __m512i last = _mm512_i64gather_epi64(end, (const void *)buf, 1);
        __m512i out = nd_xxh3_x8(first, last, len);
        __mmask8 lanes = count - i >= 8 ? 0xFF : (__mmask8)((1u << (count - i)) - 1);
        _mm512_mask_storeu_epi64((void *)(h + i), lanes, out);
        for (unsigned long long longer = _mm512_mask_cmpgt_epu64_mask(lanes, len, sixteen); longer;
             longer &= longer - 1) {
            size_t j = i + (size_t)__builtin_ctzll(longer);
            h[j] = XXH3_64bits(buf + starts[j], (size_t)lens[j]);
        }
    }
}

/* nd_hash_ascii_plain with AVX-512: 64 bytes at a time classified and lowered into a
   padded copy (and a bitmap of the word bytes), the tokens found from the bitmap's edges,
   hashed ND_BATCH at a time. */
ND_WIDE static size_t
nd_hash_ascii_avx512(const unsigned char *p, size_t len, uint64_t *h)
{
    enum { PAD = 8, SMALL = 4096 };
    size_t words = (len + 63) / 64;
    unsigned char buf_here[PAD + SMALL + 64];
    uint64_t bits_here[SMALL / 64];
    unsigned char *mem = NULL, *buf = buf_here;
    uint64_t *bits = bits_here;
    if (len > SMALL) {
        mem = (unsigned char *)malloc(PAD + 64 * words + 64 + words * sizeof(uint64_t));
        if (mem == NULL) return (size_t)-1;
        buf = mem;
        bits = (uint64_t *)(mem + PAD + 64 * words + 64);
    }
    memset(buf, 0, PAD);
    unsigned char *text = buf + PAD;
    memset(text + 64 * words, 0, 64); /* read past the last token: the 8-byte loads */
    const __m512i x20 = _mm512_set1_epi8(0x20), a = _mm512_set1_epi8('a');
    const __m512i zero = _mm512_set1_epi8('0'), under = _mm512_set1_epi8('_');
    const __m512i n26 = _mm512_set1_epi8(26), n10 = _mm512_set1_epi8(10);
    for (size_t w = 0; w < words; w++) {
        size_t left = len - 64 * w;
        __mmask64 in = left >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << left) - 1);
        __m512i c = _mm512_maskz_loadu_epi8(in, (const void *)(p + 64 * w));
        __m512i lower = _mm512_or_si512(c, x20);
        __mmask64 alpha = _mm512_cmplt_epu8_mask(_mm512_sub_epi8(lower, a), n26);
        __mmask64 digit = _mm512_cmplt_epu8_mask(_mm512_sub_epi8(c, zero), n10);
        __mmask64 word = alpha | digit | _mm512_cmpeq_epi8_mask(c, under);
        _mm512_storeu_si512((void *)(text + 64 * w), _mm512_mask_blend_epi8(alpha, c, lower));
        bits[w] = (uint64_t)(word & in);
    }
    uint64_t starts[ND_BATCH], lens[ND_BATCH];
    size_t n = 0, count = 0, start = 0;
    int carry = 0; /* a token runs on past the end of the last word, from start */
#define ND_TOKEN(from, to)                                                                     \
    do {                                                                                       \
        starts[count] = (from);                                                                \
        lens[count++] = (to) - (from);                                                         \
        if (count == ND_BATCH) {                                                               \
            nd_hash_batch(text, starts, lens, count, h + n);                                   \
            n += count;                                                                        \
            count = 0;                                                                         \
        }                                                                                      \
    } while (0)
    for (size_t w = 0; w < words; w++) {
        /* the word's token starts and ends (the byte after the token), paired in order */
        uint64_t m = bits[w], edges = m ^ (m << 1 | (uint64_t)carry);
        uint64_t begins = edges & m, ends = edges & ~m;
        size_t base = 64 * w;
        if (carry) {
            if (!ends) continue; /* the whole word inside one token */
            ND_TOKEN(start, base + (size_t)__builtin_ctzll(ends));
            ends &= ends - 1;
            carry = 0;
        }
        for (; begins; begins &= begins - 1) {
            size_t from = base + (size_t)__builtin_ctzll(begins);
            if (!ends) { /* on into the next word */
                start = from;
                carry = 1;
                break;
            }
            ND_TOKEN(from, base + (size_t)__builtin_ctzll(ends));
            ends &= ends - 1;
        }
    }
#undef ND_TOKEN
    if (carry) {
        starts[count] = start;
        lens[count++] = len - start;
    }
    if (count) nd_hash_batch(text, starts, lens, count, h + n);
    n += count;
    free(mem);
    return n;
}
#endif

static PyObject *
nd_text(PyObject *const *args, Py_ssize_t nargs, int features)
{
    Py_ssize_t shingle;
    PyObject *text = nd_text_args(args, nargs, "simhash_text", &shingle);
    if (text == NULL) return NULL;
    Py_ssize_t len = PyUnicode_GET_LENGTH(text);
    if (len > ND_MAX_TEXT) len = ND_MAX_TEXT;
    if (!PyUnicode_IS_ASCII(text)) Py_RETURN_NONE; /* tokenised in Python (NFKC, \w, CJK) */
    const unsigned char *p = (const unsigned char *)PyUnicode_DATA(text);
    nd_first_use();
    uint64_t h_here[ND_SMALL_TEXT];
    uint64_t *h = h_here;
    size_t most = (size_t)len / 2 + 1; /* tokens are separated: at most this many */
    if (most > ND_SMALL_TEXT) {
        h = (uint64_t *)malloc(most * sizeof(uint64_t));
        if (h == NULL) return PyErr_NoMemory();
    }
    size_t n;
#ifdef ND_AVX512
    if (nd_wide) n = nd_hash_ascii_avx512(p, (size_t)len, h);
    else
#endif
        n = nd_hash_ascii_plain(p, (size_t)len, h);
    if (n == (size_t)-1) {
        if (h != h_here) free(h);
        return PyErr_NoMemory();
    }
    return nd_finish(h, n, shingle, h_here, features);
}

static PyObject *
simhash_text(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return nd_text(args, nargs, 0);
}

static PyObject *
features_text(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return nd_text(args, nargs, 1);
}

static PyObject *
nd_tokens(PyObject *const *args, Py_ssize_t nargs, int features)
{
    Py_ssize_t shingle;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "simhash_tokens(tokens, shingle)");
        return NULL;
    }
    if (nd_shingle_arg(args[1], &shingle) < 0) return NULL;
    PyObject *seq = PySequence_Fast(args[0], "simhash_tokens: tokens must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    uint64_t *h = (uint64_t *)malloc(((size_t)n + 1) * sizeof(uint64_t));
    if (h == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyBytes_Check(items[i])) {
            free(h);
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "simhash_tokens: every token must be bytes");
            return NULL;
        }
        h[i] = XXH3_64bits(PyBytes_AS_STRING(items[i]), (size_t)PyBytes_GET_SIZE(items[i]));
    }
    Py_DECREF(seq);
    return nd_finish(h, (size_t)n, shingle, NULL, features);
}

static PyObject *
simhash_tokens(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return nd_tokens(args, nargs, 0);
}

static PyObject *
features_tokens(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return nd_tokens(args, nargs, 1);
}

/* A character of an unspaced script (simhash._UNSPACED: kana, CJK ideographs, hangul). */
static inline int
nd_unspaced(Py_UCS4 c)
{
    return (c >= 0x3040 && c <= 0x30ff) || (c >= 0x3400 && c <= 0x4dbf) ||
           (c >= 0x4e00 && c <= 0x9fff) || (c >= 0xf900 && c <= 0xfaff) ||
           (c >= 0xac00 && c <= 0xd7af);
}

/* A character of \w in a str pattern (the re module: alphanumeric or "_"); ASCII by the
   table (Py_UNICODE_ISALNUM asks four properties of the Unicode database). */
static inline int
nd_word_char(Py_UCS4 c)
{
    return c < 0x80 ? nd_lower[c] != 0 : Py_UNICODE_ISALNUM(c);
}

/* The XXH3-64 of the UTF-8 (surrogates passed through) of characters [a, b) of a str, all
   word characters (nd_word_char), ASCII letters lowered. */
static int
nd_hash_chars(int kind, const void *data, Py_ssize_t a, Py_ssize_t b, uint64_t *out)
{
    unsigned char here[512], *buf = here;
    if (b <= a) { /* no token is empty: for the compiler, which would see `here` unwritten */
        *out = XXH3_64bits("", 0);
        return 0;
    }
    size_t need = 4 * (size_t)(b - a);
    if (need > sizeof here && (buf = (unsigned char *)malloc(need)) == NULL) return -1;
    size_t n = 0;
    for (Py_ssize_t i = a; i < b; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c < 0x80) buf[n++] = nd_lower[c]; /* a word character: lowered */
        else if (c < 0x800) {
            buf[n++] = (unsigned char)(0xc0 | c >> 6);
            buf[n++] = (unsigned char)(0x80 | (c & 0x3f));
        } else if (c < 0x10000) {
            buf[n++] = (unsigned char)(0xe0 | c >> 12);
            buf[n++] = (unsigned char)(0x80 | (c >> 6 & 0x3f));
            buf[n++] = (unsigned char)(0x80 | (c & 0x3f));
        } else {
            buf[n++] = (unsigned char)(0xf0 | c >> 18);
            buf[n++] = (unsigned char)(0x80 | (c >> 12 & 0x3f));
            buf[n++] = (unsigned char)(0x80 | (c >> 6 & 0x3f));
            buf[n++] = (unsigned char)(0x80 | (c & 0x3f));
        }
    }
    *out = XXH3_64bits(buf, n);
    if (buf != here) free(buf);
    return 0;
}

/* simhash_str(text, shingle) / features_str: the tokens of an already normalised str (NFKC,
   case-folded but for ASCII letters, lowered here: simhash._prepared): the runs of \w, a
   run of unspaced characters inside one becoming its character bigrams (a lone one
   itself), what simhash.tokens gives. */
static PyObject *
nd_str(PyObject *const *args, Py_ssize_t nargs, int features)
{
    Py_ssize_t shingle;
    PyObject *text = nd_text_args(args, nargs, "simhash_str", &shingle);
    if (text == NULL) return NULL;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t len = PyUnicode_GET_LENGTH(text);
    nd_first_use();
    /* every token starts at a different character: at most len of them */
    uint64_t *h = (uint64_t *)malloc(((size_t)len + 1) * sizeof(uint64_t));
    if (h == NULL) return PyErr_NoMemory();
    size_t n = 0;
    Py_ssize_t i = 0;
    while (i < len) {
        if (!nd_word_char(PyUnicode_READ(kind, data, i))) {
            i++;
            continue;
        }
        Py_ssize_t end = i + 1;
        while (end < len && nd_word_char(PyUnicode_READ(kind, data, end))) end++;
        for (Py_ssize_t s = i; s < end;) { /* the word's unspaced and other runs */
            int unspaced = nd_unspaced(PyUnicode_READ(kind, data, s));
            Py_ssize_t e = s + 1;
            while (e < end && nd_unspaced(PyUnicode_READ(kind, data, e)) == unspaced) e++;
            int failed = 0;
            if (unspaced && e - s > 1)
                for (Py_ssize_t t = s; t + 1 < e && !failed; t++)
                    failed = nd_hash_chars(kind, data, t, t + 2, &h[n++]) < 0;
            else failed = nd_hash_chars(kind, data, s, e, &h[n++]) < 0;
            if (failed) {
                free(h);
                return PyErr_NoMemory();
            }
            s = e;
        }
        i = end;
    }
    return nd_finish(h, n, shingle, NULL, features);
}

static PyObject *
simhash_str(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return nd_str(args, nargs, 0);
}

static PyObject *
features_str(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return nd_str(args, nargs, 1);
}

/* nd_jaccard(a, b) -> float: |a & b| / |a | b| of two buffers of distinct uint64 (1.0 for
   two empty ones): the smaller in a hash set, the other probed. */
static PyObject *
nd_jaccard(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "nd_jaccard(a, b)");
        return NULL;
    }
    Py_buffer va, vb;
    if (PyObject_GetBuffer(args[0], &va, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[1], &vb, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&va);
        return NULL;
    }
    size_t na = (size_t)va.len / 8, nb = (size_t)vb.len / 8;
    PyObject *out = NULL;
    if ((size_t)va.len % 8 || (size_t)vb.len % 8) {
        PyErr_SetString(PyExc_ValueError, "nd_jaccard: buffers of uint64");
        goto done;
    }
    if (na + nb == 0) {
        out = PyFloat_FromDouble(1.0);
        goto done;
    }
    const uint64_t *small = (const uint64_t *)va.buf, *large = (const uint64_t *)vb.buf;
    size_t ns = na, nl = nb;
    if (na > nb) {
        small = (const uint64_t *)vb.buf;
        large = (const uint64_t *)va.buf;
        ns = nb;
        nl = na;
    }
    nd_set set;
    if (nd_set_open(&set, ns ? ns : 1) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    uint64_t x;
    for (size_t i = 0; i < ns; i++) {
        memcpy(&x, small + i, 8); /* a buffer's items need not be aligned */
        nd_set_add(&set, x);
    }
    size_t shared = 0;
    for (size_t i = 0; i < nl; i++) {
        memcpy(&x, large + i, 8);
        shared += (size_t)nd_set_has(&set, x);
    }
    nd_set_close(&set);
    out = PyFloat_FromDouble((double)shared / (double)(na + nb - shared));
done:
    PyBuffer_Release(&va);
    PyBuffer_Release(&vb);
    return out;
}

/* nd_jaccard_many(query, others) -> list[float]: nd_jaccard of the query with each of a
   sequence of buffers, the query's hash set built once. */
static PyObject *
nd_jaccard_many(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "nd_jaccard_many(query, others)");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[1], "nd_jaccard_many: others must be a sequence");
    if (seq == NULL) return NULL;
    Py_buffer vq;
    if (PyObject_GetBuffer(args[0], &vq, PyBUF_SIMPLE) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    PyObject *out = NULL;
    size_t nq = (size_t)vq.len / 8;
    nd_set set;
    int opened = 0;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq), held = 0;
    Py_buffer here[16], *views = here;
    if ((size_t)vq.len % 8) {
        PyErr_SetString(PyExc_ValueError, "nd_jaccard_many: buffers of uint64");
        goto done;
    }
    if (count > 16 && (views = (Py_buffer *)malloc((size_t)count * sizeof(Py_buffer))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* every candidate's buffer first, and its features asked for from memory (a candidate's
       features are cold): they arrive while the query's set is built */
    for (; held < count; held++) {
        Py_buffer *v = &views[held];
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, held), v, PyBUF_SIMPLE) < 0) goto done;
        for (Py_ssize_t at = 0; at < v->len && at < 4096; at += 64)
            PREFETCH_READ((const char *)v->buf + at);
    }
    if (nd_set_open(&set, nq ? nq : 1) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    opened = 1;
    uint64_t x;
    for (size_t i = 0; i < nq; i++) {
        memcpy(&x, (const char *)vq.buf + 8 * i, 8);
        nd_set_add(&set, x);
    }
    out = PyList_New(count);
    if (out == NULL) goto done;
    for (Py_ssize_t j = 0; j < count; j++) {
        const Py_buffer *vo = &views[j];
        size_t no = (size_t)vo->len / 8, shared = 0;
        if ((size_t)vo->len % 8 != 0) {
            PyErr_SetString(PyExc_ValueError, "nd_jaccard_many: buffers of uint64");
            Py_CLEAR(out);
            goto done;
        }
        for (size_t i = 0; i < no; i++) {
            memcpy(&x, (const char *)vo->buf + 8 * i, 8);
            shared += (size_t)nd_set_has(&set, x);
        }
        double j_value = nq + no ? (double)shared / (double)(nq + no - shared) : 1.0;
        PyObject *value = PyFloat_FromDouble(j_value);
        if (value == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, j, value);
    }
done:
    if (opened) nd_set_close(&set);
    for (Py_ssize_t j = 0; j < held; j++) PyBuffer_Release(&views[j]);
    if (views != here) free(views);
    PyBuffer_Release(&vq);
    Py_DECREF(seq);
    return out;
}

/* ------------------------------------------------------------------ the index's tables */

typedef struct {
    int nfields;
    int shift[64];
    uint64_t mask[64];
    int offset[64];
    uint64_t bits;  /* the fingerprint bits this table is keyed by */
    int direct;     /* keys addressed directly through starts[] */
    uint32_t *starts; /* direct: (1 << width) + 1 run starts */
    uint64_t *keys;   /* else: the keys, sorted */
    uint64_t *fps;    /* the fingerprints in key order */
    uint32_t *docs;   /* the documents in key order */
} nd_table;

typedef struct {
    size_t n;
    int ntables;
    nd_table t[ND_MAX_TABLES];
} nd_index;

static inline uint64_t
nd_key(const nd_table *t, uint64_t fp)
{
    uint64_t key = 0;
    for (int f = 0; f < t->nfields; f++) key |= ((fp >> t->shift[f]) & t->mask[f]) << t->offset[f];
    return key;
}

static void
nd_free(nd_index *ix)
{
    if (ix == NULL) return;
    for (int i = 0; i < ix->ntables; i++) {
        free(ix->t[i].starts);
        free(ix->t[i].keys);
        free(ix->t[i].fps);
        free(ix->t[i].docs);
    }
    free(ix);
}

static void
nd_capsule_free(PyObject *capsule)
{
    nd_free((nd_index *)PyCapsule_GetPointer(capsule, ND_CAPSULE));
}

typedef struct {
    uint64_t key;
    uint32_t doc;
} nd_pair;

static int
nd_pair_cmp(const void *a, const void *b)
{
    const nd_pair *x = (const nd_pair *)a, *y = (const nd_pair *)b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->doc < y->doc ? -1 : (x->doc > y->doc);
}

/* Fill one table of the first n fingerprints; -1 when memory runs out. */
static int
nd_fill(nd_table *t, const uint64_t *fps, size_t n, int width)
{
    t->fps = (uint64_t *)malloc((n + 1) * sizeof(uint64_t));
    t->docs = (uint32_t *)malloc((n + 1) * sizeof(uint32_t));
    if (t->fps == NULL || t->docs == NULL) return -1;
    t->direct = width <= ND_DIRECT_BITS && ((size_t)1 << width) <= 16 * n + 4096;
    if (t->direct) {
        size_t slots = (size_t)1 << width;
        t->starts = (uint32_t *)calloc(slots + 1, sizeof(uint32_t));
        if (t->starts == NULL) return -1;
        for (size_t d = 0; d < n; d++) t->starts[nd_key(t, fps[d]) + 1]++;
        for (size_t s = 0; s < slots; s++) t->starts[s + 1] += t->starts[s];
        uint32_t *at = (uint32_t *)malloc((slots + 1) * sizeof(uint32_t));
        if (at == NULL) return -1;
        memcpy(at, t->starts, (slots + 1) * sizeof(uint32_t));
        for (size_t d = 0; d < n; d++) {
            uint32_t place = at[nd_key(t, fps[d])]++;
            t->fps[place] = fps[d];
            t->docs[place] = (uint32_t)d;
        }
        free(at);
        return 0;
    }
    nd_pair *pairs = (nd_pair *)malloc((n + 1) * sizeof(nd_pair));
    t->keys = (uint64_t *)malloc((n + 1) * sizeof(uint64_t));
    if (pairs == NULL || t->keys == NULL) {
        free(pairs);
        return -1;
    }
    for (size_t d = 0; d < n; d++) {
        pairs[d].key = nd_key(t, fps[d]);
        pairs[d].doc = (uint32_t)d;
    }
    qsort(pairs, n, sizeof(nd_pair), nd_pair_cmp);
    for (size_t i = 0; i < n; i++) {
        t->keys[i] = pairs[i].key;
        t->docs[i] = pairs[i].doc;
        t->fps[i] = fps[pairs[i].doc];
    }
    free(pairs);
    return 0;
}

static PyObject *
nd_build(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "nd_build(fps, n, tables)");
        return NULL;
    }
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    if (n == -1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    if (n < 0 || (size_t)view.len / sizeof(uint64_t) < (size_t)n || (uint64_t)n >= UINT32_MAX) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "nd_build: n outside the fingerprints given");
        return NULL;
    }
    nd_index *ix = (nd_index *)calloc(1, sizeof(nd_index));
    PyObject *tables = NULL, *capsule = NULL;
    if (ix == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    ix->n = (size_t)n;
    tables = PySequence_Fast(args[2], "nd_build: tables must be a sequence");
    if (tables == NULL) goto done;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(tables);
    if (count < 1 || count > ND_MAX_TABLES) {
        PyErr_SetString(PyExc_ValueError, "nd_build: 1 to 64 tables");
        goto done;
    }
    /* the fingerprints are copied first: the buffer is released before any Python call */
    uint64_t *fps = (uint64_t *)malloc(((size_t)n + 1) * sizeof(uint64_t));
    if (fps == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (n) memcpy(fps, view.buf, (size_t)n * sizeof(uint64_t));
    PyBuffer_Release(&view);
    view.obj = NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        nd_table *t = &ix->t[i];
        ix->ntables = (int)i + 1;
        PyObject *fields = PySequence_Fast(PySequence_Fast_GET_ITEM(tables, i),
                                           "nd_build: a table is a sequence of fields");
        if (fields == NULL) goto fail_fps;
        Py_ssize_t nf = PySequence_Fast_GET_SIZE(fields);
        int width = 0, bad = nf < 1 || nf > 64;
        for (Py_ssize_t f = 0; !bad && f < nf; f++) {
            unsigned long long shift, mask, offset;
            PyObject *field = PySequence_Fast_GET_ITEM(fields, f);
            if (!PyTuple_Check(field) ||
                !PyArg_ParseTuple(field, "KKK", &shift, &mask, &offset)) {
                bad = 1;
                break;
            }
            int w = __builtin_popcountll(mask);
            if (shift > 63 || offset > 63 || (mask & (mask + 1)) != 0 || offset + w > 64) {
                bad = 1;
                break;
            }
            t->shift[f] = (int)shift;
            t->mask[f] = mask;
            t->offset[f] = (int)offset;
            t->bits |= mask << shift;
            width += w;
        }
        t->nfields = (int)nf;
        for (Py_ssize_t f = 0; !bad && f < nf; f++) /* every key below 1 << width */
            bad = t->offset[f] + __builtin_popcountll(t->mask[f]) > width;
        Py_DECREF(fields);
        if (bad || width > 64) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "nd_build: a field is (shift, mask, offset)");
            goto fail_fps;
        }
        if (nd_fill(t, fps, (size_t)n, width) < 0) {
            PyErr_NoMemory();
            goto fail_fps;
        }
    }
    free(fps);
    capsule = PyCapsule_New(ix, ND_CAPSULE, nd_capsule_free);
    if (capsule != NULL) ix = NULL;
    goto done;
fail_fps:
    free(fps);
done:
    if (view.obj != NULL) PyBuffer_Release(&view);
    Py_XDECREF(tables);
    nd_free(ix);
    return capsule;
}


/* A growing array of (document, distance). */
typedef struct {
    uint64_t *v; /* doc << 8 | distance */
    size_t n, cap;
    uint64_t small[64];
} nd_hits;

static int
nd_push(nd_hits *h, uint64_t doc, int distance)
{
    if (h->n == h->cap) {
        size_t cap = h->cap * 2;
        uint64_t *v = (uint64_t *)malloc(cap * sizeof(uint64_t));
        if (v == NULL) return -1;
        memcpy(v, h->v, h->n * sizeof(uint64_t));
        if (h->v != h->small) free(h->v);
        h->v = v;
        h->cap = cap;
    }
    h->v[h->n++] = doc << 8 | (uint64_t)distance;
    return 0;
}

typedef struct {
    PyObject *key; /* borrowed from the keys list */
    uint64_t hit;  /* doc << 8 | distance */
} nd_keyed_hit;

static int
nd_keyed_cmp(const void *a, const void *b)
{
    const nd_keyed_hit *x = (const nd_keyed_hit *)a, *y = (const nd_keyed_hit *)b;
    int dx = (int)(x->hit & 0xff), dy = (int)(y->hit & 0xff);
    if (dx != dy) return dx < dy ? -1 : 1;
    return PyUnicode_Compare(x->key, y->key); /* both str: cannot fail */
}

/* The tuple (first, distance), first stolen (NULL: an error already set, passed on); what
   Py_BuildValue("(Oi)") makes, without parsing a format for every answer. */
static PyObject *
nd_pair_of(PyObject *first, int distance)
{
    if (first == NULL) return NULL;
    PyObject *second = PyLong_FromLong(distance), *pair = NULL;
    if (second != NULL) pair = PyTuple_New(2);
    if (pair == NULL) {
        Py_DECREF(first);
        Py_XDECREF(second);
        return NULL;
    }
    PyTuple_SET_ITEM(pair, 0, first);
    PyTuple_SET_ITEM(pair, 1, second);
    return pair;
}

/* The hits as [(keys[doc], distance)], sorted by distance, then key (index._order). */
static PyObject *
nd_keyed(const nd_hits *hits, PyObject *keys)
{
    if (!PyList_Check(keys)) {
        PyErr_SetString(PyExc_TypeError, "nd_query: keys must be a list of str");
        return NULL;
    }
    nd_keyed_hit one, *v = hits->n <= 1 ? &one : (nd_keyed_hit *)malloc(hits->n * sizeof *v);
    if (v == NULL) return PyErr_NoMemory();
    PyObject *out = NULL;
    /* the keys are scattered over the heap: every one asked for before the first is read
       (the list's slots, then the objects) */
    Py_ssize_t size = PyList_GET_SIZE(keys);
    for (size_t i = 0; i < hits->n; i++)
        if ((hits->v[i] >> 8) < (uint64_t)size)
            PREFETCH_READ(&PyList_GET_ITEM(keys, (Py_ssize_t)(hits->v[i] >> 8)));
    for (size_t i = 0; i < hits->n; i++)
        if ((hits->v[i] >> 8) < (uint64_t)size)
            PREFETCH_READ(PyList_GET_ITEM(keys, (Py_ssize_t)(hits->v[i] >> 8)));
    for (size_t i = 0; i < hits->n; i++) {
        uint64_t doc = hits->v[i] >> 8;
        if (doc >= (uint64_t)size ||
            !PyUnicode_Check(PyList_GET_ITEM(keys, (Py_ssize_t)doc))) {
            PyErr_SetString(PyExc_ValueError, "nd_query: a document without a str key");
            goto done;
        }
        v[i].key = PyList_GET_ITEM(keys, (Py_ssize_t)doc);
        v[i].hit = hits->v[i];
    }
    if (hits->n > 1) qsort(v, hits->n, sizeof *v, nd_keyed_cmp);
    out = PyList_New((Py_ssize_t)hits->n);
    if (out == NULL) goto done;
    for (size_t i = 0; i < hits->n; i++) {
        Py_INCREF(v[i].key);
        PyObject *pair = nd_pair_of(v[i].key, (int)(v[i].hit & 0xff));
        if (pair == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, pair);
    }
done:
    if (v != &one) free(v);
    return out;
}

static PyObject *
nd_query(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 && nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "nd_query(index, fp, k, fps, n_total[, keys])");
        return NULL;
    }
    nd_index *ix = (nd_index *)PyCapsule_GetPointer(args[0], ND_CAPSULE);
    if (ix == NULL) return NULL;
    nd_first_use();
    uint64_t fp = PyLong_AsUnsignedLongLongMask(args[1]);
    if (fp == (uint64_t)-1 && PyErr_Occurred()) return NULL;
    long k = PyLong_AsLong(args[2]);
    if (k == -1 && PyErr_Occurred()) return NULL;
    if (k < 0 || k > 64) {
        PyErr_SetString(PyExc_ValueError, "nd_query: k must be 0..64");
        return NULL;
    }
    Py_ssize_t total = PyLong_AsSsize_t(args[4]);
    if (total == -1 && PyErr_Occurred()) return NULL;
    Py_buffer view = {0};
    if (total > (Py_ssize_t)ix->n) {
        if (PyObject_GetBuffer(args[3], &view, PyBUF_SIMPLE) < 0) return NULL;
        if ((size_t)view.len / sizeof(uint64_t) < (size_t)total) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_ValueError, "nd_query: n_total outside the fingerprints");
            return NULL;
        }
    } else if (total < (Py_ssize_t)ix->n) {
        PyErr_SetString(PyExc_ValueError, "nd_query: n_total below the built documents");
        return NULL;
    }
    nd_hits hits; /* its small array is written before it is read: not zeroed (512 bytes) */
    hits.v = hits.small;
    hits.n = 0;
    hits.cap = 64;
    int failed = 0;
    /* every table's run first, the start of each asked for from memory: the runs are then
       read while the others arrive (each is in another place of a table larger than the
       cache) */
    size_t runs[ND_MAX_TABLES][2];
    for (int i = 0; i < ix->ntables; i++) {
        const nd_table *t = &ix->t[i];
        uint64_t key = nd_key(t, fp);
        size_t lo, hi;
        if (t->direct) {
            lo = t->starts[key];
            hi = t->starts[key + 1];
        } else {
            size_t a = 0, b = ix->n;
            while (a < b) {
                size_t m = a + (b - a) / 2;
                if (t->keys[m] < key) a = m + 1;
                else b = m;
            }
            lo = hi = a;
            while (hi < ix->n && t->keys[hi] == key) hi++;
        }
        runs[i][0] = lo;
        runs[i][1] = hi;
        if (lo < hi) {
            PREFETCH_READ(t->fps + lo);
            PREFETCH_READ(t->fps + lo + 8);
        }
    }
    for (int i = 0; i < ix->ntables && !failed; i++) {
        const nd_table *t = &ix->t[i];
        size_t lo = runs[i][0], hi = runs[i][1];
        for (size_t j = nd_next(t->fps, lo, hi, fp, (int)k); j < hi && !failed;
             j = nd_next(t->fps, j + 1, hi, fp, (int)k)) {
            uint64_t diff = t->fps[j] ^ fp;
            int earlier = 0; /* reported by an earlier table already */
            for (int e = 0; e < i && !earlier; e++) earlier = (diff & ix->t[e].bits) == 0;
            if (!earlier && nd_push(&hits, t->docs[j], __builtin_popcountll(diff)) < 0) failed = 1;
        }
    }
    if (view.obj != NULL) {
        const uint64_t *fps = (const uint64_t *)view.buf;
        for (size_t d = nd_next(fps, ix->n, (size_t)total, fp, (int)k); d < (size_t)total && !failed;
             d = nd_next(fps, d + 1, (size_t)total, fp, (int)k))
            if (nd_push(&hits, d, __builtin_popcountll(fps[d] ^ fp)) < 0) failed = 1;
        PyBuffer_Release(&view);
    }
    PyObject *out = NULL;
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    if (nargs == 6) {
        out = nd_keyed(&hits, args[5]);
        goto done;
    }
    out = PyList_New((Py_ssize_t)hits.n);
    if (out == NULL) goto done;
    for (size_t i = 0; i < hits.n; i++) {
        PyObject *pair = nd_pair_of(PyLong_FromUnsignedLongLong(hits.v[i] >> 8),
                                    (int)(hits.v[i] & 0xff));
        if (pair == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, pair);
    }
done:
    if (hits.v != hits.small) free(hits.v);
    return out;
}

static void
nd_first_use(void)
{
    if (nd_set_mult == 0) { /* the GIL is held */
        nd_seed();
        nd_init_spread();
    }
}

#define NEARDUP_METHODS                                                                        \
    {"simhash_text", (PyCFunction)(void (*)(void))simhash_text, METH_FASTCALL,                  \
     "simhash_text(text, shingle) -> int | None\n\nThe SimHash of an ASCII text (None: not "  \
     "ASCII, tokenise it in Python)."},                                                        \
        {"simhash_tokens", (PyCFunction)(void (*)(void))simhash_tokens, METH_FASTCALL,          \
         "simhash_tokens(tokens, shingle) -> int\n\nThe SimHash of a list of token bytes."},   \
        {"features_text", (PyCFunction)(void (*)(void))features_text, METH_FASTCALL,            \
         "features_text(text, shingle) -> tuple[int, bytes] | None\n\nThe SimHash and the "   \
         "distinct feature hashes (uint64, first seen first) of an ASCII text."},                                            \
        {"simhash_str", (PyCFunction)(void (*)(void))simhash_str, METH_FASTCALL,                \
         "simhash_str(text, shingle) -> int\n\nThe SimHash of a normalised (NFKC, "            \
         "case-folded) str of any characters."},                                               \
        {"features_str", (PyCFunction)(void (*)(void))features_str, METH_FASTCALL,              \
         "features_str(text, shingle) -> tuple[int, bytes]\n\nThe SimHash and the distinct "   \
         "feature hashes of a normalised str."},                                               \
        {"features_tokens", (PyCFunction)(void (*)(void))features_tokens, METH_FASTCALL,        \
         "features_tokens(tokens, shingle) -> tuple[int, bytes]\n\nThe SimHash and the "      \
         "distinct feature hashes of token bytes."},                                                                            \
        {"nd_jaccard", (PyCFunction)(void (*)(void))nd_jaccard, METH_FASTCALL,                  \
         "nd_jaccard(a, b) -> float\n\nJaccard similarity of two buffers of distinct uint64."}, \
        {"nd_jaccard_many", (PyCFunction)(void (*)(void))nd_jaccard_many, METH_FASTCALL,        \
         "nd_jaccard_many(query, others) -> list[float]\n\nnd_jaccard of the query with each "  \
         "of others."},                                                                        \
        {"nd_build", (PyCFunction)(void (*)(void))nd_build, METH_FASTCALL,                      \
         "nd_build(fps, n, tables) -> capsule\n\nThe near-duplicate tables of the first n "    \
         "fingerprints."},                                                                     \
        {"nd_query", (PyCFunction)(void (*)(void))nd_query, METH_FASTCALL,                      \
         "nd_query(index, fp, k, fps, n_total[, keys]) -> list[tuple[int | str, int]]\n\n"     \
         "(document, distance) of every document within k bits of fp; with keys, "             \
         "(keys[document], distance), sorted by distance, then key."},                         \
        {"nd_popcount", (PyCFunction)nd_popcount, METH_O,                                      \
         "nd_popcount(name | None) -> str\n\nThe candidate scan in use, after choosing name "   \
         "(plain, popcnt, avx512)."},                                                          \
        {"nd_simd", (PyCFunction)nd_simd, METH_O,                                              \
         "nd_simd(name | None) -> str\n\nThe SimHash path of ASCII text in use, after "        \
         "choosing name (plain, avx512)."},
