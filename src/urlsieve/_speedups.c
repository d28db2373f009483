/*
 * urlsieve._speedups: the canonicaliser's fast path, compiled.
 *
 * fast_canonical(url, allow_query) answers the same question as the regular
 * expression _FAST in urlsieve/url/parse.py (the reference, which stays and
 * which the tests compare this against on every input they generate): is
 * `url`, or "http://" + `url` when it holds no "://", already canonical?
 * It returns the canonical string (the argument itself when nothing is to be
 * added, else a new string with "http://" and/or the "/" of an empty path)
 * or None when the slow path must decide.
 *
 * The grammar, as in _FAST:
 *   scheme  = ("http" | "https" | "ftp" | "ws" | "wss") "://"
 *   host    = ipv4 (dotted decimal, no leading zeros)
 *           | (label ".")* last        label = [a-z0-9_-]+, last = [a-z][a-z0-9_-]*
 *   path    = "/" [ seg ("/" seg)* ["/"] ]        (optional as a whole)
 *   seg     = (first | esc) (rest | esc)*          first = rest minus "."
 *   query   = "?" (qchar | esc)*                   (optional)
 *   esc     = the escapes canonicalisation writes: "%" + two upper-case hex
 *             digits of a byte it escapes, "%25" not followed by two hex digits
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include "structmember.h" /* PyMemberDef, T_OBJECT_EX: a verdict class's slots */
#include <string.h>

/* XXH3 (our own, from the published specification): the hash of the snapshot tables and
   of the seen stores' fingerprints, the same function as the xxhash package on the Python
   side. */
#include "_xxh3.h"

#define MAX_URL 65536

/* How many items ahead a batch loop asks for the memory of (a list's strings are
   scattered over the heap: each is a cache miss the loop would otherwise wait for). */
#define PREFETCH 32
/* URLs (and bytes of their text) canonical_hashes copies with the GIL, then hashes
   without it, at a time. */
#define HASH_RUN 256
#define HASH_RUN_BYTES 16384
#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH_READ(p) __builtin_prefetch((const void *)(p), 0, 1)
#define PREFETCH_WRITE(p) __builtin_prefetch((const void *)(p), 1, 1)
#else
#define PREFETCH_READ(p) ((void)(p))
#define PREFETCH_WRITE(p) ((void)(p))
#endif

/* The first two cache lines of a str or bytes object: its header and the start of its
   data. */
static inline void
prefetch_str(const PyObject *obj)
{
    PREFETCH_READ(obj);
    PREFETCH_READ((const char *)obj + 64);
}
/* Room for a rewritten URL: at most MAX_URL + 16 bytes (what every caller allocates). */
#define REWRITE_CAP (MAX_URL + 16)

/* Scratch for one call (the lookup text and a rewritten URL, or a URL's bytes and its
   rewrite): the module keeps one block between calls, since a call for one URL paid for
   an allocation of 128 KiB each time, which glibc maps and unmaps. Taken and given back
   with the GIL held; a call made while it is out (from a destructor the call runs, or in
   another thread while the call has let go of the GIL) allocates its own. */
#define SCRATCH (2 * (MAX_URL + 16))
_Static_assert(SCRATCH >= MAX_URL + REWRITE_CAP, "one_url_scan's bytes and rewrite fit");
static unsigned char *kept_scratch;
static int kept_scratch_out;

static unsigned char *
scratch_take(void)
{
#ifndef Py_GIL_DISABLED
    if (!kept_scratch_out) {
        if (kept_scratch == NULL) kept_scratch = PyMem_Malloc(SCRATCH);
        if (kept_scratch != NULL) {
            kept_scratch_out = 1;
            return kept_scratch;
        }
    }
#endif
    return PyMem_Malloc(SCRATCH);
}

static void
scratch_give(unsigned char *p)
{
    if (p != NULL && p == kept_scratch) {
        kept_scratch_out = 0;
    } else {
        PyMem_Free(p);
    }
}

/* A growing output buffer (PyMem); grow_put: -1 when out of memory. */
typedef struct {
    char *p;
    size_t n, cap;
} growbuf;

static int
grow_reserve(growbuf *b, size_t extra)
{
    if (b->n + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + extra) cap *= 2;
    char *p = PyMem_Realloc(b->p, cap);
    if (p == NULL) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int
grow_put(growbuf *b, const void *data, size_t len)
{
    if (grow_reserve(b, len) < 0) return -1;
    memcpy(b->p + b->n, data, len);
    b->n += len;
    return 0;
}

/* HOST: [a-z0-9_.-]; HOST_EXT: the other code points a canonical host may hold (printable
   ASCII but upper case and WHATWG's forbidden ones, url/host.py's check_host_chars). */
enum { HOST = 1, HOST_EXT = 2, SEG = 4, QUERY = 8 };
static unsigned char cls[128];
static unsigned char quote_safe[256]; /* A-Z a-z 0-9 _ . - ~ */

static void
init_classes(void)
{
    for (int c = 0; c < 256; c++) {
        quote_safe[c] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
                        || c == '_' || c == '.' || c == '-' || c == '~';
    }
    for (int c = 'a'; c <= 'z'; c++) cls[c] |= HOST;
    for (int c = '0'; c <= '9'; c++) cls[c] |= HOST;
    cls['_'] |= HOST;
    cls['-'] |= HOST;
    cls['.'] |= HOST;
    for (const char *c = "!\"$&'()*+,;=`{}~"; *c; c++) cls[(unsigned char)*c] |= HOST_EXT;
    /* Path characters: printable ASCII but space # % / ? \ (and no segment is "." or
       ".."). */
    for (int c = 0x21; c <= 0x7E; c++) {
        if (c != '#' && c != '%' && c != '/' && c != '?' && c != '\\') cls[c] |= SEG;
        if (c != '#' && c != '%') cls[c] |= QUERY;
    }
}

static inline int
upper_hex(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F');
}

static inline int
any_hex(unsigned char c)
{
    return upper_hex(c) || (c >= 'a' && c <= 'f');
}

/* 3 when s[i] starts an escape canonicalisation writes, else 0. */
static inline Py_ssize_t
esc_len(const unsigned char *s, Py_ssize_t i, Py_ssize_t n)
{
    if (s[i] != '%' || i + 2 >= n) return 0;
    unsigned char a = s[i + 1], b = s[i + 2];
    if ((a == '0' || a == '1') && upper_hex(b)) return 3;
    if (a == '2' && (b == '0' || b == '3')) return 3;
    if (a == '7' && b == 'F') return 3;
    if (((a >= '8' && a <= '9') || (a >= 'A' && a <= 'F')) && upper_hex(b)) return 3;
    if (a == '2' && b == '5') {
        int hex_follows = i + 4 < n && any_hex(s[i + 3]) && any_hex(s[i + 4]);
        return hex_follows ? 0 : 3;
    }
    return 0;
}

/* Is s[0:n] a dotted-decimal address with octets 0..255 and no leading zeros? */
static int
is_ipv4(const unsigned char *s, Py_ssize_t n)
{
    int parts = 0;
    Py_ssize_t i = 0;
    while (1) {
        Py_ssize_t start = i;
        int value = 0;
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            value = value * 10 + (s[i] - '0');
            if (i - start >= 3) return 0;
            i++;
        }
        Py_ssize_t len = i - start;
        if (len == 0 || len > 3 || value > 255 || (len > 1 && s[start] == '0')) return 0;
        parts++;
        if (i == n) return parts == 4;
        if (s[i] != '.' || parts == 4) return 0;
        i++;
    }
}

/* Is s[0:n] (host characters) non-empty labels joined by single dots, the last starting
   with a-z? */
static int
is_hostname(const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t label = 0; /* start of the current label */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] == '.') {
            if (i == label) return 0;
            label = i + 1;
        }
    }
    return label < n && s[label] >= 'a' && s[label] <= 'z';
}

/* Where scan_canonical found the parts of a canonical URL in s[0:n]. */
typedef struct {
    int has_scheme, has_path;
    Py_ssize_t host_start, host_end, path_end, query_start; /* query_start: -1 without "?" */
    int is_ip;
} spans;

#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__)) && !defined(URLSIEVE_SCALAR_SCAN)
/* ---------------------------------------------------------------------------------------
 * scan_canonical's vector pass (SSE2, in every x86-64): the bytes after the scheme are
 * classified 64 at a time into bit masks (bit j: byte j is a host character, a dot, a
 * "/", a "?", a "%", or one a path or a query may not hold), and the grammar is checked
 * on the masks: the host ends at the first non-host byte, a label is empty where dots
 * touch, a segment is empty where "/" is followed by "/".
 * A per-byte loop mispredicts a branch at every label, segment and token end, and that
 * cost more than all the rest of a fingerprint. Escapes, hosts over 64 bytes, IP
 * addresses, hosts with a byte of HOST_EXT and segments starting with "." are left to
 * the per-byte scan (scan_fast returns -1), which stays the
 * definition: the tests hold the two equal through fast_canonical and the _FAST regex.
 */
#include <emmintrin.h>
#define SCAN_FAST 1
#if defined(__x86_64__) && (defined(__clang__) || __GNUC__ >= 8)
/* The AVX-512BW pass (one masked 64-byte load and a compare per class, no tail copy),
   chosen at run time where the CPU has it (see scan_level). */
#include <immintrin.h>
#define SCAN_AVX512 1
#endif

typedef struct {
    uint64_t host, dot, slash, query, pct, bad_path, bad_query;
} url_bits;

/* The masks of p[0:len], len <= 64 (bits from len on are 0). */
static inline __attribute__((always_inline)) void
url_bits_of(const unsigned char *p, Py_ssize_t len, url_bits *b)
{
    memset(b, 0, sizeof(*b));
    for (Py_ssize_t at = 0; at < len; at += 16) {
        unsigned char tail[16];
        const unsigned char *q = p + at;
        if (len - at < 16) { /* never read past the string */
            memset(tail, 0, sizeof(tail));
            memcpy(tail, q, (size_t)(len - at));
            q = tail;
        }
        const __m128i c = _mm_loadu_si128((const __m128i *)q);
#define EQ(ch) _mm_cmpeq_epi8(c, _mm_set1_epi8((char)(ch)))
#define IN(lo, hi) \
    _mm_and_si128(_mm_cmpgt_epi8(c, _mm_set1_epi8((char)((lo) - 1))), \
                  _mm_cmplt_epi8(c, _mm_set1_epi8((char)((hi) + 1))))
        /* signed compares: bytes >= 0x80 are negative and in no range */
        const __m128i dot = EQ('.'), slash = EQ('/');
        const __m128i host = _mm_or_si128(_mm_or_si128(IN('a', 'z'), IN('0', '9')),
                                          _mm_or_si128(_mm_or_si128(EQ('_'), EQ('-')), dot));
        const __m128i print = IN(0x21, 0x7E), hash = EQ('#');
        const __m128i bad_query = _mm_or_si128(_mm_andnot_si128(print, _mm_set1_epi8(-1)), hash);
        const __m128i bad_path = _mm_or_si128(bad_query, EQ('\\'));
        const int shift = (int)at;
        uint64_t valid = len - at >= 16 ? 0xFFFF : ((uint64_t)1 << (len - at)) - 1;
#define PUT(field, v) b->field |= ((uint64_t)_mm_movemask_epi8(v) & valid) << shift
        PUT(host, host);
        PUT(dot, dot);
        PUT(slash, slash);
        PUT(query, EQ('?'));
        PUT(pct, EQ('%'));
        PUT(bad_path, bad_path);
        PUT(bad_query, bad_query);
#undef PUT
#undef IN
#undef EQ
    }
}

static inline uint64_t
below(Py_ssize_t bits) /* the mask of bits 0 .. bits-1, bits <= 64 */
{
    return bits >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << bits) - 1;
}

#ifdef SCAN_AVX512
/* url_bits_of with AVX-512BW: the bytes past len are never read (a masked load). */
__attribute__((target("avx512f,avx512bw,bmi2"))) static inline void
url_bits_of_avx512(const unsigned char *p, Py_ssize_t len, url_bits *b)
{
    const __mmask64 valid = _bzhi_u64(~(uint64_t)0, (unsigned)len);
    const __m512i c = _mm512_maskz_loadu_epi8(valid, p);
#define EQ(ch) _mm512_cmpeq_epi8_mask(c, _mm512_set1_epi8((char)(ch)))
/* lo <= c <= hi, unsigned: c - lo < hi - lo + 1 */
#define IN(lo, hi) \
    _mm512_cmplt_epu8_mask(_mm512_sub_epi8(c, _mm512_set1_epi8((char)(lo))), \
                           _mm512_set1_epi8((char)((hi) - (lo) + 1)))
    const uint64_t dot = EQ('.');
    b->dot = dot;
    b->slash = EQ('/');
    b->host = (IN('a', 'z') | IN('0', '9') | EQ('_') | EQ('-') | dot) & valid;
    b->query = EQ('?');
    b->pct = EQ('%');
    b->bad_query = (~IN(0x21, 0x7E) | EQ('#')) & valid;
    b->bad_path = b->bad_query | EQ('\\');
#undef IN
#undef EQ
}
#endif

/* scan_canonical from the host on, for p[0:m] (p = s + off): 1 or 0 as it would answer,
   -1 when the per-byte scan must. Inlined into one function for each way of making the
   masks (bits_of, a constant there). */
static inline __attribute__((always_inline)) int
scan_fast_with(const unsigned char *p, Py_ssize_t m, Py_ssize_t off, int allow_query,
               spans *sp, void (*bits_of)(const unsigned char *, Py_ssize_t, url_bits *))
{
    Py_ssize_t len = m < 64 ? m : 64;
    url_bits b;
    bits_of(p, len, &b);
    const uint64_t not_host = ~b.host & below(len);
    if (not_host == 0 && m > 64) return -1; /* a host over 64 bytes */
    const Py_ssize_t h = not_host ? __builtin_ctzll(not_host) : len;
    if (h < len && p[h] < 128 && (cls[p[h]] & HOST_EXT)) return -1; /* a host with "!" ... */
    if (h == 0) return 0;
    const uint64_t dots = b.dot & below(h);
    const Py_ssize_t last = dots ? 64 - __builtin_clzll(dots) : 0; /* the last label */
    if (last >= h || p[last] < 'a' || p[last] > 'z') return -1; /* an IP address, or none */
    if ((dots & 1) || (dots & (dots >> 1))) return 0;               /* an empty label */
    sp->is_ip = 0;
    sp->host_start = off;
    sp->host_end = off + h;
    sp->has_path = h < m && p[h] == '/';
    sp->query_start = -1;
    sp->path_end = off + m;
    if (h < m && p[h] != '/' && p[h] != '?') return 0;
    int in_query = 0;
    uint64_t carry = 0; /* the byte before this block is a "/" of the path */
    uint64_t rest = below(len) & ~below(h);
    for (Py_ssize_t base = 0;;) {
        if (b.pct & rest) return -1; /* an escape */
        if (!in_query) {
            const uint64_t q = b.query & rest;
            const uint64_t path = q ? rest & ((q & (~q + 1)) - 1) : rest;
            if (b.bad_path & path) return 0;
            const uint64_t slash = b.slash & path, after = ((slash << 1) | carry) & path;
            if (after & b.slash) return 0; /* an empty segment */
            if (after & b.dot) return -1;  /* a segment starting with ".": is it "." or ".."? */
            carry = slash >> 63;
            if (q) {
                if (!allow_query) return 0;
                const Py_ssize_t at = base + __builtin_ctzll(q);
                sp->path_end = off + at;
                sp->query_start = off + at + 1;
                in_query = 1;
                rest &= ~(path | (q & (~q + 1)));
            }
        }
        if (in_query && (b.bad_query & rest)) return 0;
        base += 64;
        if (base >= m) return 1;
        len = m - base < 64 ? m - base : 64;
        bits_of(p + base, len, &b);
        rest = below(len);
    }
}

static int
scan_fast_sse2(const unsigned char *p, Py_ssize_t m, Py_ssize_t off, int allow_query, spans *sp)
{
    return scan_fast_with(p, m, off, allow_query, sp, url_bits_of);
}

#ifdef SCAN_AVX512
__attribute__((target("avx512f,avx512bw,bmi2"))) static int
scan_fast_avx512(const unsigned char *p, Py_ssize_t m, Py_ssize_t off, int allow_query,
                 spans *sp)
{
    return scan_fast_with(p, m, off, allow_query, sp, url_bits_of_avx512);
}
#endif
#endif

/* Which scan scan_canonical runs: SCAN_BYTES (the per-byte definition only), SCAN_SSE2,
   or SCAN_AVX512W (set at import to the widest the CPU has; the tests run each). */
enum { SCAN_BYTES = 0, SCAN_SSE2 = 1, SCAN_AVX512W = 2 };
static int scan_level;

static int
scan_level_best(void)
{
#ifdef SCAN_AVX512
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("bmi2")) return SCAN_AVX512W;
#endif
#ifdef SCAN_FAST
    return SCAN_SSE2;
#else
    return SCAN_BYTES;
#endif
}

static const char *const scan_names[3] = {"bytes", "sse2", "avx512"};

/* scan_mode() -> the scan in use; scan_mode(name) sets it (the tests run every one the
   CPU has) and returns the one it replaced. */
static PyObject *
scan_mode(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "scan_mode(name=None) takes at most 1 argument");
        return NULL;
    }
    PyObject *previous = PyUnicode_FromString(scan_names[scan_level]);
    if (previous == NULL || nargs == 0 || args[0] == Py_None) return previous;
    const int best = scan_level_best();
    for (int level = 0; level <= best && PyUnicode_Check(args[0]); level++) {
        if (PyUnicode_CompareWithASCIIString(args[0], scan_names[level]) == 0) {
            scan_level = level;
            return previous;
        }
    }
    Py_DECREF(previous);
    PyErr_Format(PyExc_ValueError, "scan_mode: %R is not one of this CPU's scans (%s up to %s)",
                 args[0], scan_names[0], scan_names[best]);
    return NULL;
}

/* 1 when s[0:n] (or "http://" + it) is already canonical, filling *sp; 0 otherwise. */
static int
scan_canonical(const unsigned char *s, Py_ssize_t n, int allow_query, spans *sp)
{
    Py_ssize_t i;
    sp->has_scheme = 1;
    if (n >= 7 && memcmp(s, "http://", 7) == 0) i = 7;
    else if (n >= 8 && memcmp(s, "https://", 8) == 0) i = 8;
    else if (n >= 6 && memcmp(s, "ftp://", 6) == 0) i = 6;
    else if (n >= 5 && memcmp(s, "ws://", 5) == 0) i = 5;
    else if (n >= 6 && memcmp(s, "wss://", 6) == 0) i = 6;
    else {
        /* Only a string with no "://" at all is read as http:// + itself. */
        for (Py_ssize_t j = 0; j + 2 < n; j++) {
            if (s[j] == ':' && s[j + 1] == '/' && s[j + 2] == '/') return 0;
        }
        sp->has_scheme = 0;
        i = 0;
    }
#ifdef SCAN_FAST
    int fast = -1;
#ifdef SCAN_AVX512
    if (scan_level == SCAN_AVX512W) fast = scan_fast_avx512(s + i, n - i, i, allow_query, sp);
    else
#endif
    if (scan_level == SCAN_SSE2) fast = scan_fast_sse2(s + i, n - i, i, allow_query, sp);
    if (fast >= 0) return fast;
#endif

    sp->host_start = i;
    while (i < n && s[i] < 128 && (cls[s[i]] & (HOST | HOST_EXT))) i++;
    sp->host_end = i;
    if (sp->host_end == sp->host_start) return 0;
    sp->is_ip = is_ipv4(s + sp->host_start, sp->host_end - sp->host_start);
    if (!sp->is_ip && !is_hostname(s + sp->host_start, sp->host_end - sp->host_start)) return 0;

    sp->has_path = 0;
    if (i < n && s[i] == '/') {
        sp->has_path = 1;
        i++;
        while (i < n && s[i] != '?') {
            /* one segment: units (a character or an escape), at least one; not "." or ".." */
            const Py_ssize_t start = i;
            Py_ssize_t e;
            while (i < n) {
                if (s[i] < 128 && (cls[s[i]] & SEG)) i++;
                else if ((e = esc_len(s, i, n)) != 0) i += e;
                else break;
            }
            if (i == start || (s[start] == '.' && (i - start == 1 || (i - start == 2 && s[start + 1] == '.')))) {
                return 0;
            }
            if (i == n || s[i] == '?') break;
            if (s[i] != '/') return 0;
            i++; /* a "/" ends the segment; a trailing one ends the path */
        }
    }
    sp->path_end = i;
    sp->query_start = -1;
    if (i < n) {
        if (s[i] != '?' || !allow_query) return 0;
        i++;
        sp->query_start = i;
        while (i < n) {
            Py_ssize_t e;
            if (s[i] < 128 && (cls[s[i]] & QUERY)) i++;
            else if ((e = esc_len(s, i, n)) != 0) i += e;
            else return 0;
        }
    }
    return 1;
}

/* The canonical form of text[0:n], which scan_canonical accepted into *sp, written to o
   (room for n + 8 bytes): "http://" and the "/" of an empty path added. Its length. */
static Py_ssize_t
write_canonical(unsigned char *o, const unsigned char *text, Py_ssize_t n, const spans *sp)
{
    const Py_ssize_t prefix = sp->has_scheme ? 0 : 7, slash = sp->has_path ? 0 : 1;
    if (prefix) memcpy(o, "http://", 7);
    memcpy(o + prefix, text, (size_t)sp->host_end);
    if (slash) o[prefix + sp->host_end] = '/';
    memcpy(o + prefix + sp->host_end + slash, text + sp->host_end, (size_t)(n - sp->host_end));
    return n + prefix + slash;
}

/* The canonical string of text[0:n] that scan_canonical accepted into *sp. */
static PyObject *
canonical_text(const unsigned char *text, Py_ssize_t n, const spans *sp)
{
    PyObject *out = PyUnicode_New(n + (sp->has_scheme ? 0 : 7) + (sp->has_path ? 0 : 1), 127);
    if (out != NULL) write_canonical(PyUnicode_1BYTE_DATA(out), text, n, sp);
    return out;
}

/* The canonical string of an ASCII `url` scan_canonical accepted (a new reference). */
static PyObject *
canonical_of(PyObject *url, const spans *sp)
{
    if (sp->has_scheme && sp->has_path) return Py_NewRef(url);
    return canonical_text(PyUnicode_1BYTE_DATA(url), PyUnicode_GET_LENGTH(url), sp);
}


/* ---------------------------------------------------------------------------------------
 * The near-canonical rewrite: the spellings an evasion (or a browser) most often adds to
 * a canonical URL, undone in C so that the URL can take the fast path: an upper-case
 * scheme or host, userinfo, a port (the filter profile keeps none), leading, trailing or
 * repeated dots in the host; in the path, percent-escapes (undone until none is left,
 * then the bytes canonicalisation escapes escaped again), "." and ".." segments and
 * runs of "/"; in the query, the same escaping. Anything else (escapes in the host, IDN,
 * xn-- labels, a fragment, backslashes, white space, a scheme-less host:port, an escaped
 * "?" in the path) is left to the Python canonicaliser (urlsieve/url/path.py is the
 * reference of every path step): the rewrite returns 0 and the caller falls back.
 * The result must then pass scan_canonical, so what comes out is canonical by the same
 * test as every fast-path URL (the tests compare the verdicts and canonical forms with
 * urlsieve.parse_url on generated evasions).
 */
static int
lower_eq(const unsigned char *s, Py_ssize_t n, const char *word)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c >= 'A' && c <= 'Z') c = (unsigned char)(c + 32);
        if (word[i] == '\0' || c != (unsigned char)word[i]) return 0;
    }
    return word[n] == '\0';
}

static inline int
hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* s[0:n] percent-unescaped until no "%XX" is left, into out; returns the length (<= n).
   One pass (path.py's _unescape_fully): each byte is appended, and a "%XX" it completes
   at the end of the output is replaced by its byte, again while that makes another. */
static Py_ssize_t
unescape_fully(const unsigned char *s, Py_ssize_t n, unsigned char *out)
{
    Py_ssize_t w = 0;
    for (Py_ssize_t r = 0; r < n; r++) {
        out[w++] = s[r];
        while (w >= 3 && out[w - 3] == '%') {
            int hi = hex_value(out[w - 2]), lo = hex_value(out[w - 1]);
            if (hi < 0 || lo < 0) break;
            out[w - 3] = (unsigned char)(hi << 4 | lo);
            w -= 2;
        }
    }
    return w;
}

/* path.py's collapse_path on p[0:n] in place ("." and ".." segments resolved, then runs
   of "/" collapsed; empty is "/"); p has room for n + 1 bytes. Returns the length. */
static Py_ssize_t
collapse_path_inplace(unsigned char *p, Py_ssize_t n)
{
    if (n == 0 || p[0] != '/') {
        memmove(p + 1, p, (size_t)n);
        p[0] = '/';
        n++;
    }
    /* segments after the leading "/": kept ones are written back at w (w <= r) */
    Py_ssize_t w = 1, r = 1, kept = 0;
    int trailing = 0;
    while (1) {
        Py_ssize_t e = r;
        while (e < n && p[e] != '/') e++;
        Py_ssize_t len = e - r;
        int dot = len == 1 && p[r] == '.', dotdot = len == 2 && p[r] == '.' && p[r + 1] == '.';
        if (dotdot) {
            if (kept == 1) {
                w = 1;
                kept = 0;
            } else if (kept > 1) {
                w--;
                while (p[w] != '/') w--; /* the "/" before the last kept segment */
                kept--;
            }
        } else if (!dot) {
            if (kept > 0) p[w++] = '/';
            memmove(p + w, p + r, (size_t)len);
            w += len;
            kept++;
        }
        if (e >= n) {
            trailing = dot || dotdot;
            break;
        }
        r = e + 1;
    }
    if (trailing && kept > 0) p[w++] = '/';
    /* runs of "/" */
    Py_ssize_t o = 0;
    for (Py_ssize_t i = 0; i < w; i++) {
        if (p[i] == '/' && o > 0 && p[o - 1] == '/') continue;
        p[o++] = p[i];
    }
    return o;
}

/* path.py's escape of p[0:n] in place (bytes <= 0x20, >= 0x7F, "#" and "%" as "%XX"),
   if the result fits in cap bytes; returns its length, or -1. */
static Py_ssize_t
escape_inplace(unsigned char *p, Py_ssize_t n, Py_ssize_t cap)
{
    Py_ssize_t extra = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        extra += (c <= 0x20 || c >= 0x7F || c == '#' || c == '%') ? 2 : 0;
    }
    if (n + extra > cap) return -1;
    static const char hex[] = "0123456789ABCDEF";
    Py_ssize_t w = n + extra;
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        unsigned char c = p[i];
        if (c <= 0x20 || c >= 0x7F || c == '#' || c == '%') {
            p[--w] = (unsigned char)hex[c & 15];
            p[--w] = (unsigned char)hex[c >> 4];
            p[--w] = '%';
        } else {
            p[--w] = c;
        }
    }
    return n + extra;
}

/* What a rewrite may do beyond the filter profile's default. */
enum {
    /* s is the UTF-8 of a str (path.py's to_bytes), whose bytes above 0x7F the path and
       the query may hold: they are escaped, as the escapes of the same bytes are. Without
       it, or in the scheme and the authority (IDN, userinfo), such a byte is Python's. */
    REWRITE_HIGH = 1,
    /* the profile keeps a port (the crawler's): a URL with one is left to Python */
    REWRITE_KEEP_PORT = 2,
    /* the caller keeps the parts (parse_url's URL holds userinfo and port): a URL with
       either is left to Python */
    REWRITE_PLAIN = 4,
};

/* The schemes with a host (url/parse.py's SCHEMES), the only ones the scan accepts. */
static const char *const scheme_text[5] = {"http", "https", "ftp", "ws", "wss"};

/* Writes the rewritten URL to out (room for REWRITE_CAP bytes); returns its length, or -1.
   how: REWRITE_* flags. */
static Py_ssize_t
rewrite_near_canonical(const unsigned char *s, Py_ssize_t n, unsigned char *out, int how)
{
    const int high = how & REWRITE_HIGH;
    Py_ssize_t i = 0, o = 0;
    /* url/parse.py's _split: a fragment goes; "\\" reads as "/" before the query */
    const unsigned char *fragment = memchr(s, '#', (size_t)n);
    if (fragment != NULL) n = fragment - s;
    int in_query = 0;
    Py_ssize_t first_high = n;
    for (Py_ssize_t j = 0; j < n; j++) {
        if (s[j] < 0x21 || s[j] == 0x7F || (in_query && s[j] == '\\')) return -1;
        if (s[j] > 0x7F) {
            if (!high) return -1;
            if (first_high == n) first_high = j;
        }
        in_query |= s[j] == '?';
    }
    /* the scheme: one of the five, any case, then "://" (not a third "/") */
    Py_ssize_t colon = -1;
    for (Py_ssize_t j = 0; j < n && j < 6; j++) {
        if (s[j] == ':') {
            colon = j;
            break;
        }
    }
    if (colon > 0 && colon + 2 < n && s[colon + 1] == '/' && s[colon + 2] == '/') {
        int known = 0;
        for (int k = 0; k < 5 && !known; k++) known = lower_eq(s, colon, scheme_text[k]);
        if (!known) return -1;
        for (Py_ssize_t j = 0; j < colon; j++) {
            unsigned char c = s[j];
            out[o++] = (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
        }
        memcpy(out + o, "://", 3);
        o += 3;
        i = colon + 3;
        if (i < n && (s[i] == '/' || s[i] == '\\')) return -1;
    } else {
        /* scheme-less: only a plain host[/...] (a ':' before the path may be a port or a
           scheme the Python reader decides about) */
        for (Py_ssize_t j = 0; j < n && s[j] != '/' && s[j] != '\\' && s[j] != '?'; j++) {
            if (s[j] == ':' || s[j] == '@') return -1;
        }
        memcpy(out, "http://", 7);
        o = 7;
    }
    /* the authority: up to "/", "\\" or "?"; userinfo (up to the last "@") dropped */
    Py_ssize_t a0 = i, a1 = i;
    while (a1 < n && s[a1] != '/' && s[a1] != '\\' && s[a1] != '?') a1++;
    if (first_high < a1) return -1; /* in the scheme or the authority */
    for (Py_ssize_t j = a0; j < a1; j++) {
        if (s[j] == '@') i = j + 1;
    }
    if (i != a0 && (how & REWRITE_PLAIN)) return -1;
    Py_ssize_t h0 = i, h1 = i;
    while (h1 < a1 && s[h1] != ':') h1++;
    if (h1 < a1 && (how & (REWRITE_KEEP_PORT | REWRITE_PLAIN))) return -1;
    if (h1 < a1) { /* a port: digits, at most 65535 once leading zeros go; then dropped */
        Py_ssize_t p = h1 + 1;
        while (p < a1 && s[p] == '0') p++;
        Py_ssize_t digits = a1 - p;
        long value = 0;
        if (digits > 5) return -1;
        for (Py_ssize_t j = h1 + 1; j < a1; j++) {
            if (s[j] < '0' || s[j] > '9') return -1;
        }
        for (Py_ssize_t j = p; j < a1; j++) value = value * 10 + (s[j] - '0');
        if (value > 65535) return -1;
    }
    /* the host: lower-case, dot runs collapsed, edge dots dropped; host characters only */
    Py_ssize_t host_start = o;
    int last_dot = 1; /* a leading dot is dropped */
    for (Py_ssize_t j = h0; j < h1; j++) {
        unsigned char c = s[j];
        if (c >= 'A' && c <= 'Z') c = (unsigned char)(c + 32);
        if (c == '.') {
            if (last_dot) continue;
            last_dot = 1;
        } else {
            if (c >= 128 || !(cls[c] & (HOST | HOST_EXT))) return -1;
            last_dot = 0;
        }
        out[o++] = c;
    }
    if (o > host_start && out[o - 1] == '.') o--;
    if (o == host_start) return -1;
    for (Py_ssize_t j = host_start; j + 3 < o; j++) { /* an xn-- label: IDNA decides */
        if ((j == host_start || out[j - 1] == '.') && memcmp(out + j, "xn--", 4) == 0) return -1;
    }
    if (n + 8 > REWRITE_CAP) return -1;
    /* the path: unescaped, dot segments and "/" runs collapsed, escaped again */
    Py_ssize_t q = a1;
    while (q < n && s[q] != '?') q++;
    for (Py_ssize_t j = a1; j < q; j++) out[o + j - a1] = s[j] == '\\' ? '/' : s[j];
    Py_ssize_t len = unescape_fully(out + o, q - a1, out + o); /* in place: w <= r */
    if (memchr(out + o, '?', (size_t)len) != NULL) return -1; /* "%3F": not a query */
    len = collapse_path_inplace(out + o, len);
    len = escape_inplace(out + o, len, REWRITE_CAP - o - 1);
    if (len < 0) return -1;
    o += len;
    if (q < n) { /* the query: unescaped and escaped again */
        if (o + (n - q) > REWRITE_CAP) return -1;
        out[o++] = '?';
        len = unescape_fully(s + q + 1, n - q - 1, out + o);
        len = escape_inplace(out + o, len, REWRITE_CAP - o);
        if (len < 0) return -1;
        o += len;
    }
    return o;
}

/* The rewrite of s into buf and scan_canonical of that: 1 with *text = buf and *len set,
   0 for the Python path. */
static int
rewrite_and_scan(const unsigned char *s, Py_ssize_t n, int allow_query, unsigned char *buf,
                 const unsigned char **text, Py_ssize_t *len, spans *sp, int how)
{
    Py_ssize_t m = rewrite_near_canonical(s, n, buf, how);
    if (m < 0 || !scan_canonical(buf, m, allow_query, sp)) return 0;
    *text = buf;
    *len = m;
    return 1;
}

/* scan_canonical(s), else rewrite_and_scan: 1 with *text and *len set to the
   canonical-form bytes' source (s or buf), 0 for the Python path. */
static int
scan_or_rewrite(const unsigned char *s, Py_ssize_t n, int allow_query, unsigned char *buf,
                const unsigned char **text, Py_ssize_t *len, spans *sp, int how)
{
    if (!(how & REWRITE_HIGH) && scan_canonical(s, n, allow_query, sp)) {
        *text = s;
        *len = n;
        return 1;
    }
    return rewrite_and_scan(s, n, allow_query, buf, text, len, sp, how);
}


static PyObject *
fast_canonical(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "fast_canonical(url, allow_query) takes 2 arguments");
        return NULL;
    }
    PyObject *url = args[0];
    if (!PyUnicode_Check(url)) {
        PyErr_Format(PyExc_TypeError, "url must be str, not %.100s", Py_TYPE(url)->tp_name);
        return NULL;
    }
    int allow_query = PyObject_IsTrue(args[1]);
    if (allow_query < 0) return NULL;
    if (!PyUnicode_IS_ASCII(url)) Py_RETURN_NONE;

    const unsigned char *s = PyUnicode_1BYTE_DATA(url);
    const Py_ssize_t n = PyUnicode_GET_LENGTH(url);
    spans sp;
    if (!scan_canonical(s, n, allow_query, &sp)) Py_RETURN_NONE;
    return canonical_of(url, &sp);
}

/* ---------------------------------------------------------------------------------------
 * One URL through the compiled path, for canonicalize and parse_url (url/parse.py): the
 * scan, else the near-canonical rewrite. A str beyond ASCII is encoded first as path.py's
 * to_bytes does (url_bytes, below). 0: the Python canonicaliser decides.
 */
/* The bytes path.py's to_bytes gives for a str of at most MAX_URL / 4 code points, into
   out: UTF-8, U+DC80..U+DCFF as the bytes 0x80..0xFF they stand for, another surrogate
   as its three UTF-8-style bytes. Returns the length. */
static Py_ssize_t
url_bytes(PyObject *text, unsigned char *out)
{
    const int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t o = 0;
    for (Py_ssize_t i = 0; i < PyUnicode_GET_LENGTH(text); i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c < 0x80) {
            out[o++] = (unsigned char)c;
        } else if (c < 0x800) {
            out[o++] = (unsigned char)(0xC0 | c >> 6);
            out[o++] = (unsigned char)(0x80 | (c & 0x3F));
        } else if (c >= 0xDC80 && c <= 0xDCFF) {
            out[o++] = (unsigned char)(c - 0xDC00);
        } else if (c < 0x10000) {
            out[o++] = (unsigned char)(0xE0 | c >> 12);
            out[o++] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
            out[o++] = (unsigned char)(0x80 | (c & 0x3F));
        } else {
            out[o++] = (unsigned char)(0xF0 | c >> 18);
            out[o++] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
            out[o++] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
            out[o++] = (unsigned char)(0x80 | (c & 0x3F));
        }
    }
    return o;
}

typedef struct {
    unsigned char *buf; /* PyMem: the encoded str, then the rewrite (NULL when unused) */
    const unsigned char *text;
    Py_ssize_t len;
    spans sp;
} one_url;

/* -1 with an exception set (out of memory), 0 for the Python path, 1 with *u filled. */
static int
one_url_scan(PyObject *url, int allow_query, int how, one_url *u)
{
    u->buf = NULL;
    const Py_ssize_t n = PyUnicode_GET_LENGTH(url);
    if (PyUnicode_IS_ASCII(url)) {
        const unsigned char *s = PyUnicode_1BYTE_DATA(url);
        if (scan_canonical(s, n, allow_query, &u->sp)) {
            u->text = s;
            u->len = n;
            return 1;
        }
        u->buf = scratch_take();
        if (u->buf == NULL) goto nomem;
        return rewrite_and_scan(s, n, allow_query, u->buf, &u->text, &u->len, &u->sp, how);
    }
    if (n > MAX_URL / 4) return 0;
    u->buf = scratch_take(); /* MAX_URL + REWRITE_CAP bytes */
    if (u->buf == NULL) goto nomem;
    Py_ssize_t m = url_bytes(url, u->buf);
    return rewrite_and_scan(u->buf, m, allow_query, u->buf + MAX_URL, &u->text, &u->len,
                            &u->sp, how | REWRITE_HIGH);
nomem:
    PyErr_NoMemory();
    return -1;
}

/* The arguments (url: str, allow_query, keep_port[, ...]) of canonical_rewrite and
   url_parts; usage: the call as its error message shows it. */
static int
one_url_args(const char *name, const char *usage, PyObject *const *args, Py_ssize_t nargs,
             Py_ssize_t want, int *allow_query, int *keep_port)
{
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments", usage, want);
        return -1;
    }
    if (!PyUnicode_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "%s: url must be str, not %.100s", name,
                     Py_TYPE(args[0])->tp_name);
        return -1;
    }
    if ((*allow_query = PyObject_IsTrue(args[1])) < 0) return -1;
    if ((*keep_port = PyObject_IsTrue(args[2])) < 0) return -1;
    return 0;
}

static PyObject *
canonical_rewrite(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    int allow_query, keep_port;
    if (one_url_args("canonical_rewrite", "canonical_rewrite(url, allow_query, keep_port)", args,
                     nargs, 3, &allow_query, &keep_port)
        < 0) {
        return NULL;
    }
    one_url u;
    int found = one_url_scan(args[0], allow_query, keep_port ? REWRITE_KEEP_PORT : 0, &u);
    PyObject *out = NULL;
    if (found > 0) {
        /* no buffer: the scan accepted the (ASCII) argument itself */
        out = u.buf == NULL ? canonical_of(args[0], &u.sp) : canonical_text(u.text, u.len, &u.sp);
    } else if (found == 0) {
        out = Py_NewRef(Py_None);
    }
    scratch_give(u.buf);
    return out;
}

/* The five schemes' names, interned once (url_parts' first item). */
static PyObject *scheme_names[5];
static PyObject *root_path; /* "/" */

static PyObject *
ascii_slice(const unsigned char *s, Py_ssize_t start, Py_ssize_t end)
{
    PyObject *out = PyUnicode_New(end - start, 127);
    if (out != NULL) memcpy(PyUnicode_1BYTE_DATA(out), s + start, (size_t)(end - start));
    return out;
}

/* The items of url/model.py's URL for a URL one_url_scan accepted. */
static int
url_items(const one_url *u, int keep_port, PyObject *items[8])
{
    const spans *sp = &u->sp;
    int scheme = 0;
    if (sp->has_scheme) {
        const Py_ssize_t len = sp->host_start - 3;
        for (scheme = 0; scheme < 5; scheme++) {
            if ((Py_ssize_t)strlen(scheme_text[scheme]) == len
                && memcmp(u->text, scheme_text[scheme], (size_t)len) == 0) {
                break;
            }
        }
        if (scheme == 5) { /* scan_canonical accepts these five only */
            PyErr_SetString(PyExc_SystemError, "url_parts: unknown scheme");
            return -1;
        }
    }
    items[0] = Py_NewRef(scheme_names[scheme]);
    items[1] = ascii_slice(u->text, sp->host_start, sp->host_end);
    items[2] = sp->has_path ? ascii_slice(u->text, sp->host_end, sp->path_end)
                            : Py_NewRef(root_path);
    items[3] = sp->query_start < 0 ? Py_NewRef(Py_None)
                                   : ascii_slice(u->text, sp->query_start, u->len);
    items[4] = Py_NewRef(Py_None); /* port: a URL with one is not accepted here */
    items[5] = Py_NewRef(Py_None); /* userinfo: likewise */
    items[6] = PyBool_FromLong(sp->is_ip);
    items[7] = PyBool_FromLong(keep_port);
    for (int k = 0; k < 8; k++) {
        if (items[k] == NULL) {
            for (int j = 0; j < 8; j++) Py_XDECREF(items[j]);
            return -1;
        }
    }
    return 0;
}

static PyObject *
url_parts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    int allow_query, keep_port;
    if (one_url_args("url_parts", "url_parts(url, allow_query, keep_port, cls)", args, nargs, 4,
                     &allow_query, &keep_port)
        < 0) {
        return NULL;
    }
    if (!PyType_Check(args[3]) || !PyType_IsSubtype((PyTypeObject *)args[3], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "url_parts: cls must be a subclass of tuple");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[3];
    one_url u;
    int found = one_url_scan(args[0], allow_query, REWRITE_PLAIN, &u);
    PyObject *out = NULL, *items[8];
    if (found == 0) {
        out = Py_NewRef(Py_None);
    } else if (found > 0 && url_items(&u, keep_port, items) == 0) {
        /* as tuple.__new__(cls, items) builds it (tuple_subtype_new) */
        out = cls->tp_alloc(cls, 8);
        for (int k = 0; k < 8; k++) {
            if (out != NULL) PyTuple_SET_ITEM(out, k, items[k]);
            else Py_DECREF(items[k]);
        }
        /* strings, None and bools only: in no cycle, so out of the collector's way (what
           CPython does for such a tuple, here for the subclass it skips) */
        if (out != NULL && PyObject_IS_GC(out)) PyObject_GC_UnTrack(out);
    }
    scratch_give(u.buf);
    return out;
}

/* ---------------------------------------------------------------------------------------
 * The seen stores' batch tables (urlsieve/seen/bloom.py and exact.py; their numpy code is
 * the reference, which the tests hold these equal to).
 *
 * bloom_test / bloom_insert take one layer of the blocked Bloom filter (whole 64-byte
 * blocks of 8 words) and the fingerprints as n rows of (h1, h2); the block and the bits
 * of a row are computed here, as bloom.py's _masks and _Layer.block_of define them.
 * bloom_insert tests the batch against the layer as it is, keeping only the first of
 * identical fingerprints, raises the layer's count (a one-word array in the mapping)
 * by the fresh ones, then sets their bits: the count first, as the module doc says.
 *
 * exact_lookup / exact_insert take the exact store's table (buckets of 8 slots, 0 for
 * empty, linear probing by buckets) and non-zero 64-bit keys. exact_insert adds them in
 * order (a repeat finds its first) and returns how many were new, or -1 when it found the
 * table full (a damaged store: the caller's load limit keeps slots free).
 */

/* How many rows ahead the table loops ask for the block or bucket a row will read. */
#define TABLE_AHEAD 16

typedef struct {
    Py_buffer table, rows, out, count;
    Py_ssize_t n; /* rows */
} table_args;

static void
release_table_args(table_args *a)
{
    PyBuffer_Release(&a->table); /* a no-op on a buffer never taken (obj NULL) */
    PyBuffer_Release(&a->rows);
    PyBuffer_Release(&a->out);
    PyBuffer_Release(&a->count);
}

/* The table (writable when `write`), rows of `row_words` uint64 and out (one bool a row)
   of a table call; the table must be whole lines of 8 words. */
static int
get_table_args(const char *name, PyObject *table, PyObject *rows, PyObject *out, int write,
               Py_ssize_t row_words, table_args *a)
{
    memset(a, 0, sizeof(*a));
    int flags = PyBUF_C_CONTIGUOUS | (write ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(table, &a->table, flags) < 0
        || PyObject_GetBuffer(rows, &a->rows, PyBUF_C_CONTIGUOUS) < 0
        || PyObject_GetBuffer(out, &a->out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        release_table_args(a);
        return -1;
    }
    a->n = a->out.len;
    if (a->table.len == 0 || a->table.len % 64 || a->rows.len != a->n * row_words * 8
        || ((uintptr_t)a->table.buf & 7) != 0 || ((uintptr_t)a->rows.buf & 7) != 0) {
        PyErr_Format(PyExc_ValueError,
                     "%s: the table must be whole 64-byte lines (at least one), the rows %zd "
                     "uint64 each (both aligned to 8 bytes) and out one bool a row",
                     name, row_words);
        release_table_args(a);
        return -1;
    }
    return 0;
}

static inline Py_ssize_t
bloom_block(uint64_t h1, uint64_t blocks)
{
    return (Py_ssize_t)(((h1 >> 32) * blocks) >> 32);
}

/* The bits a row sets in each word of its block (bloom.py's _masks). */
static inline void
bloom_masks(uint64_t h1, uint64_t h2, int t, uint64_t m[8])
{
    for (int w = 0; w < 8; w++) {
        unsigned b = (unsigned)(h2 >> (8 * w)) & 255;
        m[w] = UINT64_C(1) << (b & 63);
        if (t == 2) m[w] |= UINT64_C(1) << ((b >> 6) | (((h1 >> (4 * w)) & 15) << 2));
    }
}

/* Is every bit of the row (h1, h2) set in its block? */
static inline int
bloom_covers(const uint64_t *bits, uint64_t blocks, int t, uint64_t h1, uint64_t h2)
{
    uint64_t m[8], missing = 0;
    bloom_masks(h1, h2, t, m);
    const uint64_t *row = bits + 8 * bloom_block(h1, blocks);
    for (int w = 0; w < 8; w++) missing |= m[w] & ~row[w];
    return missing == 0;
}

/* out[i] = every bit of row i is set in its block (no writes). */
static void
bloom_cover(const uint64_t *bits, uint64_t blocks, int t, const uint64_t *h, Py_ssize_t n,
            unsigned char *out)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + TABLE_AHEAD < n) {
            PREFETCH_READ(bits + 8 * bloom_block(h[2 * (i + TABLE_AHEAD)], blocks));
        }
        out[i] = (unsigned char)bloom_covers(bits, blocks, t, h[2 * i], h[2 * i + 1]);
    }
}

/* Of the `fresh` rows out marks, only the first of identical fingerprints stays marked.
   How many stay, or -1 when out of memory (no exception set: it runs without the GIL). */
static Py_ssize_t
bloom_first_only(const uint64_t *h, unsigned char *out, Py_ssize_t n, Py_ssize_t fresh)
{
    if (fresh < 2) return fresh;
    size_t size = 4;
    while (size < 2 * (size_t)fresh) size <<= 1;
    Py_ssize_t *slots = PyMem_RawMalloc(size * sizeof(Py_ssize_t));
    if (slots == NULL) return -1;
    for (size_t j = 0; j < size; j++) slots[j] = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!out[i]) continue;
        size_t j = (size_t)(h[2 * i + 1] ^ (h[2 * i] >> 17)) & (size - 1);
        while (slots[j] >= 0) {
            Py_ssize_t k = slots[j];
            if (h[2 * k] == h[2 * i] && h[2 * k + 1] == h[2 * i + 1]) {
                out[i] = 0;
                fresh--;
                break;
            }
            j = (j + 1) & (size - 1);
        }
        if (out[i]) slots[j] = i;
    }
    PyMem_RawFree(slots);
    return fresh;
}

/* Set the bits of the rows out marks. */
static void
bloom_set(uint64_t *bits, uint64_t blocks, int t, const uint64_t *h, const unsigned char *out,
          Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + TABLE_AHEAD < n && out[i + TABLE_AHEAD]) {
            PREFETCH_WRITE(bits + 8 * bloom_block(h[2 * (i + TABLE_AHEAD)], blocks));
        }
        if (!out[i]) continue;
        uint64_t m[8];
        bloom_masks(h[2 * i], h[2 * i + 1], t, m);
        uint64_t *row = bits + 8 * bloom_block(h[2 * i], blocks);
        for (int w = 0; w < 8; w++) row[w] |= m[w];
    }
}

static int
bloom_t(PyObject *arg)
{
    long t = PyLong_AsLong(arg);
    if (t == -1 && PyErr_Occurred()) return -1;
    if (t != 1 && t != 2) {
        PyErr_Format(PyExc_ValueError, "bloom: t is 1 or 2, not %ld", t);
        return -1;
    }
    return (int)t;
}

static PyObject *
bloom_test(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "bloom_test(bits, t, h, out) takes 4 arguments");
        return NULL;
    }
    int t = bloom_t(args[1]);
    table_args a;
    if (t < 0 || get_table_args("bloom_test", args[0], args[2], args[3], 0, 2, &a) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    bloom_cover(a.table.buf, (uint64_t)(a.table.len / 64), t, a.rows.buf, a.n, a.out.buf);
    Py_END_ALLOW_THREADS
    release_table_args(&a);
    Py_RETURN_NONE;
}

/* The layer's count word (a one-uint64 buffer, writable) into a->count. */
static int
get_count(const char *name, PyObject *count, table_args *a)
{
    if (PyObject_GetBuffer(count, &a->count, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0
        || a->count.len != 8 || ((uintptr_t)a->count.buf & 7) != 0) {
        if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s: count is one uint64", name);
        return -1;
    }
    return 0;
}

/* The insert of rows out marks as fresh: only the first of identical fingerprints stays
   fresh, the count is raised by those, then their bits are set (the count first). */
static Py_ssize_t
bloom_commit(table_args *a, int t, Py_ssize_t fresh)
{
    uint64_t *bits = a->table.buf;
    const uint64_t *h = a->rows.buf;
    unsigned char *out = a->out.buf;
    fresh = bloom_first_only(h, out, a->n, fresh);
    if (fresh < 0) {
        PyErr_NoMemory();
        return -1;
    }
    *(uint64_t *)a->count.buf += (uint64_t)fresh;
    Py_BEGIN_ALLOW_THREADS
    bloom_set(bits, (uint64_t)(a->table.len / 64), t, h, out, a->n);
    Py_END_ALLOW_THREADS
    return fresh;
}

static PyObject *
bloom_insert(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 5 && nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "bloom_insert(bits, t, h, out, count, tested=False) takes 5 or 6 "
                        "arguments");
        return NULL;
    }
    int t = bloom_t(args[1]);
    int tested = nargs == 6 ? PyObject_IsTrue(args[5]) : 0;
    table_args a;
    if (t < 0 || tested < 0
        || get_table_args("bloom_insert", args[0], args[2], args[3], 1, 2, &a) < 0) {
        return NULL;
    }
    if (get_count("bloom_insert", args[4], &a) < 0) {
        release_table_args(&a);
        return NULL;
    }
    unsigned char *out = a.out.buf;
    Py_ssize_t fresh = 0;
    Py_BEGIN_ALLOW_THREADS
    if (!tested) bloom_cover(a.table.buf, (uint64_t)(a.table.len / 64), t, a.rows.buf, a.n, out);
    for (Py_ssize_t i = 0; i < a.n; i++) {
        if (!tested) out[i] = !out[i];
        out[i] = out[i] != 0;
        fresh += out[i];
    }
    Py_END_ALLOW_THREADS
    fresh = bloom_commit(&a, t, fresh);
    release_table_args(&a);
    return fresh < 0 ? NULL : PyLong_FromSsize_t(fresh);
}

static inline uint64_t
exact_home(uint64_t key, uint64_t buckets)
{
    return ((key >> 32) * buckets) >> 32;
}

/* Where key is in the table, or where it would go: *slot is its slot's index (found) or
   the first empty slot of its probe (not found; -1 when the table is full). */
static int
exact_find(const uint64_t *table, uint64_t buckets, uint64_t key, Py_ssize_t *slot)
{
    uint64_t bucket = exact_home(key, buckets);
    for (uint64_t step = 0; step < buckets; step++) {
        const uint64_t *row = table + 8 * bucket;
        for (int s = 0; s < 8; s++) {
            if (row[s] == key) {
                *slot = (Py_ssize_t)(8 * bucket + s);
                return 1;
            }
            if (row[s] == 0) {
                *slot = (Py_ssize_t)(8 * bucket + s);
                return 0;
            }
        }
        if (++bucket == buckets) bucket = 0;
    }
    *slot = -1;
    return 0;
}

/* The arguments (table, keys, out) of an exact_* call; the keys must not be 0. */
static int
get_exact_args(const char *name, PyObject *const *args, Py_ssize_t nargs, int write,
               table_args *a)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "%s(table, keys, out) takes 3 arguments", name);
        return -1;
    }
    if (get_table_args(name, args[0], args[1], args[2], write, 1, a) < 0) return -1;
    const uint64_t *keys = a->rows.buf;
    for (Py_ssize_t i = 0; i < a->n; i++) {
        if (keys[i] == 0) {
            PyErr_Format(PyExc_ValueError, "%s: key %zd is 0 (0 marks an empty slot)", name, i);
            release_table_args(a);
            return -1;
        }
    }
    return 0;
}

static PyObject *
exact_lookup(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    table_args a;
    if (get_exact_args("exact_lookup", args, nargs, 0, &a) < 0) return NULL;
    const uint64_t *table = a.table.buf, *keys = a.rows.buf;
    const uint64_t buckets = (uint64_t)(a.table.len / 64);
    unsigned char *out = a.out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < a.n; i++) {
        if (i + TABLE_AHEAD < a.n) {
            PREFETCH_READ(table + 8 * exact_home(keys[i + TABLE_AHEAD], buckets));
        }
        Py_ssize_t slot;
        out[i] = (unsigned char)exact_find(table, buckets, keys[i], &slot);
    }
    Py_END_ALLOW_THREADS
    release_table_args(&a);
    Py_RETURN_NONE;
}

static PyObject *
exact_insert(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    table_args a;
    if (get_exact_args("exact_insert", args, nargs, 1, &a) < 0) return NULL;
    uint64_t *table = a.table.buf;
    const uint64_t *keys = a.rows.buf;
    const uint64_t buckets = (uint64_t)(a.table.len / 64);
    unsigned char *out = a.out.buf;
    Py_ssize_t added = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < a.n; i++) {
        if (i + TABLE_AHEAD < a.n) {
            PREFETCH_WRITE(table + 8 * exact_home(keys[i + TABLE_AHEAD], buckets));
        }
        Py_ssize_t slot;
        out[i] = 0;
        if (exact_find(table, buckets, keys[i], &slot)) continue;
        if (slot < 0) {
            added = -1;
            break;
        }
        table[slot] = keys[i];
        out[i] = 1;
        added++;
    }
    Py_END_ALLOW_THREADS
    release_table_args(&a);
    return PyLong_FromSsize_t(added);
}

/* ---------------------------------------------------------------------------------------
 * One URL at a time (issue 34): url_key fingerprints one URL in one call, with the crawler
 * profile's query steps (tracking parameters dropped, parameters sorted) done here too,
 * so that a store's add(url) makes no numpy round trip for one item (and the probe is
 * exact_add_locked / bloom_add_locked, below). url/profile.py's query steps and fingerprint.py are
 * the reference (tests/seen/test_one_url.py holds them equal).
 */
#define KEY_STACK 4096 /* canonical URLs longer than this go to the Python path */
#define KEY_PARTS 256  /* so do queries of more parameters */

typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
} key_part;

/* bytes order (Python's comparison of bytes) */
static int
key_part_cmp(const void *a, const void *b)
{
    const key_part *x = a, *y = b;
    size_t m = (size_t)(x->n < y->n ? x->n : y->n);
    int c = m ? memcmp(x->p, y->p, m) : 0;
    if (c) return c;
    return (x->n > y->n) - (x->n < y->n);
}

/* The query steps beyond the default, as url_key's `query` argument gives them:
   (drop names: tuple of bytes, drop prefixes: tuple of bytes, sort, drop_empty), or None. */
typedef struct {
    PyObject *exact, *prefixes;
    int drop, sort, drop_empty;
} key_plan;

static int
key_plan_of(PyObject *arg, key_plan *kp)
{
    memset(kp, 0, sizeof(*kp));
    if (arg == Py_None) return 0;
    if (!PyTuple_Check(arg) || PyTuple_GET_SIZE(arg) != 5) goto bad;
    kp->drop = PyObject_IsTrue(PyTuple_GET_ITEM(arg, 0));
    kp->exact = PyTuple_GET_ITEM(arg, 1);
    kp->prefixes = PyTuple_GET_ITEM(arg, 2);
    kp->sort = PyObject_IsTrue(PyTuple_GET_ITEM(arg, 3));
    kp->drop_empty = PyObject_IsTrue(PyTuple_GET_ITEM(arg, 4));
    if (kp->drop < 0 || kp->sort < 0 || kp->drop_empty < 0) return -1;
    if (!PyTuple_Check(kp->exact) || !PyTuple_Check(kp->prefixes)) goto bad;
    for (int k = 0; k < 2; k++) {
        PyObject *names = k ? kp->prefixes : kp->exact;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
            if (!PyBytes_Check(PyTuple_GET_ITEM(names, i))) goto bad;
        }
    }
    return 1;
bad:
    PyErr_SetString(PyExc_TypeError, "url_key: query is None or (drop, names, prefixes, sort, "
                                      "drop_empty) with tuples of bytes");
    return -1;
}

/* drop_parameters' test: the parameter's name (up to the first "=") is one of the names
   or starts with one of the prefixes. */
static int
key_dropped(const key_plan *kp, const unsigned char *p, Py_ssize_t n)
{
    const unsigned char *eq = memchr(p, '=', (size_t)n);
    const Py_ssize_t k = eq == NULL ? n : eq - p;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kp->exact); i++) {
        PyObject *name = PyTuple_GET_ITEM(kp->exact, i);
        if (PyBytes_GET_SIZE(name) == k && memcmp(PyBytes_AS_STRING(name), p, (size_t)k) == 0) {
            return 1;
        }
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kp->prefixes); i++) {
        PyObject *pre = PyTuple_GET_ITEM(kp->prefixes, i);
        const Py_ssize_t m = PyBytes_GET_SIZE(pre);
        if (m <= k && memcmp(PyBytes_AS_STRING(pre), p, (size_t)m) == 0) return 1;
    }
    return 0;
}

/* The canonical URL c[0:n] (filter steps, query kept) with the plan's query steps: the
   query (canonical: every "%" starts the escape of a byte) is unescaped once, which gives
   what the default steps' unescape gave, then parameters are dropped and sorted and the
   bytes escaped again (url/profile.py). Into out (room for n bytes); its length, or -1
   for the Python path. */
static Py_ssize_t
key_query(const unsigned char *c, Py_ssize_t n, const key_plan *kp, unsigned char *out)
{
    const unsigned char *mark = memchr(c, '?', (size_t)n);
    if (mark == NULL) {
        memcpy(out, c, (size_t)n);
        return n;
    }
    const Py_ssize_t head = mark - c + 1;
    unsigned char raw[KEY_STACK];
    key_part parts[KEY_PARTS];
    Py_ssize_t m = 0;
    for (Py_ssize_t i = head; i < n; i++) {
        int hi, lo;
        if (c[i] == '%' && i + 2 < n && (hi = hex_value(c[i + 1])) >= 0
            && (lo = hex_value(c[i + 2])) >= 0) {
            raw[m++] = (unsigned char)(hi << 4 | lo);
            i += 2;
        } else {
            raw[m++] = c[i];
        }
    }
    Py_ssize_t count = 0, start = 0;
    for (Py_ssize_t i = 0; i <= m; i++) {
        if (i < m && raw[i] != '&') continue;
        if (count == KEY_PARTS) return -1;
        parts[count].p = raw + start;
        parts[count++].n = i - start;
        start = i + 1;
    }
    if (kp->drop || (kp->sort && count >= 2)) {
        Py_ssize_t kept = 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            if (parts[i].n == 0 || (kp->drop && key_dropped(kp, parts[i].p, parts[i].n))) continue;
            parts[kept++] = parts[i];
        }
        count = kept;
    }
    if (kp->sort && count >= 2) qsort(parts, (size_t)count, sizeof(key_part), key_part_cmp);
    static const char hex[] = "0123456789ABCDEF";
    Py_ssize_t o = head;
    memcpy(out, c, (size_t)head);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (i) out[o++] = '&';
        for (Py_ssize_t j = 0; j < parts[i].n; j++) {
            unsigned char b = parts[i].p[j];
            if (b <= 0x20 || b >= 0x7F || b == '#' || b == '%') {
                if (o + 3 > n) return -1; /* cannot happen: the query was escaped so */
                out[o++] = '%';
                out[o++] = (unsigned char)hex[b >> 4];
                out[o++] = (unsigned char)hex[b & 15];
            } else {
                if (o + 1 > n) return -1;
                out[o++] = b;
            }
        }
    }
    if (o == head && kp->drop_empty) o--; /* the "?" of an emptied query goes */
    return o;
}

/* url_key(allow_query, keep_port, bits, query, url): the xxh3-64 (bits 64: an int) or
   xxh3-128 (bits 128: (high, low)) of the canonical form of one URL on the compiled path,
   else None. query: None (allow_query says whether a query stays on the compiled path)
   or the plan of the crawler profile's query steps (key_plan_of). The URL comes last, so
   that functools.partial binds the rest (a store's key function, with no Python frame). */
static PyObject *
url_key(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    int allow_query, keep_port;
    PyObject *ordered[3];
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "url_key(allow_query, keep_port, bits, query, url) takes 5 arguments");
        return NULL;
    }
    ordered[0] = args[4];
    ordered[1] = args[0];
    ordered[2] = args[1];
    if (one_url_args("url_key", "url_key(allow_query, keep_port, bits, query, url)", ordered, 3,
                     3, &allow_query, &keep_port)
        < 0) {
        return NULL;
    }
    long bits = PyLong_AsLong(args[2]);
    if (bits == -1 && PyErr_Occurred()) return NULL;
    if (bits != 64 && bits != 128) {
        PyErr_SetString(PyExc_ValueError, "url_key: bits is 64 or 128");
        return NULL;
    }
    key_plan kp;
    int planned = key_plan_of(args[3], &kp);
    if (planned < 0) return NULL;
    one_url u;
    int found = one_url_scan(args[4], planned ? 1 : allow_query, keep_port ? REWRITE_KEEP_PORT : 0,
                             &u);
    if (found <= 0) {
        scratch_give(u.buf);
        return found < 0 ? NULL : Py_NewRef(Py_None);
    }
    unsigned char canon[KEY_STACK], query[KEY_STACK];
    const unsigned char *text = u.text;
    Py_ssize_t len = u.len;
    if (!u.sp.has_scheme || !u.sp.has_path) {
        if (len + 8 > KEY_STACK) goto python;
        len = write_canonical(canon, text, len, &u.sp);
        text = canon;
    }
    if (planned && u.sp.query_start >= 0) {
        if (len > KEY_STACK) goto python;
        len = key_query(text, len, &kp, query);
        if (len < 0) goto python;
        text = query;
    }
    PyObject *out;
    if (bits == 64) {
        out = PyLong_FromUnsignedLongLong(XXH3_64bits(text, (size_t)len));
    } else {
        us_xxh128 h = XXH3_128bits(text, (size_t)len);
        PyObject *high = PyLong_FromUnsignedLongLong(h.high64);
        PyObject *low = PyLong_FromUnsignedLongLong(h.low64);
        out = high == NULL || low == NULL ? NULL : PyTuple_Pack(2, high, low);
        Py_XDECREF(high);
        Py_XDECREF(low);
    }
    scratch_give(u.buf);
    return out;
python:
    scratch_give(u.buf);
    Py_RETURN_NONE;
}

/* A uint64 argument (a fingerprint), or -1 with an exception. */
static int
key_arg(const char *name, PyObject *arg, uint64_t *v)
{
    *v = PyLong_AsUnsignedLongLong(arg);
    if (*v == (uint64_t)-1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_ValueError, "%s: a fingerprint is an int in [0, 2**64)", name);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * One add under the store's file lock, in one call (issue 34): exact_add_locked and
 * bloom_add_locked take the file's exclusive flock, check the dynamic header words of
 * seen/_mapped.py (dirty, retired, the layer count), mark the file dirty, add one
 * fingerprint, clear the mark and unlock. Whatever the store's Python session would have
 * to do first (repair a dead writer's leftovers, follow a grown or retired file, grow)
 * is left to it: the call returns -2 having changed nothing. The caller holds the store's
 * thread lock and has checked that the store is open in this process.
 */
#include <sys/file.h>
#include <errno.h>

/* seen/_mapped.py's dynamic header words */
#define W_DIRTY 32
#define W_RETIRED 33
#define W_COUNT 34
#define W_NLAYERS 35
#define HEADER_WORDS 512

/* flock(fd, how) without the GIL (another process may hold it); -1 on failure. */
static int
locked_flock(int fd, int how)
{
    int r;
    Py_BEGIN_ALLOW_THREADS
    do {
        r = flock(fd, how);
    } while (r < 0 && errno == EINTR);
    Py_END_ALLOW_THREADS
    return r;
}

/* The whole file as words (at least the header; writable unless fd is -1, a lookup), its
   fd; -1 with an error. */
static int
locked_args(const char *name, PyObject *words, PyObject *fd_arg, Py_buffer *view, int *fd)
{
    long v = PyLong_AsLong(fd_arg);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < -1 || v > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: fd is a file descriptor, not %ld", name, v);
        return -1;
    }
    *fd = (int)v;
    if (PyObject_GetBuffer(words, view, PyBUF_C_CONTIGUOUS | (*fd >= 0 ? PyBUF_WRITABLE : 0)) < 0) {
        return -1;
    }
    if (view->len < HEADER_WORDS * 8 || view->len % 64 || ((uintptr_t)view->buf & 7) != 0) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s: words is the whole store file as uint64", name);
        return -1;
    }
    return 0;
}

/* With the lock: 1 when the header lets the one-item add run here (then marked dirty). */
static int
locked_begin(volatile uint64_t *w, uint64_t nlayers)
{
    if (w[W_DIRTY] != 0 || w[W_RETIRED] != 0 || (nlayers && w[W_NLAYERS] != nlayers)) return 0;
    __atomic_store_n(&w[W_DIRTY], 1, __ATOMIC_SEQ_CST);
    return 1;
}

/* exact_add_locked(words, fd, key, buckets, limit) -> int: 1 the table held key, 0 it was
   added (slot, then count), -2 the Python session decides (nothing changed). fd -1: a
   lookup without the lock (1 held, 0 not, -2 the file was retired). */
static PyObject *
exact_add_locked(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "exact_add_locked(words, fd, key, buckets, limit) takes 5 arguments");
        return NULL;
    }
    uint64_t key, buckets, limit;
    if (key_arg("exact_add_locked", args[2], &key) < 0
        || key_arg("exact_add_locked", args[3], &buckets) < 0
        || key_arg("exact_add_locked", args[4], &limit) < 0) {
        return NULL;
    }
    if (key == 0 || buckets == 0) {
        PyErr_SetString(PyExc_ValueError, "exact_add_locked: key and buckets are not 0");
        return NULL;
    }
    Py_buffer view;
    int fd;
    if (locked_args("exact_add_locked", args[0], args[1], &view, &fd) < 0) return NULL;
    if ((uint64_t)view.len / 64 < HEADER_WORDS / 8 + buckets) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "exact_add_locked: the file is shorter than its table");
        return NULL;
    }
    long r = -2;
    uint64_t *w = view.buf, *table = w + HEADER_WORDS;
    if (fd < 0) { /* a lookup: no lock, nothing written */
        Py_ssize_t slot;
        if (w[W_RETIRED] == 0) r = exact_find(table, buckets, key, &slot);
    } else if (locked_flock(fd, LOCK_EX) == 0) {
        if (locked_begin(w, 0)) {
            Py_ssize_t slot;
            if (exact_find(table, buckets, key, &slot)) {
                r = 1;
            } else if (slot >= 0 && w[W_COUNT] < limit) {
                __atomic_store_n(&table[slot], key, __ATOMIC_SEQ_CST);
                __atomic_store_n(&w[W_COUNT], w[W_COUNT] + 1, __ATOMIC_SEQ_CST);
                r = 0;
            }
            __atomic_store_n(&w[W_DIRTY], 0, __ATOMIC_SEQ_CST);
        }
        locked_flock(fd, LOCK_UN);
    }
    PyBuffer_Release(&view);
    return PyLong_FromLong(r);
}

/* bloom_add_locked(words, fd, layers, h1, h2) -> int: layers is an int64 array of one row
   (offset in words, blocks, t, capacity, count word) a layer of the store; 1 a layer held
   (h1, h2), 0 it was added to the last one (count, then bits), -2 the Python session
   decides (the last layer is full, or see above; nothing changed). fd -1: a lookup
   without the lock (1 held, 0 not, -2 the layers changed). */
static PyObject *
bloom_add_locked(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "bloom_add_locked(words, fd, layers, h1, h2) takes 5 arguments");
        return NULL;
    }
    uint64_t h1, h2;
    if (key_arg("bloom_add_locked", args[3], &h1) < 0
        || key_arg("bloom_add_locked", args[4], &h2) < 0) {
        return NULL;
    }
    Py_buffer view, lay;
    int fd;
    if (locked_args("bloom_add_locked", args[0], args[1], &view, &fd) < 0) return NULL;
    if (PyObject_GetBuffer(args[2], &lay, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    PyObject *out = NULL;
    const int64_t *L = lay.buf;
    const Py_ssize_t nl = lay.len / 40, words = view.len / 8;
    if (nl < 1 || lay.len % 40 || ((uintptr_t)lay.buf & 7) != 0) goto bad;
    for (Py_ssize_t i = 0; i < nl; i++) {
        const int64_t *row = L + 5 * i;
        if (row[0] < HEADER_WORDS || row[0] % 8 || row[1] < 1 || (row[2] != 1 && row[2] != 2)
            || row[1] > (words - row[0]) / 8 || row[4] < W_NLAYERS || row[4] >= HEADER_WORDS) {
            goto bad;
        }
    }
    long r = -2;
    uint64_t *w = view.buf;
    if (fd < 0) { /* a lookup: no lock, nothing written */
        if (w[W_NLAYERS] == (uint64_t)nl) {
            r = 0;
            for (Py_ssize_t i = 0; i < nl && !r; i++) {
                const int64_t *row = L + 5 * i;
                r = bloom_covers(w + row[0], (uint64_t)row[1], (int)row[2], h1, h2);
            }
        }
    } else if (locked_flock(fd, LOCK_EX) == 0) {
        if (locked_begin(w, (uint64_t)nl)) {
            for (Py_ssize_t i = 0; i < nl && r == -2; i++) {
                const int64_t *row = L + 5 * i;
                if (bloom_covers(w + row[0], (uint64_t)row[1], (int)row[2], h1, h2)) r = 1;
            }
            const int64_t *last = L + 5 * (nl - 1);
            if (r == -2 && w[last[4]] < (uint64_t)last[3]) {
                uint64_t m[8], *block = w + last[0] + 8 * bloom_block(h1, (uint64_t)last[1]);
                __atomic_store_n(&w[last[4]], w[last[4]] + 1, __ATOMIC_SEQ_CST);
                bloom_masks(h1, h2, (int)last[2], m);
                for (int k = 0; k < 8; k++) block[k] |= m[k];
                r = 0;
            }
            __atomic_store_n(&w[W_DIRTY], 0, __ATOMIC_SEQ_CST);
        }
        locked_flock(fd, LOCK_UN);
    }
    out = PyLong_FromLong(r);
    goto done;
bad:
    PyErr_SetString(PyExc_ValueError,
                    "bloom_add_locked: layers is (offset, blocks, t, capacity, count word) "
                    "rows of int64 inside the file");
done:
    PyBuffer_Release(&lay);
    PyBuffer_Release(&view);
    return out;
}

/* A key's home slot in a table of `slots` (at most 2**32) slots: the top 32 bits of the
   key scaled to the table (match/snapshot.py's _home), so any slot count works. */
static inline uint64_t
slot_home(uint64_t key, uint64_t slots)
{
    return ((key >> 32) * slots) >> 32;
}

/* A table slot of the compiled rule format: u64 key, u32 value (snapshot.py's _SLOT). */
#define SLOT 12

/* ---------------------------------------------------------------------------------------
 * The compiled rule format's batch lookup (urlsieve/match/snapshot.py; the reference is
 * SnapshotMatcher._best, which the tests hold this equal to). Per URL on the canonical
 * fast path: the id of the deciding rule, -1 when none matches; -2 for a URL off the fast
 * path (the caller parses it). Every offset read from the image is checked against the
 * image, so a damaged or hostile image gives wrong answers at worst, never a bad read.
 */

enum { F_ALLOW = 1, F_EXACT_HOST = 2, F_ANCHORED = 4, F_IP = 8, F_EXTRA = 64 };
#define QUERY_BIT (UINT64_C(1) << 31)
#define DEEP_BIT 30 /* path depths from 30 on share one bit */
/* an expression slot's value with this bit set is the one rule id stored under it */
#define ONE_RULE (UINT32_C(1) << 31)
/* rule records and extras (snapshot.py's _RECORD, _EXTRA_RECORD) */
#define RECORD 16
#define EXTRA 20

typedef struct {
    const unsigned char *base;
    Py_ssize_t size;
    const unsigned char *hosts, *exprs;
    uint64_t host_slots, expr_slots;
    const uint32_t *postings;
    uint64_t n_postings;
    const unsigned char *rules;
    uint64_t n_rules;
    const unsigned char *extras;
    uint64_t n_extras;
    const unsigned char *strings;
    uint64_t strings_len;
    uint64_t host_depths;
    const unsigned char *mask;
    Py_ssize_t mask_len;
} image;

static inline uint64_t
h64(const unsigned char *p, size_t n)
{
    uint64_t h = XXH3_64bits(p, n);
    return h ? h : 1;
}

static inline uint64_t
rd64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint32_t
rd32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The value stored for key in a table of 12-byte slots, 0 when it is absent. */
static uint32_t
probe(const unsigned char *table, uint64_t slots, uint64_t key)
{
    uint64_t i = slot_home(key, slots);
    for (uint64_t tries = 0; tries < slots; tries++) {
        const unsigned char *p = table + SLOT * i;
        uint64_t slot = rd64(p);
        if (slot == key) return rd32(p + 8);
        if (slot == 0) return 0;
        if (++i == slots) i = 0;
    }
    return 0;
}

/* The cache lines of a key's home slot (a 12-byte slot may cross into the next line). */
static inline void
prefetch_slot(const unsigned char *table, uint64_t slots, uint64_t key)
{
    const unsigned char *p = table + SLOT * slot_home(key, slots);
    PREFETCH_READ(p);
    PREFETCH_READ(p + SLOT - 1);
}

static inline uint16_t
rd16(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* A rule as its record (snapshot.py's _RECORD, "<IIHHHBB", 16 bytes) and, with F_EXTRA,
   its extra (_EXTRA_RECORD, "<IIIIi", 20 bytes) give it: SnapshotMatcher._record. */
typedef struct {
    uint32_t off, n_pat, n_host, n_path;
    int32_t n_query; /* -1: no query */
    uint32_t source_id, line;
    uint16_t category, flags;
} record;

/* The 16-byte record of rule `id` (below im->n_rules, which the caller has checked) as
   it stands: with F_EXTRA, off is the index of its extra and the lengths are not filled
   in (read_record reads them). */
static inline record
record_itself(const image *im, uint64_t id)
{
    const unsigned char *r = im->rules + RECORD * id;
    return (record){
        .off = rd32(r), .line = rd32(r + 4), .source_id = rd16(r + 8),
        .category = rd16(r + 10), .n_path = rd16(r + 12), .n_host = r[14], .flags = r[15],
        .n_pat = 0, .n_query = -1,
    };
}

/* Rule `id` (below im->n_rules, which the caller has checked), its extra read: 0 when
   that is not in the image. */
static inline int
read_record(const image *im, uint64_t id, record *rec)
{
    *rec = record_itself(im, id);
    if (!(rec->flags & F_EXTRA)) return 1;
    if (rec->off >= im->n_extras) return 0;
    const unsigned char *x = im->extras + EXTRA * (uint64_t)rec->off;
    rec->off = rd32(x);
    rec->n_pat = rd32(x + 4);
    rec->n_host = rd32(x + 8);
    rec->n_path = rd32(x + 12);
    rec->n_query = (int32_t)rd32(x + 16);
    return 1;
}

/* The rank of rule `id` if it matches expression e[0:elen] at this level, else -1. */
static int64_t
candidate(const image *im, uint64_t id, const unsigned char *e, size_t elen, int exact_path,
          int level)
{
    record rec;
    if (id >= im->n_rules || !read_record(im, id, &rec)) return -1;
    uint32_t off = rec.off, n_pat = rec.n_pat, n_host = rec.n_host, n_path = rec.n_path;
    int32_t n_query = rec.n_query;
    uint16_t category = rec.category, flags = rec.flags;
    if ((flags & (F_EXACT_HOST | F_IP)) && level) return -1;
    int anchored = (flags & F_ANCHORED) != 0;
    if (anchored && !exact_path) return -1;
    if (im->mask != NULL && (category >= im->mask_len || !im->mask[category])) return -1;
    uint64_t hp = (uint64_t)n_host + n_path;
    uint64_t stored_len = hp + (n_query > 0 ? (uint64_t)n_query : 0);
    uint64_t start = (uint64_t)off + n_pat;
    if (start > im->strings_len || stored_len > im->strings_len - start) return -1;
    const unsigned char *st = im->strings + start;
    int ok;
    if (n_query >= 0) {
        ok = elen == hp + 1 + (uint64_t)n_query && memcmp(e, st, hp) == 0 && e[hp] == '?'
             && memcmp(e + hp + 1, st + hp, (size_t)n_query) == 0;
    } else if (elen == hp) {
        ok = memcmp(e, st, hp) == 0;
    } else { /* the "/ads" rule stored under "/ads/" */
        ok = !anchored && elen == hp + 1 && memcmp(e, st, hp) == 0 && e[hp] == '/';
    }
    if (!ok) return -1;
    uint64_t path_len = n_query < 0 ? n_path : (uint64_t)n_path + (uint64_t)n_query + 1;
    if (path_len > 0x1FFFF) path_len = 0x1FFFF;
    /* urlsieve.rules.model.rank_of */
    return (int64_t)((uint64_t)n_host << 20 | path_len << 3 | (uint64_t)anchored << 2
                     | (uint64_t)((flags & F_EXACT_HOST) != 0) << 1 | (flags & F_ALLOW));
}

/* The rule ids an expression slot's value names: 0 when they are not in the image.
   *value is where a lone id is kept (ONE_RULE: the value is the id, the bit cleared). */
static inline int
posted(const image *im, uint32_t *value, const uint32_t **ids, uint64_t *count)
{
    if (*value & ONE_RULE) {
        *value ^= ONE_RULE;
        *ids = value;
        *count = 1;
        return 1;
    }
    uint64_t at = *value;
    if (at >= im->n_postings) return 0;
    uint64_t n = im->postings[at];
    if (n > im->n_postings - at - 1) return 0;
    *ids = im->postings + at + 1;
    *count = n;
    return 1;
}

static inline uint64_t
depth_bit(Py_ssize_t depth)
{
    return UINT64_C(1) << (depth < DEEP_BIT ? depth : DEEP_BIT);
}

/* The host levels a lookup probes, most specific first: host[start:hl] for start = 0 and
   after each ".", while labels (of the level) counts down; an IP address is one level. */
static inline Py_ssize_t
host_labels(const unsigned char *host, Py_ssize_t hl)
{
    Py_ssize_t labels = 1;
    for (Py_ssize_t k = 0; k < hl; k++) labels += host[k] == '.';
    return labels;
}

/* Whether the rule set has hosts of this many labels (the image's host-depth mask). */
static inline int
level_stored(const image *im, Py_ssize_t labels)
{
    return im->host_depths >> (labels < 63 ? labels : 63) & 1;
}

/* Move *start and *labels to the parent level: 0 when there is none. */
static inline int
parent_level(const unsigned char *host, Py_ssize_t hl, int is_ip, Py_ssize_t *start,
             Py_ssize_t *labels)
{
    if (is_ip) return 0;
    Py_ssize_t k = *start;
    while (k < hl && host[k] != '.') k++;
    if (k >= hl) return 0;
    *start = k + 1;
    (*labels)--;
    return 1;
}

/* The lookup text of a canonical URL s[0:n] in buf: host + lower(path or "/") +
   ["?" + lower(query)], so that every expression of a host level is one slice of it.
   *hl, *pl: the host's and the path's lengths; *ql: the query's, -1 without one. */
static void
lookup_text(const unsigned char *s, Py_ssize_t n, const spans *sp, unsigned char *buf,
            Py_ssize_t *hl, Py_ssize_t *pl, Py_ssize_t *ql)
{
    *hl = sp->host_end - sp->host_start;
    memcpy(buf, s + sp->host_start, (size_t)*hl);
    unsigned char *path = buf + *hl;
    if (sp->has_path) {
        *pl = sp->path_end - sp->host_end;
        for (Py_ssize_t k = 0; k < *pl; k++) {
            unsigned char c = s[sp->host_end + k];
            path[k] = (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
        }
    } else {
        *pl = 1;
        path[0] = '/';
    }
    *ql = -1;
    if (sp->query_start >= 0) {
        *ql = n - sp->query_start;
        path[*pl] = '?';
        for (Py_ssize_t k = 0; k < *ql; k++) {
            unsigned char c = s[sp->query_start + k];
            path[*pl + 1 + k] = (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
        }
    }
}

/* The expressions of one host level, most specific first: the query expression, the
   path, then each prefix ending at a "/". `end` is the expression's length past the host
   (-1: the query expression), `bit` its depth bit in the host's depths, `exact_path`
   whether it is the whole path. */
typedef struct {
    const unsigned char *path;
    Py_ssize_t pl, ql, slashes, end, depth, cut;
    uint64_t bit;
    int exact_path, stage;
} expr_walk;

static inline void
walk_start(expr_walk *w, const unsigned char *path, Py_ssize_t pl, Py_ssize_t ql,
           Py_ssize_t slashes)
{
    *w = (expr_walk){.path = path, .pl = pl, .ql = ql, .slashes = slashes,
                     .end = ql >= 0 ? -1 : pl, .depth = 0, .cut = -1,
                     .bit = ql >= 0 ? QUERY_BIT : depth_bit(slashes),
                     .exact_path = 1, .stage = ql >= 0 ? 0 : 1};
}

/* The expression's length (host excluded). */
static inline size_t
walk_len(const expr_walk *w)
{
    return (size_t)(w->end < 0 ? w->pl + 1 + w->ql : w->end);
}

/* Move to the next expression: 0 when there is none. */
static inline int
walk_next(expr_walk *w)
{
    if (w->stage == 0) {
        w->stage = 1;
        w->end = w->pl;
        w->bit = depth_bit(w->slashes);
        return 1;
    }
    if (w->stage == 1) {
        w->stage = 2;
        w->depth = w->path[w->pl - 1] == '/' ? w->slashes - 1 : w->slashes;
        w->cut = w->pl - 1;
    } else {
        w->depth--;
    }
    /* cut = rfind("/", 0, cut) */
    Py_ssize_t c = w->cut - 1;
    while (c >= 0 && w->path[c] != '/') c--;
    if (c < 0) return 0;
    w->cut = c;
    w->end = c + 1;
    w->bit = depth_bit(w->depth);
    w->exact_path = 0;
    return 1;
}

static inline Py_ssize_t
count_slashes(const unsigned char *path, Py_ssize_t pl)
{
    Py_ssize_t slashes = 0;
    for (Py_ssize_t k = 0; k < pl; k++) slashes += path[k] == '/';
    return slashes;
}

/* The rule deciding s[0:n], -1 for none, -2 off the fast path. buf: scratch of n + 1
   bytes (a "/" is added when there is no path). */
static int64_t
match_one(const image *im, const unsigned char *s, Py_ssize_t n, const spans *spp,
          unsigned char *buf)
{
    Py_ssize_t hl, pl, ql;
    lookup_text(s, n, spp, buf, &hl, &pl, &ql);
    const unsigned char *path = buf + hl;
    Py_ssize_t slashes = count_slashes(path, pl);
    Py_ssize_t labels = host_labels(buf, hl), start = 0;
    for (int level = 0;; level++) {
        if (level_stored(im, labels)) {
            const unsigned char *host = buf + start;
            size_t host_len = (size_t)(hl - start);
            uint32_t depths = probe(im->hosts, im->host_slots, h64(host, host_len));
            if (depths) {
                int64_t best_rank = -1, best_id = -1;
                expr_walk w;
                walk_start(&w, path, pl, ql, slashes);
                do {
                    if (!(depths & w.bit)) continue;
                    size_t elen = host_len + walk_len(&w);
                    uint32_t value = probe(im->exprs, im->expr_slots, h64(host, elen));
                    if (!value) continue;
                    const uint32_t *ids;
                    uint64_t count;
                    if (!posted(im, &value, &ids, &count)) continue;
                    for (uint64_t k = 0; k < count; k++) {
                        uint64_t id = ids[k];
                        int64_t rank = candidate(im, id, host, elen, w.exact_path, level);
                        if (rank > best_rank) {
                            best_rank = rank;
                            best_id = (int64_t)id;
                        }
                    }
                } while (walk_next(&w));
                if (best_id >= 0) return best_id;
            }
        }
        if (!parent_level(buf, hl, spp->is_ip, &start, &labels)) return -1;
    }
}

/* The canonical-form bytes a lookup matches the URL s[0:n] as: 1 with *text (s, or its
   rewrite in `rewritten`: REWRITE_CAP bytes), *len and *sp; 0 off the fast path. */
static int
lookup_form(const unsigned char *s, Py_ssize_t n, unsigned char *rewritten,
            const unsigned char **text, Py_ssize_t *len, spans *sp)
{
    return n <= MAX_URL - 8 && scan_or_rewrite(s, n, 1, rewritten, text, len, sp, 0);
}

/* ---- Warming: the memory a URL's lookup will read, asked for a few URLs ahead --------
 * At 1M rules each lookup that finds its host waits on a chain of cache misses: the
 * expression slot, the postings (of an expression two rules or more share), the rule
 * record, the rule's strings. snapshot_match walks
 * that chain for the URLs ahead of the one it matches, one link per URL step, with
 * prefetches only: what match_one then reads is in the cache. The walk decides nothing
 * (match_one alone does, unchanged), so it may stop short anywhere; every read is
 * bounds-checked as match_one's are. */
#define WARM_MAX 16
/* A rewritten URL up to this long is kept in its ring slot (rewritten when its host slots
   are asked for, then matched as kept); a longer one is rewritten again when matched. */
#define WARM_TEXT 1024

enum { WARM_NONE, WARM_AS_IS, WARM_REWRITTEN, WARM_REFUSED };

typedef struct {
    /* WARM_AS_IS: canonical as it is (sp its scan); WARM_REWRITTEN: text[0:len] is its
       rewrite (sp that text's scan); WARM_REFUSED: off the fast path (-2); WARM_NONE:
       matched without warming */
    int state;
    spans sp;
    int n; /* what v holds: expression keys, then table values, then rule ids */
    uint64_t v[WARM_MAX];
    Py_ssize_t len;
    unsigned char text[WARM_TEXT];
} warm_url;

/* Step 0: the URL s[0:n] scanned, or rewritten into u->text (lookup_form, kept for when
   it is matched), and its host slots asked for. */
static void
warm_hosts(const image *im, const unsigned char *s, Py_ssize_t n, warm_url *u,
           unsigned char *rewritten)
{
    const unsigned char *text;
    Py_ssize_t len;
    u->n = 0;
    if (!lookup_form(s, n, rewritten, &text, &len, &u->sp)) {
        u->state = WARM_REFUSED;
        return;
    }
    if (text == s) {
        u->state = WARM_AS_IS;
    } else if (len > WARM_TEXT) {
        u->state = WARM_NONE; /* rewritten again when matched */
        return;
    } else {
        memcpy(u->text, text, (size_t)len);
        u->len = len;
        u->state = WARM_REWRITTEN;
        s = u->text;
    }
    const unsigned char *host = s + u->sp.host_start;
    Py_ssize_t hl = u->sp.host_end - u->sp.host_start, labels = host_labels(host, hl), start = 0;
    do { /* the levels of match_one, in its order */
        if (level_stored(im, labels)) {
            uint64_t key = h64(host + start, (size_t)(hl - start));
            prefetch_slot(im->hosts, im->host_slots, key);
        }
    } while (parent_level(host, hl, u->sp.is_ip, &start, &labels));
}

/* Step 1: the expression slots of every stored host level's expressions. */
static void
warm_exprs(const image *im, PyObject *url, warm_url *u, unsigned char *buf)
{
    u->n = 0;
    const unsigned char *s;
    Py_ssize_t n;
    if (u->state == WARM_REWRITTEN) {
        s = u->text;
        n = u->len;
    } else if (u->state == WARM_AS_IS) { /* an ASCII str */
        s = PyUnicode_1BYTE_DATA(url);
        n = PyUnicode_GET_LENGTH(url);
    } else {
        return;
    }
    Py_ssize_t hl, pl, ql;
    lookup_text(s, n, &u->sp, buf, &hl, &pl, &ql);
    const unsigned char *path = buf + hl;
    Py_ssize_t slashes = count_slashes(path, pl);
    Py_ssize_t labels = host_labels(buf, hl), start = 0;
    do {
        if (!level_stored(im, labels)) continue;
        const unsigned char *host = buf + start;
        size_t host_len = (size_t)(hl - start);
        uint32_t depths = probe(im->hosts, im->host_slots, h64(host, host_len));
        if (!depths) continue;
        expr_walk w;
        walk_start(&w, path, pl, ql, slashes);
        do {
            if (!(depths & w.bit)) continue;
            if (u->n == WARM_MAX) return;
            uint64_t key = h64(host, host_len + walk_len(&w));
            prefetch_slot(im->exprs, im->expr_slots, key);
            u->v[u->n++] = key;
        } while (walk_next(&w));
    } while (parent_level(buf, hl, u->sp.is_ip, &start, &labels));
}

/* Step 2: the postings of the expressions found (a lone rule's id is in its slot). */
static void
warm_postings(const image *im, warm_url *u)
{
    int kept = 0;
    for (int j = 0; j < u->n; j++) {
        uint32_t value = probe(im->exprs, im->expr_slots, u->v[j]);
        if (!value) continue;
        if (!(value & ONE_RULE) && value < im->n_postings) PREFETCH_READ(im->postings + value);
        u->v[kept++] = value;
    }
    u->n = kept;
}

/* Step 3: the records of the rules posted. */
static void
warm_records(const image *im, warm_url *u)
{
    uint64_t values[WARM_MAX];
    int n = u->n, kept = 0;
    memcpy(values, u->v, (size_t)n * sizeof *values);
    for (int j = 0; j < n; j++) {
        uint32_t value = (uint32_t)values[j];
        const uint32_t *ids;
        uint64_t count;
        if (!posted(im, &value, &ids, &count)) continue;
        for (uint64_t k = 0; k < count && kept < WARM_MAX; k++) {
            uint64_t id = ids[k];
            if (id >= im->n_rules) continue;
            PREFETCH_READ(im->rules + RECORD * id);
            u->v[kept++] = id;
        }
    }
    u->n = kept;
}

/* Step 4: the rules' strings, or for a rule with an extra, the extra (its strings are
   read cold). */
static void
warm_strings(const image *im, const warm_url *u)
{
    for (int j = 0; j < u->n; j++) {
        const record rec = record_itself(im, u->v[j]);
        if (rec.flags & F_EXTRA) {
            if (rec.off < im->n_extras) PREFETCH_READ(im->extras + EXTRA * (uint64_t)rec.off);
        } else if (rec.off < im->strings_len) {
            PREFETCH_READ(im->strings + rec.off);
        }
    }
}

/* Fill *im from an image buffer and its layout tuple (SnapshotMatcher._layout): 0 with an
   error set when the layout does not fit the buffer (tables of 1 .. 2**32 slots,
   sections 8-byte aligned inside it). The mask is the caller's to set. */
static int
image_open(const Py_buffer *img, PyObject *layout, image *im)
{
    if (!PyTuple_Check(layout) || PyTuple_GET_SIZE(layout) != 13) {
        PyErr_SetString(PyExc_TypeError, "layout must be a tuple of 13 ints");
        return 0;
    }
    uint64_t v[13];
    for (int k = 0; k < 13; k++) {
        v[k] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(layout, k));
        if (v[k] == (uint64_t)-1 && PyErr_Occurred()) return 0;
    }
    uint64_t size = (uint64_t)img->len;
    /* sections: (offset, bytes) inside the image, 8-byte aligned; tables of 1 .. 2**32
       slots */
    uint64_t sect[6][2] = {{v[0], v[1] * SLOT}, {v[2], v[3] * SLOT}, {v[4], v[5] * 4},
                           {v[6], v[7] * RECORD}, {v[8], v[9] * EXTRA}, {v[10], v[11]}};
    int bad = v[1] == 0 || v[3] == 0 || v[1] > (UINT64_C(1) << 32) || v[3] > (UINT64_C(1) << 32)
              || v[1] > size || v[3] > size || v[5] > size || v[7] > size || v[9] > size;
    for (int k = 0; !bad && k < 6; k++) {
        bad = sect[k][0] % 8 || sect[k][0] > size || sect[k][1] > size - sect[k][0];
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "the layout does not fit the image");
        return 0;
    }
    const unsigned char *base = img->buf;
    *im = (image){
        .base = base, .size = img->len,
        .hosts = base + v[0], .host_slots = v[1],
        .exprs = base + v[2], .expr_slots = v[3],
        .postings = (const uint32_t *)(base + v[4]), .n_postings = v[5],
        .rules = base + v[6], .n_rules = v[7],
        .extras = base + v[8], .n_extras = v[9],
        .strings = base + v[10], .strings_len = v[11],
        .host_depths = v[12],
        .mask = NULL, .mask_len = 0,
    };
    return 1;
}

/* The rule deciding the URL s[0:n] (-1: none; -2: off the fast path, the caller parses
   it), with *text, *len and *sp the canonical-form bytes it was matched as. buf: scratch
   of MAX_URL + 16 bytes, rewritten: REWRITE_CAP bytes. Neither the scan nor the rewrite
   takes a byte above 0x7E (outside a fragment, which the rewrite drops, as the reader
   does), so the URL's bytes need no pass of their own here. */
static int64_t
match_url(const image *im, const unsigned char *s, Py_ssize_t n, unsigned char *buf,
          unsigned char *rewritten, const unsigned char **text, Py_ssize_t *len, spans *sp)
{
    if (!lookup_form(s, n, rewritten, text, len, sp)) return -2;
    return match_one(im, *text, *len, sp, buf);
}

/* How many URLs ahead snapshot_match asks for their host-table slots, and for each later
   link of the lookup's chain (warm_exprs .. warm_strings). WARM_RING: a power of two above
   HOSTS_AHEAD. */
#define HOSTS_AHEAD 8
#define EXPRS_AHEAD 4
#define POSTINGS_AHEAD 3
#define RECORDS_AHEAD 2
#define STRINGS_AHEAD 1
#define WARM_RING 16

/* The canonical string of the URL `url` matched as text[0:len] (spans sp): the URL
   itself when it was canonical as it came (text its own bytes), else a new string. */
static PyObject *
form_of(PyObject *url, const unsigned char *text, Py_ssize_t len, const spans *sp)
{
    /* (an instance of a str subclass is copied: the form is a str, as Python's) */
    return text == PyUnicode_1BYTE_DATA(url) && PyUnicode_CheckExact(url)
               ? canonical_of(url, sp)
               : canonical_text(text, len, sp);
}

/* What a batch lookup does with URL k's answer: `id` (-1 no rule, -2 off the fast path)
   and, on the fast path, the canonical-form bytes it was matched as (text[0:len], its
   spans sp). Returns 0, or -1 with an error set, which stops the batch. */
typedef int (*match_sink)(void *ctx, Py_ssize_t k, PyObject *url, int64_t id,
                          const unsigned char *text, Py_ssize_t len, const spans *sp);

/* Per-URL masks (the policy engine: one pass list per client, one call per batch): URL
   k uses base[row_at[k]:row_at[k] + stride]; row_at NULL: the image's own mask. */
typedef struct {
    const unsigned char *base;
    const int64_t *row_at;
    Py_ssize_t stride;
} mask_rows;

/* The warmed lookup of every URL of the list `refs`, in order, each answer given to the
   sink (an item that is not an ASCII str is off the fast path). The list must not change
   during the call: the caller holds a copy, or its sink runs no Python code. buf:
   scratch_take's block. Returns how many URLs were off the fast path, -1 when the sink
   failed. */
static Py_ssize_t
match_batch(image *im, PyObject *refs, const mask_rows *rows, unsigned char *buf,
            match_sink sink, void *ctx)
{
    Py_ssize_t n_urls = PyList_GET_SIZE(refs);
    unsigned char *rewritten = buf + MAX_URL + 16;
    warm_url ring[WARM_RING];
    for (int j = 0; j < WARM_RING; j++) {
        ring[j].state = WARM_NONE;
        ring[j].n = 0;
    }
    Py_ssize_t left = 0; /* URLs off the fast path (-2) */
    for (Py_ssize_t k = -HOSTS_AHEAD; k < n_urls; k++) {
        /* URL k + HOSTS_AHEAD's host slots are asked for, the later links of the URLs
           between are warmed, then URL k is matched */
        Py_ssize_t next = k + HOSTS_AHEAD; /* cannot overflow: n_urls is a list's size */
        if (next + PREFETCH < n_urls) prefetch_str(PyList_GET_ITEM(refs, next + PREFETCH));
        if (k >= 0) {
            PyObject *url = PyList_GET_ITEM(refs, k);
            warm_url *u = &ring[k % WARM_RING];
            const unsigned char *text = NULL;
            Py_ssize_t len = 0;
            spans sp;
            int64_t id;
            if (!PyUnicode_Check(url) || !PyUnicode_IS_ASCII(url)) {
                id = -2; /* (not a str: snapshot_check leaves it to its caller) */
            } else {
                if (rows->row_at != NULL) {
                    im->mask = rows->base + rows->row_at[k];
                    im->mask_len = rows->stride;
                }
                text = PyUnicode_1BYTE_DATA(url);
                len = PyUnicode_GET_LENGTH(url);
                if (u->state == WARM_AS_IS) { /* scanned already */
                    sp = u->sp;
                    id = match_one(im, text, len, &sp, buf);
                } else if (u->state == WARM_REWRITTEN) { /* rewritten already */
                    sp = u->sp;
                    text = u->text;
                    len = u->len;
                    id = match_one(im, text, len, &sp, buf);
                } else if (u->state == WARM_REFUSED) {
                    id = -2;
                } else {
                    id = match_url(im, text, len, buf, rewritten, &text, &len, &sp);
                }
            }
            left += id == -2;
            if (sink(ctx, k, url, id, text, len, &sp) < 0) return -1;
        }
        /* the links ahead, the furthest first (each URL's previous link was asked for one
           step ago) */
        if (k + EXPRS_AHEAD >= 0 && k + EXPRS_AHEAD < n_urls)
            warm_exprs(im, PyList_GET_ITEM(refs, k + EXPRS_AHEAD),
                       &ring[(k + EXPRS_AHEAD) % WARM_RING], buf);
        if (k + POSTINGS_AHEAD >= 0 && k + POSTINGS_AHEAD < n_urls)
            warm_postings(im, &ring[(k + POSTINGS_AHEAD) % WARM_RING]);
        if (k + RECORDS_AHEAD >= 0 && k + RECORDS_AHEAD < n_urls)
            warm_records(im, &ring[(k + RECORDS_AHEAD) % WARM_RING]);
        if (k + STRINGS_AHEAD >= 0 && k + STRINGS_AHEAD < n_urls)
            warm_strings(im, &ring[(k + STRINGS_AHEAD) % WARM_RING]);
        /* URL next takes the slot URL next - WARM_RING has left */
        if (next < n_urls) {
            warm_url *u = &ring[next % WARM_RING];
            PyObject *later = PyList_GET_ITEM(refs, next);
            u->state = WARM_NONE;
            u->n = 0;
            if (PyUnicode_Check(later) && PyUnicode_IS_ASCII(later))
                warm_hosts(im, PyUnicode_1BYTE_DATA(later), PyUnicode_GET_LENGTH(later), u,
                           rewritten);
        }
    }
    return left;
}

/* A copy of snapshot_match's `urls` (a list) when every item is a str, else NULL with a
   TypeError naming the first that is not. */
static PyObject *
held_strings(PyObject *urls)
{
    PyObject *refs = PyList_GetSlice(urls, 0, PyList_GET_SIZE(urls));
    if (refs == NULL) return NULL;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(refs); k++) {
        if (!PyUnicode_Check(PyList_GET_ITEM(refs, k))) {
            PyErr_Format(PyExc_TypeError, "snapshot_match: urls[%zd] is %.100s, not str", k,
                         Py_TYPE(PyList_GET_ITEM(refs, k))->tp_name);
            Py_DECREF(refs);
            return NULL;
        }
    }
    return refs;
}

/* snapshot_match's sink: the ids into an int64 buffer, the canonical forms (when asked
   for) into a list. */
typedef struct {
    int64_t *ids;
    PyObject *canon;
} ids_sink;

static int
ids_put(void *ctx, Py_ssize_t k, PyObject *url, int64_t id, const unsigned char *text,
        Py_ssize_t len, const spans *sp)
{
    ids_sink *out = ctx;
    out->ids[k] = id;
    if (id == -2 || out->canon == NULL) return 0;
    /* Dropping an old item of `canonical` may run Python code that resizes it. */
    if (k >= PyList_GET_SIZE(out->canon)) {
        PyErr_SetString(PyExc_RuntimeError, "snapshot_match: a list changed size");
        return -1;
    }
    PyObject *form = form_of(url, text, len, sp);
    if (form == NULL) return -1;
    PyObject *old = PyList_GET_ITEM(out->canon, k);
    PyList_SET_ITEM(out->canon, k, form);
    Py_DECREF(old);
    return 0;
}

static PyObject *
snapshot_match(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 5 && nargs != 6 && nargs != 8) {
        PyErr_SetString(PyExc_TypeError,
                        "snapshot_match(image, layout, urls, mask, out[, canonical[, rows, "
                        "stride]]) takes 5, 6 or 8 arguments");
        return NULL;
    }
    PyObject *layout = args[1], *urls = args[2], *mask_obj = args[3];
    PyObject *canon = nargs >= 6 && args[5] != Py_None ? args[5] : NULL;
    /* Per-URL masks: mask holds rows of `stride` bytes, rows[k] is the byte offset of
     * URL k's row (the policy engine: one pass list per client, one call per batch). */
    Py_ssize_t stride = 0;
    if (nargs == 8) {
        stride = PyLong_AsSsize_t(args[7]);
        if (stride == -1 && PyErr_Occurred()) return NULL;
        if (stride < 0 || mask_obj == Py_None) {
            PyErr_SetString(PyExc_ValueError,
                            "snapshot_match: rows need a mask and a stride >= 0");
            return NULL;
        }
    }
    if (canon != NULL
        && (!PyList_Check(canon) || !PyList_Check(urls)
            || PyList_GET_SIZE(canon) != PyList_GET_SIZE(urls))) {
        PyErr_SetString(PyExc_TypeError,
                        "snapshot_match: canonical must be a list as long as urls");
        return NULL;
    }
    if (!PyList_Check(urls)) {
        PyErr_SetString(PyExc_TypeError, "snapshot_match: urls must be a list of str");
        return NULL;
    }
    Py_buffer img, out, mask = {0}, rows = {0};
    if (PyObject_GetBuffer(args[0], &img, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[4], &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&img);
        return NULL;
    }
    if (mask_obj != Py_None && PyObject_GetBuffer(mask_obj, &mask, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&img);
        PyBuffer_Release(&out);
        return NULL;
    }
    if (nargs == 8 && PyObject_GetBuffer(args[6], &rows, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&img);
        PyBuffer_Release(&out);
        PyBuffer_Release(&mask);
        return NULL;
    }
    PyObject *result = NULL, *refs = NULL;
    unsigned char *buf = NULL;
    Py_ssize_t n_urls = PyList_GET_SIZE(urls);
    const int64_t *row_at = rows.obj ? rows.buf : NULL;
    if (row_at != NULL) {
        int bad_rows = rows.len != 8 * n_urls;
        for (Py_ssize_t k = 0; k < n_urls && !bad_rows; k++) {
            bad_rows = row_at[k] < 0 || row_at[k] > mask.len - stride;
        }
        if (bad_rows) {
            PyErr_SetString(PyExc_ValueError,
                            "snapshot_match: rows must hold one int64 per URL, each the offset "
                            "of a whole row of the mask");
            goto done;
        }
    }
    image im;
    if (out.len != 8 * n_urls) {
        PyErr_SetString(PyExc_ValueError, "snapshot_match: out must be one int64 per URL");
        goto done;
    }
    if (!image_open(&img, layout, &im)) goto done;
    im.mask = mask.obj ? mask.buf : NULL;
    im.mask_len = mask.obj ? mask.len : 0;
    buf = scratch_take();
    if (buf == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* The strings, held: Python code run below (dropping an old item of `canonical`)
       cannot change what a URL whose host slots were asked for ahead is. */
    refs = held_strings(urls);
    if (refs == NULL) goto done;
    mask_rows per_url = {.base = mask.obj ? mask.buf : NULL, .row_at = row_at, .stride = stride};
    ids_sink sink = {.ids = out.buf, .canon = canon};
    Py_ssize_t left = match_batch(&im, refs, &per_url, buf, ids_put, &sink);
    if (left >= 0) result = PyLong_FromSsize_t(left);
done:
    Py_XDECREF(refs);
    scratch_give(buf);
    PyBuffer_Release(&img);
    PyBuffer_Release(&out);
    if (mask.obj) PyBuffer_Release(&mask);
    if (rows.obj) PyBuffer_Release(&rows);
    return result;
}

/* Whether the request line s[0:len] has the plain form (see squid_scan): 1 with
   s[*u0:*u1] its URL and *chan its channel ID (-1: none), else 0 (*chan is -1). */
static int
scan_line(const unsigned char *s, Py_ssize_t len, long channels, int escaped, Py_ssize_t *u0p,
          Py_ssize_t *u1p, int64_t *chan)
{
    Py_ssize_t i = 0;
    *chan = -1;
    while (i < len && s[i] == ' ') i++;
    Py_ssize_t t0 = i;
    while (i < len && s[i] != ' ') i++;
    Py_ssize_t t1 = i;
    int digits = t1 > t0;
    for (Py_ssize_t j = t0; j < t1 && digits; j++) digits = s[j] >= '0' && s[j] <= '9';
    Py_ssize_t u0 = t0, u1 = t1;
    int plain = t1 > t0;
    if (channels != 0 && digits) {
        /* a channel ID; echoed as sent, so only plain numbers are taken here */
        if (t1 - t0 > 18 || (s[t0] == '0' && t1 - t0 > 1)) plain = 0;
        int64_t value = 0;
        for (Py_ssize_t j = t0; j < t1 && plain; j++) value = value * 10 + (s[j] - '0');
        *chan = value;
        while (i < len && s[i] == ' ') i++;
        u0 = i;
        while (i < len && s[i] != ' ') i++;
        u1 = i;
    } else if (channels == 1) {
        plain = 0; /* an ID was required: the reference says what is wrong */
    }
    if (u1 == u0 || (u1 - u0 == 1 && s[u0] == '-')) plain = 0;
    int slash = 0, colon = 0;
    for (Py_ssize_t j = u0; j < u1 && plain; j++) {
        unsigned char c = s[j];
        if (c >= 0x80 || c < 0x21 || (escaped && c == '%')) plain = 0;
        slash |= c == '/';
        colon |= c == ':';
    }
    if (plain && ((colon && !slash) || s[u0] == '[')) plain = 0; /* CONNECT's authority */
    /* a CONNECT method among the fields: the reference reads it */
    for (Py_ssize_t j = u1; j + 7 <= len && plain; j++) {
        if (s[j] == ' ' && memcmp(s + j + 1, "CONNECT", 7) == 0
            && (j + 8 == len || s[j + 8] == ' ')) {
            plain = 0;
        }
    }
    if (!plain) *chan = -1;
    *u0p = u0;
    *u1p = u1;
    return plain;
}

/* ---------------------------------------------------------------------------------------
 * The Squid helper's line scan (urlsieve/gateway/squid.py; the reference is
 * protocol.parse_request, which the tests hold this equal to on the lines it answers).
 * Per request line (bytes, without its newline): the URL as str when the line has the
 * plain form "[channel SP] URL [SP field ...]" with an ASCII URL the helper checks as it
 * is, else None (the caller parses that line in Python: bad lines, CONNECT, authority
 * forms, escaped URLs of the external ACL, non-ASCII bytes). out[k] is the channel ID
 * (-1 without one). channels: 0 no IDs, 1 IDs required, 2 recognised.
 */
static PyObject *
squid_scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "squid_scan(lines, channels, escaped, out) takes 4 arguments");
        return NULL;
    }
    PyObject *lines = args[0];
    if (!PyList_Check(lines)) {
        PyErr_SetString(PyExc_TypeError, "squid_scan: lines must be a list of bytes");
        return NULL;
    }
    long channels = PyLong_AsLong(args[1]);
    if (channels == -1 && PyErr_Occurred()) return NULL;
    int escaped = PyObject_IsTrue(args[2]);
    if (escaped < 0) return NULL;
    Py_buffer out;
    if (PyObject_GetBuffer(args[3], &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(lines);
    if (out.len != 8 * n || channels < 0 || channels > 2) {
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError,
                        "squid_scan: out must hold one int64 per line; channels is 0, 1 or 2");
        return NULL;
    }
    PyObject *result = PyList_New(n);
    if (result == NULL) {
        PyBuffer_Release(&out);
        return NULL;
    }
    int64_t *chan = out.buf;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PyList_GET_ITEM(lines, k);
        chan[k] = -1;
        if (!PyBytes_Check(item)) {
            PyErr_Format(PyExc_TypeError, "squid_scan: lines[%zd] is %.100s, not bytes", k,
                         Py_TYPE(item)->tp_name);
            Py_DECREF(result);
            PyBuffer_Release(&out);
            return NULL;
        }
        const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(item);
        Py_ssize_t u0, u1;
        PyObject *url = Py_None;
        int plain = scan_line(s, PyBytes_GET_SIZE(item), channels, escaped, &u0, &u1, &chan[k]);
        if (plain) {
            url = PyUnicode_New(u1 - u0, 127);
            if (url == NULL) {
                Py_DECREF(result);
                PyBuffer_Release(&out);
                return NULL;
            }
            memcpy(PyUnicode_1BYTE_DATA(url), s + u0, (size_t)(u1 - u0));
        } else {
            Py_INCREF(url);
        }
        PyList_SET_ITEM(result, k, url);
    }
    PyBuffer_Release(&out);
    return result;
}

/* ---------------------------------------------------------------------------------------
 * squid_reply: a read of Squid request lines answered in one call, line scan, rule lookup
 * and reply (urlsieve/gateway/squid.py; the reference is SquidHelper's Python batch loop,
 * and SquidHelper.handle for each line on its own, which the tests hold this equal to).
 * Lines are as read: trailing CRs are dropped (serve's line.rstrip(b"\r")).
 * A line's reply is written here when the line has the plain form (scan_line), its URL
 * is on the canonical fast path (match_url), and
 *   - an allow rule decides, or no rule and `unknown` is false: "ERR";
 *   - a block rule decides whose category id has pieces (pieces[id]: a tuple of ASCII
 *     str): the pieces joined by the URL percent-encoded as quote_all does.
 * Any other line is a hole, (line index, offset in the output where its reply goes),
 * for the caller to answer (bad lines, URLs off the fast path, block rules of a
 * category without pieces, URLs no rule decides when `unknown` is true). Returns
 * (replies: bytes, holes: list[tuple[int, int]], blocked, allowed).
 */
/* What squid_reply and filter_reply share: the image, scratch for match_url, the output
   and the holes (lines left to the caller, each (line index, offset in the output)). */
typedef struct {
    Py_buffer img, mask;
    image im;
    unsigned char *buf, *rewritten;
    growbuf out;
    PyObject *holes;
} line_batch;

/* 1 with *b ready, or 0 with an error set (*b is then released). */
static int
line_batch_open(line_batch *b, PyObject *image_obj, PyObject *layout, PyObject *mask_obj)
{
    memset(b, 0, sizeof *b);
    if (PyObject_GetBuffer(image_obj, &b->img, PyBUF_SIMPLE) < 0) return 0;
    if (mask_obj != Py_None && PyObject_GetBuffer(mask_obj, &b->mask, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&b->img);
        return 0;
    }
    int ok = image_open(&b->img, layout, &b->im);
    b->im.mask = b->mask.obj ? b->mask.buf : NULL;
    b->im.mask_len = b->mask.obj ? b->mask.len : 0;
    if (ok) {
        b->buf = scratch_take();
        b->rewritten = b->buf == NULL ? NULL : b->buf + MAX_URL + 16;
        b->holes = PyList_New(0);
        if (b->buf == NULL && b->holes != NULL) PyErr_NoMemory();
        ok = b->buf != NULL && b->holes != NULL;
    }
    return ok;
}

static void
line_batch_close(line_batch *b)
{
    Py_CLEAR(b->holes);
    PyMem_Free(b->out.p);
    scratch_give(b->buf);
    if (b->img.obj) PyBuffer_Release(&b->img);
    if (b->mask.obj) PyBuffer_Release(&b->mask);
}

/* Line k of a list of bytes (its memory asked for PREFETCH lines ahead), or NULL with a
   TypeError naming the caller. */
static PyObject *
line_batch_item(PyObject *lines, Py_ssize_t k, const char *caller)
{
    if (k + PREFETCH < PyList_GET_SIZE(lines)) prefetch_str(PyList_GET_ITEM(lines, k + PREFETCH));
    PyObject *item = PyList_GET_ITEM(lines, k);
    if (!PyBytes_Check(item)) {
        PyErr_Format(PyExc_TypeError, "%s: lines[%zd] is %.100s, not bytes", caller, k,
                     Py_TYPE(item)->tp_name);
        return NULL;
    }
    return item;
}

static int
line_batch_hole(line_batch *b, Py_ssize_t k)
{
    PyObject *hole = Py_BuildValue("(nn)", k, (Py_ssize_t)b->out.n);
    if (hole == NULL) return -1;
    int failed = PyList_Append(b->holes, hole);
    Py_DECREF(hole);
    return failed;
}

/* The output as bytes, or NULL with an error set. */
static PyObject *
line_batch_output(line_batch *b)
{
    return PyBytes_FromStringAndSize(b->out.p ? b->out.p : "", (Py_ssize_t)b->out.n);
}

static int
put_quoted(growbuf *b, const unsigned char *s, Py_ssize_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    if (grow_reserve(b, 3 * (size_t)n) < 0) return -1; /* the worst case, then in place */
    char *o = b->p + b->n;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (quote_safe[c]) {
            *o++ = (char)c;
        } else {
            *o++ = '%';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        }
    }
    b->n = (size_t)(o - b->p);
    return 0;
}

static int
put_channel(growbuf *b, int64_t chan)
{
    if (chan < 0) return 0;
    char digits[24];
    int n = snprintf(digits, sizeof digits, "%lld ", (long long)chan);
    return grow_put(b, digits, (size_t)n);
}

static PyObject *
squid_reply(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "squid_reply(lines, channels, escaped, image, layout, "
                                         "mask, pieces, unknown) takes 8 arguments");
        return NULL;
    }
    PyObject *lines = args[0], *layout = args[4], *mask_obj = args[5], *pieces = args[6];
    if (!PyList_Check(lines) || !PyTuple_Check(pieces)) {
        PyErr_SetString(PyExc_TypeError, "squid_reply: lines must be a list of bytes and "
                                         "pieces a tuple");
        return NULL;
    }
    long channels = PyLong_AsLong(args[1]);
    if (channels == -1 && PyErr_Occurred()) return NULL;
    int escaped = PyObject_IsTrue(args[2]);
    if (escaped < 0) return NULL;
    int unknown = PyObject_IsTrue(args[7]);
    if (unknown < 0) return NULL;
    if (channels < 0 || channels > 2) {
        PyErr_SetString(PyExc_ValueError, "squid_reply: channels is 0, 1 or 2");
        return NULL;
    }
    Py_ssize_t n_cats = PyTuple_GET_SIZE(pieces);
    for (Py_ssize_t c = 0; c < n_cats; c++) {
        PyObject *entry = PyTuple_GET_ITEM(pieces, c);
        if (entry == Py_None) continue;
        int ok = PyTuple_Check(entry) && PyTuple_GET_SIZE(entry) >= 1;
        for (Py_ssize_t j = 0; ok && j < PyTuple_GET_SIZE(entry); j++) {
            PyObject *piece = PyTuple_GET_ITEM(entry, j);
            ok = PyUnicode_Check(piece) && PyUnicode_IS_ASCII(piece);
        }
        if (!ok) {
            PyErr_Format(PyExc_TypeError,
                         "squid_reply: pieces[%zd] must be None or a tuple of ASCII str", c);
            return NULL;
        }
    }
    line_batch b;
    PyObject *result = NULL;
    if (!line_batch_open(&b, args[3], layout, mask_obj)) goto done;
    Py_ssize_t blocked = 0, allowed = 0;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(lines); k++) {
        PyObject *item = line_batch_item(lines, k, "squid_reply");
        if (item == NULL) goto done;
        const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(item);
        Py_ssize_t n = PyBytes_GET_SIZE(item), u0, u1, len;
        while (n > 0 && s[n - 1] == '\r') n--; /* a CRLF line, as serve() strips it */
        int64_t chan, id = -2;
        const unsigned char *text;
        spans sp;
        if (scan_line(s, n, channels, escaped, &u0, &u1, &chan)) {
            id = match_url(&b.im, s + u0, u1 - u0, b.buf, b.rewritten, &text, &len, &sp);
        }
        PyObject *entry = NULL;
        int allow = id == -1 && !unknown;
        if (id >= 0) {
            const record rec = record_itself(&b.im, (uint64_t)id); /* no length needed */
            uint16_t category = rec.category;
            allow = (rec.flags & F_ALLOW) != 0;
            if (!allow && category < n_cats && PyTuple_GET_ITEM(pieces, category) != Py_None) {
                entry = PyTuple_GET_ITEM(pieces, category);
            }
        }
        if (allow) {
            if (put_channel(&b.out, chan) < 0 || grow_put(&b.out, "ERR\n", 4) < 0) goto nomem;
            allowed++;
        } else if (entry != NULL) {
            if (put_channel(&b.out, chan) < 0) goto nomem;
            for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(entry); j++) {
                PyObject *piece = PyTuple_GET_ITEM(entry, j);
                if (j > 0 && put_quoted(&b.out, s + u0, u1 - u0) < 0) goto nomem;
                if (grow_put(&b.out, PyUnicode_1BYTE_DATA(piece),
                             (size_t)PyUnicode_GET_LENGTH(piece)) < 0) {
                    goto nomem;
                }
            }
            blocked++;
        } else {
            if (line_batch_hole(&b, k) < 0) goto done;
        }
    }
    PyObject *bytes = line_batch_output(&b);
    if (bytes == NULL) goto done;
    result = Py_BuildValue("(OOnn)", bytes, b.holes, blocked, allowed);
    Py_DECREF(bytes);
    goto done;
nomem:
    PyErr_NoMemory();
done:
    line_batch_close(&b);
    return result;
}

/* ---------------------------------------------------------------------------------------
 * filter_reply: `urlsieve filter`'s text output for a read of input lines, in one call
 * (urlsieve/cli/filter.py; the reference is its per-line Python path, which the tests hold
 * this equal to). A line (one trailing CR dropped, as the reader does) of printable ASCII
 * whose URL is on the canonical fast path gets "action TAB category TAB source[:line]
 * TAB line LF" here ("none TAB - TAB -" without a rule), or nothing when its action is
 * not in `only` (bits: 1 block, 2 allow, 4 none). categories and sources: the image's,
 * as bytes, by id. Any other line is a hole, (line index, offset in the output), for
 * the caller. Returns (output: bytes, holes: list[tuple[int, int]]).
 */
static PyObject *
filter_reply(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "filter_reply(lines, image, layout, mask, categories, "
                                         "sources, only) takes 7 arguments");
        return NULL;
    }
    PyObject *lines = args[0], *layout = args[2], *mask_obj = args[3];
    PyObject *names[2] = {args[4], args[5]};
    if (!PyList_Check(lines)) {
        PyErr_SetString(PyExc_TypeError, "filter_reply: lines must be a list of bytes");
        return NULL;
    }
    for (int t = 0; t < 2; t++) {
        int ok = PyTuple_Check(names[t]);
        for (Py_ssize_t j = 0; ok && j < PyTuple_GET_SIZE(names[t]); j++) {
            ok = PyBytes_Check(PyTuple_GET_ITEM(names[t], j));
        }
        if (!ok) {
            PyErr_SetString(PyExc_TypeError,
                            "filter_reply: categories and sources must be tuples of bytes");
            return NULL;
        }
    }
    long only = PyLong_AsLong(args[6]);
    if (only == -1 && PyErr_Occurred()) return NULL;
    line_batch b;
    PyObject *result = NULL;
    if (!line_batch_open(&b, args[1], layout, mask_obj)) goto done;
    Py_ssize_t n_cats = PyTuple_GET_SIZE(names[0]), n_sources = PyTuple_GET_SIZE(names[1]);
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(lines); k++) {
        PyObject *item = line_batch_item(lines, k, "filter_reply");
        if (item == NULL) goto done;
        const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(item);
        Py_ssize_t n = PyBytes_GET_SIZE(item), len;
        if (n > 0 && s[n - 1] == '\r') n--;
        int plain = n > 0;
        for (Py_ssize_t j = 0; j < n && plain; j++) plain = s[j] >= 0x21 && s[j] <= 0x7e;
        const unsigned char *text;
        spans sp;
        int64_t id = plain ? match_url(&b.im, s, n, b.buf, b.rewritten, &text, &len, &sp) : -2;
        PyObject *category = NULL, *source = NULL;
        uint32_t line = 0;
        int allow = 0;
        if (id >= 0) {
            const record rec = record_itself(&b.im, (uint64_t)id); /* no length needed */
            uint32_t source_id = rec.source_id;
            uint16_t category_id = rec.category;
            line = rec.line;
            allow = (rec.flags & F_ALLOW) != 0;
            if (category_id < n_cats && source_id < n_sources) {
                category = PyTuple_GET_ITEM(names[0], category_id);
                source = PyTuple_GET_ITEM(names[1], source_id);
            } else {
                id = -2; /* not a rule of this image's tables: the reference says why */
            }
        }
        if (id == -2) {
            if (line_batch_hole(&b, k) < 0) goto done;
            continue;
        }
        if (!(only & (id < 0 ? 4 : allow ? 2 : 1))) continue;
        int failed;
        if (id < 0) {
            failed = grow_put(&b.out, "none\t-\t-\t", 9) < 0;
        } else { /* Rule.where: "-" without a source, "source" without a line */
            const char *where = PyBytes_AS_STRING(source);
            Py_ssize_t where_len = PyBytes_GET_SIZE(source);
            char number[16];
            int digits = 0;
            if (where_len == 0) {
                where = "-";
                where_len = 1;
            } else if (line) {
                digits = snprintf(number, sizeof number, ":%u", (unsigned)line);
            }
            failed = grow_put(&b.out, allow ? "allow\t" : "block\t", 6) < 0
                     || grow_put(&b.out, PyBytes_AS_STRING(category),
                                 (size_t)PyBytes_GET_SIZE(category)) < 0
                     || grow_put(&b.out, "\t", 1) < 0 || grow_put(&b.out, where, (size_t)where_len) < 0
                     || grow_put(&b.out, number, (size_t)digits) < 0
                     || grow_put(&b.out, "\t", 1) < 0;
        }
        if (failed || grow_put(&b.out, s, (size_t)n) < 0 || grow_put(&b.out, "\n", 1) < 0) {
            PyErr_NoMemory();
            goto done;
        }
    }
    PyObject *bytes = line_batch_output(&b);
    if (bytes == NULL) goto done;
    result = PyTuple_Pack(2, bytes, b.holes);
    Py_DECREF(bytes);
done:
    line_batch_close(&b);
    return result;
}

/* ---------------------------------------------------------------------------------------
 * The seen stores' batch fingerprints (urlsieve/fingerprint.py; the reference is
 * xxhash over canonicalize(url).encode("ascii"), which the tests hold this equal to).
 *
 * A list of URLs is fingerprinted in runs of at most HASH_RUN URLs and HASH_RUN_BYTES of
 * text: a run's text is copied with the GIL (the list is read only then: another thread
 * may change it between runs), then hashed without it while it is still in cache. URLs
 * off the canonical fast path are left to the caller, which fingerprints them in Python.
 */
typedef struct {
    const char *name; /* the caller, for errors */
    PyObject *urls;
    Py_ssize_t n;
    int allow_query, how; /* how: REWRITE_KEEP_PORT or 0 */
    const unsigned char **data; /* a URL's copied text; NULL: not a str, or too long */
    Py_ssize_t *lens;
    unsigned char *wide;  /* a str beyond ASCII */
    unsigned char *flags; /* 1: on the fast path, its fingerprint written */
    unsigned char *buf, *rewritten, *copy;
} url_runs;

static void
url_runs_close(url_runs *r)
{
    PyMem_Free(r->copy);
    PyMem_Free(r->wide);
    PyMem_Free(r->data);
    PyMem_Free(r->lens);
    PyMem_Free(r->flags);
    scratch_give(r->buf);
}

static int
url_runs_open(url_runs *r, const char *name, PyObject *urls, PyObject *allow_query,
              PyObject *keep_port)
{
    memset(r, 0, sizeof(*r));
    r->name = name;
    if (!PyList_Check(urls)) {
        PyErr_Format(PyExc_TypeError, "%s: urls must be a list", name);
        return -1;
    }
    int q = PyObject_IsTrue(allow_query), kp = q < 0 ? -1 : PyObject_IsTrue(keep_port);
    if (q < 0 || kp < 0) return -1;
    r->urls = urls;
    r->n = PyList_GET_SIZE(urls);
    r->allow_query = q;
    r->how = kp ? REWRITE_KEEP_PORT : 0;
    const size_t m = (size_t)(r->n ? r->n : 1);
    r->data = PyMem_Malloc(m * sizeof(*r->data));
    r->lens = PyMem_Malloc(m * sizeof(*r->lens));
    r->flags = PyMem_Malloc(m);
    r->wide = PyMem_Malloc(m);
    r->buf = scratch_take();
    r->rewritten = r->buf == NULL ? NULL : r->buf + MAX_URL + 16;
    r->copy = PyMem_Malloc(HASH_RUN_BYTES + MAX_URL);
    if (r->data == NULL || r->lens == NULL || r->flags == NULL || r->wide == NULL
        || r->buf == NULL || r->copy == NULL) {
        url_runs_close(r);
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* With the GIL: the text of the run from `run` copied; where it ends, or -1 with an
   exception when the list shrank. */
static Py_ssize_t
url_runs_copy(url_runs *r, Py_ssize_t run)
{
    if (PyList_GET_SIZE(r->urls) < r->n) {
        PyErr_Format(PyExc_RuntimeError, "%s: the list shrank during the call", r->name);
        return -1;
    }
    size_t used = 0;
    Py_ssize_t end;
    for (end = run; end < r->n && end - run < HASH_RUN && used < HASH_RUN_BYTES; end++) {
        PyObject *url = PyList_GET_ITEM(r->urls, end);
        if (end + PREFETCH < r->n) prefetch_str(PyList_GET_ITEM(r->urls, end + PREFETCH));
        r->wide[end] = 0;
        if (PyUnicode_Check(url) && PyUnicode_IS_ASCII(url)
            && PyUnicode_GET_LENGTH(url) <= MAX_URL) {
            r->lens[end] = PyUnicode_GET_LENGTH(url);
            memcpy(r->copy + used, PyUnicode_1BYTE_DATA(url), (size_t)r->lens[end]);
            r->data[end] = r->copy + used;
            used += (size_t)r->lens[end];
        } else if (PyUnicode_Check(url) && PyUnicode_GET_LENGTH(url) <= MAX_URL / 4) {
            /* the path and the query may hold it: the rewrite escapes those bytes */
            r->lens[end] = url_bytes(url, r->copy + used);
            r->data[end] = r->copy + used;
            used += (size_t)r->lens[end];
            r->wide[end] = 1;
        } else {
            r->data[end] = NULL;
            r->lens[end] = -1;
        }
    }
    return end;
}

/* Without the GIL: the fingerprint of URL k into o (one uint64 for bits 64; high, low for
   128) when it is on the fast path; flags[k] says whether it was. */
static inline int
url_runs_hash(url_runs *r, Py_ssize_t k, int bits, uint64_t *o)
{
    spans sp;
    const unsigned char *s;
    Py_ssize_t len;
    r->flags[k] = 0;
    if (r->data[k] == NULL
        || !scan_or_rewrite(r->data[k], r->lens[k], r->allow_query, r->rewritten, &s, &len, &sp,
                            (r->wide[k] ? REWRITE_HIGH : 0) | r->how)) {
        return 0;
    }
    const unsigned char *text = s;
    size_t tlen = (size_t)len;
    if (!sp.has_scheme || !sp.has_path) { /* the canonical form adds http:// or "/" */
        tlen = (size_t)write_canonical(r->buf, s, len, &sp);
        text = r->buf;
    }
    if (bits == 64) {
        o[0] = XXH3_64bits(text, tlen);
    } else {
        us_xxh128 h = XXH3_128bits(text, tlen);
        o[0] = h.high64;
        o[1] = h.low64;
    }
    return r->flags[k] = 1;
}

/* The positions of the URLs off the fast path (a new list). */
static PyObject *
url_runs_rest(const url_runs *r)
{
    PyObject *result = PyList_New(0);
    if (result == NULL) return NULL;
    for (Py_ssize_t k = 0; k < r->n; k++) {
        if (r->flags[k]) continue;
        PyObject *at = PyLong_FromSsize_t(k);
        if (at == NULL || PyList_Append(result, at) < 0) {
            Py_XDECREF(at);
            Py_DECREF(result);
            return NULL;
        }
        Py_DECREF(at);
    }
    return result;
}

/* canonical_hashes(urls, allow_query, bits, out, keep_port): for each URL on the canonical
 * fast path, xxh3-64 of its canonical form into out[k] (bits 64), or xxh3-128 as (high,
 * low) into out[2k], out[2k+1] (bits 128). Returns the positions of the other URLs. */
static PyObject *
canonical_hashes(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "canonical_hashes(urls, allow_query, bits, out, "
                                         "keep_port) takes 5 arguments");
        return NULL;
    }
    long bits = PyLong_AsLong(args[2]);
    if (bits == -1 && PyErr_Occurred()) return NULL;
    url_runs r;
    if (url_runs_open(&r, "canonical_hashes", args[0], args[1], args[4]) < 0) return NULL;
    Py_buffer out;
    if (PyObject_GetBuffer(args[3], &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        url_runs_close(&r);
        return NULL;
    }
    PyObject *result = NULL;
    const Py_ssize_t n = r.n, words = bits / 64;
    if ((bits != 64 && bits != 128) || out.len != n * words * 8
        || ((uintptr_t)out.buf & 7) != 0) {
        PyErr_SetString(PyExc_ValueError,
                        "canonical_hashes: bits is 64 or 128 and out holds n (64) or 2n (128) "
                        "uint64, aligned to 8 bytes");
        goto done;
    }
    uint64_t *o = out.buf;
    for (Py_ssize_t run = 0, end; run < n; run = end) {
        if ((end = url_runs_copy(&r, run)) < 0) goto done;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t k = run; k < end; k++) url_runs_hash(&r, k, (int)bits, o + words * k);
        Py_END_ALLOW_THREADS
    }
    result = url_runs_rest(&r);
done:
    url_runs_close(&r);
    PyBuffer_Release(&out);
    return result;
}

/* ---------------------------------------------------------------------------------------
 * bloom_urls(urls, allow_query, keep_port, bits, t, h, out, count): canonical_hashes'
 * 128-bit fingerprints of the URLs into h's rows and, in the same pass, their test
 * against one layer of the Bloom filter (bloom_test's and bloom_insert's; each block is
 * asked for as its fingerprint is made, and read once the run is hashed).
 *   count None: out[k] = the layer holds URL k.
 *   count given (the layer's count word): out[k] = the layer lacks URL k; then, when
 *     every URL is on the fast path, the batch is inserted as bloom_insert does it (out
 *     keeps the first of identical fingerprints, the count is raised, the bits set).
 * Returns (positions, flags): the positions of the URLs off the fast path, whose rows
 * and out the caller fills (when there are any, the layer is left as it was), and out as
 * a list of bools when there are none (else None).
 */
static PyObject *
bloom_urls(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "bloom_urls(urls, allow_query, keep_port, bits, t, h, "
                                         "out, count) takes 8 arguments");
        return NULL;
    }
    const int t = bloom_t(args[4]), insert = args[7] != Py_None;
    if (t < 0) return NULL;
    table_args a;
    if (get_table_args("bloom_urls", args[3], args[5], args[6], insert, 2, &a) < 0) return NULL;
    if (insert && get_count("bloom_urls", args[7], &a) < 0) {
        release_table_args(&a);
        return NULL;
    }
    url_runs r;
    if (url_runs_open(&r, "bloom_urls", args[0], args[1], args[2]) < 0) {
        release_table_args(&a);
        return NULL;
    }
    PyObject *result = NULL;
    if (a.rows.readonly || r.n != a.n) {
        PyErr_SetString(PyExc_ValueError,
                        "bloom_urls: h must be writable, and h and out one row a URL");
        goto done;
    }
    const uint64_t *bits = a.table.buf;
    const uint64_t blocks = (uint64_t)(a.table.len / 64);
    uint64_t *h = a.rows.buf;
    unsigned char *out = a.out.buf;
    Py_ssize_t rest = 0, fresh = 0;
    for (Py_ssize_t run = 0, end; run < r.n; run = end) {
        if ((end = url_runs_copy(&r, run)) < 0) goto done;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t k = run; k < end; k++) {
            if (url_runs_hash(&r, k, 128, h + 2 * k)) {
                PREFETCH_READ(bits + 8 * bloom_block(h[2 * k], blocks));
            } else {
                rest++;
            }
        }
        for (Py_ssize_t k = run; k < end; k++) {
            out[k] = 0;
            if (!r.flags[k]) continue;
            out[k] = (unsigned char)(bloom_covers(bits, blocks, t, h[2 * k], h[2 * k + 1])
                                     ^ insert);
            fresh += out[k];
        }
        Py_END_ALLOW_THREADS
    }
    if (insert && rest == 0 && bloom_commit(&a, t, fresh) < 0) goto done;
    PyObject *positions = url_runs_rest(&r), *flags = rest ? Py_NewRef(Py_None) : PyList_New(r.n);
    if (positions != NULL && flags != NULL) {
        for (Py_ssize_t k = 0; k < r.n && !rest; k++) {
            PyList_SET_ITEM(flags, k, Py_NewRef(out[k] ? Py_True : Py_False));
        }
        result = PyTuple_Pack(2, positions, flags);
    }
    Py_XDECREF(positions);
    Py_XDECREF(flags);
done:
    url_runs_close(&r);
    release_table_args(&a);
    return result;
}

/* ---------------------------------------------------------------------------------------
 * quote_all(text): text's bytes percent-encoded but A-Z a-z 0-9 _ . - ~, for ASCII text
 * (urlsieve/gateway/protocol.py's _quote_all is the reference; None for other text).
 */
static PyObject *
quote_all(PyObject *module, PyObject *arg)
{
    (void)module;
    if (!PyUnicode_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "quote_all: expected str, not %.100s", Py_TYPE(arg)->tp_name);
        return NULL;
    }
    if (!PyUnicode_IS_ASCII(arg)) Py_RETURN_NONE;
    const unsigned char *s = PyUnicode_1BYTE_DATA(arg);
    Py_ssize_t n = PyUnicode_GET_LENGTH(arg), extra = 0;
    for (Py_ssize_t i = 0; i < n; i++) extra += quote_safe[s[i]] ? 0 : 2;
    if (extra == 0) return Py_NewRef(arg);
    PyObject *out = PyUnicode_New(n + extra, 127);
    if (out == NULL) return NULL;
    unsigned char *o = PyUnicode_1BYTE_DATA(out);
    static const char hex[] = "0123456789ABCDEF";
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (quote_safe[c]) {
            *o++ = c;
        } else {
            *o++ = '%';
            *o++ = (unsigned char)hex[c >> 4];
            *o++ = (unsigned char)hex[c & 15];
        }
    }
    return out;
}

/* ---------------------------------------------------------------------------------------
 * Verdicts of a class of slots (urlsieve.match.base.Verdict: __slots__ action, canonical,
 * _rule, _rules), made as object.__new__ and four slot assignments make them: where each
 * field lives is read from the class's member descriptors, checked, and kept per class.
 */
typedef struct {
    PyTypeObject *type;
    Py_ssize_t action, canonical, rule, rules;
} verdict_slots;

/* The offset of slot `name` of `type` (a writable object slot inside the instance): 0 with
   a TypeError when it is none. */
static int
slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *offset)
{
    PyObject *descr = PyObject_GetAttrString((PyObject *)type, name);
    if (descr == NULL) {
        PyErr_Clear();
    } else {
        int ok = Py_IS_TYPE(descr, &PyMemberDescr_Type)
                 && PyType_IsSubtype(type, PyDescr_TYPE(descr));
        if (ok) {
            const PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
            ok = m->type == T_OBJECT_EX && !(m->flags & READONLY)
                 && m->offset >= (Py_ssize_t)sizeof(PyObject)
                 && m->offset <= type->tp_basicsize - (Py_ssize_t)sizeof(PyObject *);
            *offset = m->offset;
        }
        Py_DECREF(descr);
        if (ok) return 1;
    }
    PyErr_Format(PyExc_TypeError, "verdict type %.100s has no slot %s", type->tp_name, name);
    return 0;
}

/* Where `type` keeps a verdict's fields: 0 with a TypeError when it is not a class of the
   four slots (of fixed size, made by tp_alloc). The last class read is kept (with a
   reference, and its version tag: a class changed since is read again). */
static int
verdict_slots_of(PyObject *type_obj, verdict_slots *vs)
{
    static verdict_slots known = {NULL, 0, 0, 0, 0};
    static unsigned int known_tag = 0;
    if (!PyType_Check(type_obj)) {
        PyErr_SetString(PyExc_TypeError, "a verdict type must be a class");
        return 0;
    }
    PyTypeObject *type = (PyTypeObject *)type_obj;
    if (type == known.type && known_tag != 0 && type->tp_version_tag == known_tag
        && (type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)) {
        *vs = known;
        return 1;
    }
    if (type->tp_itemsize != 0 || type->tp_alloc == NULL
        || PyType_IsSubtype(type, &PyTuple_Type)) {
        PyErr_Format(PyExc_TypeError, "verdict type %.100s is not a class of slots",
                     type->tp_name);
        return 0;
    }
    verdict_slots got = {.type = type};
    if (!slot_offset(type, "action", &got.action) || !slot_offset(type, "canonical", &got.canonical)
        || !slot_offset(type, "_rule", &got.rule) || !slot_offset(type, "_rules", &got.rules))
        return 0;
    if (got.action == got.canonical || got.action == got.rule || got.action == got.rules
        || got.canonical == got.rule || got.canonical == got.rules || got.rule == got.rules) {
        PyErr_Format(PyExc_TypeError, "verdict type %.100s shares a slot between fields",
                     type->tp_name);
        return 0;
    }
    Py_INCREF(type);
    Py_XDECREF(known.type);
    known = got;
    known_tag = (type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) ? type->tp_version_tag : 0;
    *vs = got;
    return 1;
}

/* A verdict of the class vs describes, its fields set to new references to the arguments
   (borrowed; `rules` may be Py_None). Tracked by the collector, as tp_alloc leaves it. */
static PyObject *
slots_verdict(const verdict_slots *vs, PyObject *action, PyObject *rule, PyObject *rules,
              PyObject *form)
{
    PyObject *verdict = vs->type->tp_alloc(vs->type, 0); /* zeroed */
    if (verdict == NULL) return NULL;
    char *at = (char *)verdict;
    *(PyObject **)(at + vs->action) = Py_NewRef(action);
    *(PyObject **)(at + vs->canonical) = Py_NewRef(form);
    *(PyObject **)(at + vs->rule) = Py_NewRef(rule);
    *(PyObject **)(at + vs->rules) = Py_NewRef(rules);
    return verdict;
}

/* ---------------------------------------------------------------------------------------
 * snapshot_check: SnapshotMatcher.check_many in one call (its Python body is the
 * reference, which the tests hold this equal to): the lookups of snapshot_match's loop and
 * the verdicts together, with no list of ids or of canonical forms in between, and each
 * URL's string touched once. Per URL k of the list: verdict_type(action, rule, canonical
 * form) for a rule in the cache, (none, None, form) for no rule; None for a URL off the
 * fast path or not a str (k in `left`, for the caller to parse) and for a rule not in the
 * cache ((k, rule id, form) in `missing`, for the caller to build). Returns
 * (verdicts, missing, left).
 */
/* Whether a tuple holds no object the collector tracks but tuples of such objects (a
   verdict: two strings and a rule of strings, numbers and None), looked into one level. */
static int
atomic_items(PyObject *tuple)
{
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(tuple); j++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, j);
        if (!PyObject_IS_GC(item)) continue;
        if (!PyTuple_Check(item)) return 0;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(item); i++) {
            if (PyObject_IS_GC(PyTuple_GET_ITEM(item, i))) return 0;
        }
    }
    return 1;
}

/* verdict_type(action, rule, form) (borrowed references), as tuple.__new__ makes it, or
   as Verdict(action, rule, form) makes a verdict of a class of slots. */
static PyObject *
make_verdict(PyTypeObject *type, PyObject *action, PyObject *rule, PyObject *form)
{
    if (!PyType_IsSubtype(type, &PyTuple_Type)) { /* (verdict_type_ok read its slots) */
        verdict_slots vs;
        if (!verdict_slots_of((PyObject *)type, &vs)) return NULL;
        PyObject *made = slots_verdict(&vs, action, rule, Py_None, form);
        /* atomic as below: its rule a tuple of no container but tuples of such */
        if (made != NULL && !PyObject_IS_GC(action) && !PyObject_IS_GC(form)
            && (!PyObject_IS_GC(rule) || !PyObject_GC_IsTracked(rule)
                || (PyTuple_Check(rule) && atomic_items(rule))))
            PyObject_GC_UnTrack(made);
        return made;
    }
    PyObject *verdict = type->tp_alloc(type, 3);
    if (verdict == NULL) return NULL;
    PyTuple_SET_ITEM(verdict, 0, Py_NewRef(action));
    PyTuple_SET_ITEM(verdict, 1, Py_NewRef(rule));
    PyTuple_SET_ITEM(verdict, 2, Py_NewRef(form));
    /* It can be in no reference cycle: what CPython does for such a tuple, here for the
       subclass it skips, so that the collector is not run over every verdict. A rule
       snapshot_rules untracked is known atomic without a look at its fields. */
    int atomic = !PyObject_IS_GC(action) && !PyObject_IS_GC(form)
                 && (rule == Py_None || !PyObject_GC_IsTracked(rule));
    if (atomic || atomic_items(verdict)) PyObject_GC_UnTrack(verdict);
    return verdict;
}

/* Whether `type` can be snapshot_check's verdict type: a tuple type without fields of its
   own (a named tuple) or a class of a verdict's slots; 0 with a TypeError when not. */
static int
verdict_type_ok(PyObject *type)
{
    if (PyType_Check(type) && PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)
        && ((PyTypeObject *)type)->tp_basicsize == PyTuple_Type.tp_basicsize)
        return 1;
    verdict_slots vs;
    if (PyType_Check(type) && !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)
        && verdict_slots_of(type, &vs))
        return 1;
    PyErr_Clear();
    PyErr_SetString(PyExc_TypeError, "snapshot_check: verdict_type must be a tuple type "
                                     "without fields of its own, or a class of slots");
    return 0;
}

/* check_many's rule cache (urlsieve.match.snapshot.RuleCache, which is the reference of
   the probe): `ids`, int64 rule ids (-1: an empty slot), beside the list of their rules. */
typedef struct {
    const int64_t *ids;
    PyObject *rules;
    uint64_t slots; /* a power of two */
    int bits;
} rule_cache;

#define GOLDEN UINT64_C(0x9E3779B97F4A7C15)

/* The cached rule of `id` (borrowed), with *action its action: NULL when it is not cached,
   or with a TypeError set when what is cached is not a rule. Reads no Python object but
   the rule's. */
static PyObject *
cached_rule(const rule_cache *cache, int64_t id, Py_ssize_t action_at, PyObject **action)
{
    uint64_t at = ((uint64_t)id * GOLDEN) >> (64 - cache->bits);
    for (uint64_t tries = 0; tries < cache->slots; tries++) {
        int64_t held = cache->ids[at];
        if (held == -1) return NULL;
        if (held == id) {
            PyObject *rule = PyList_GET_ITEM(cache->rules, (Py_ssize_t)at);
            if (!PyTuple_Check(rule) || action_at < 0 || action_at >= PyTuple_GET_SIZE(rule)) {
                PyErr_SetString(PyExc_TypeError, "snapshot_check: a cached rule is not a tuple "
                                                 "with an action at action_at");
                return NULL;
            }
            *action = PyTuple_GET_ITEM(rule, action_at);
            return rule;
        }
        at = (at + 1) & (cache->slots - 1);
    }
    return NULL;
}

typedef struct {
    PyObject *out, *missing, *left, *none;
    rule_cache cache;
    PyTypeObject *type;
    Py_ssize_t action_at;
} verdict_sink;

static int
verdict_put(void *ctx, Py_ssize_t k, PyObject *url, int64_t id, const unsigned char *text,
            Py_ssize_t len, const spans *sp)
{
    verdict_sink *to = ctx;
    if (id == -2) {
        PyObject *at = PyLong_FromSsize_t(k);
        int failed = at == NULL || PyList_Append(to->left, at) < 0;
        Py_XDECREF(at);
        if (failed) return -1;
        PyList_SET_ITEM(to->out, k, Py_NewRef(Py_None));
        return 0;
    }
    PyObject *form = form_of(url, text, len, sp);
    if (form == NULL) return -1;
    PyObject *action = to->none, *rule = Py_None, *verdict = NULL;
    if (id >= 0) {
        rule = cached_rule(&to->cache, id, to->action_at, &action);
        if (rule == NULL) {
            if (PyErr_Occurred()) goto done;
            /* not built yet: the caller builds it */
            PyObject *entry = Py_BuildValue("(nLO)", k, (long long)id, form);
            int failed = entry == NULL || PyList_Append(to->missing, entry) < 0;
            Py_XDECREF(entry);
            Py_DECREF(form);
            if (failed) return -1;
            PyList_SET_ITEM(to->out, k, Py_NewRef(Py_None));
            return 0;
        }
    }
    verdict = make_verdict(to->type, action, rule, form);
    if (verdict != NULL) PyList_SET_ITEM(to->out, k, verdict);
done:
    Py_DECREF(form);
    return verdict == NULL ? -1 : 0;
}

static PyObject *
snapshot_check(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "snapshot_check(image, layout, urls, mask, cache_ids, "
                                         "cache_rules, verdict_type, none, action_at) takes 9 "
                                         "arguments");
        return NULL;
    }
    PyObject *layout = args[1], *urls = args[2], *mask_obj = args[3], *rules = args[5];
    if (!PyList_Check(urls) || !PyList_Check(rules)) {
        PyErr_SetString(PyExc_TypeError, "snapshot_check: urls and cache_rules must be lists");
        return NULL;
    }
    if (!verdict_type_ok(args[6])) return NULL;
    Py_ssize_t action_at = PyLong_AsSsize_t(args[8]);
    if (action_at == -1 && PyErr_Occurred()) return NULL;
    Py_buffer img, mask = {0}, ids = {0};
    if (PyObject_GetBuffer(args[0], &img, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[4], &ids, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&img);
        return NULL;
    }
    if (mask_obj != Py_None && PyObject_GetBuffer(mask_obj, &mask, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&img);
        PyBuffer_Release(&ids);
        return NULL;
    }
    PyObject *result = NULL;
    verdict_sink to = {.none = args[7], .type = (PyTypeObject *)args[6], .action_at = action_at};
    unsigned char *buf = NULL;
    /* No collection runs from here on: each verdict is untracked at once, yet every
       allocation counts towards one, which at 10,000s of verdicts a call would scan the
       young objects once per 700. And with no collection no Python code runs (no
       finalizer, weakref or gc callback; verdict_put drops no object but its own new
       ones, and looks nothing up through Python), so the lists' sizes read below hold for
       the whole call and `urls` is matched as it is, without a copy (a pass over every
       string): off before the first allocation, which could start a collection. */
    int collecting = PyGC_Disable();
    uint64_t slots = (uint64_t)PyList_GET_SIZE(rules);
    int bits = 0;
    while (bits < 40 && (UINT64_C(1) << bits) < slots) bits++;
    const char *format = ids.format ? ids.format : "B";
    int int64s = ids.itemsize == 8 && (strcmp(format, "q") == 0 || strcmp(format, "<q") == 0
                                       || strcmp(format, "=q") == 0
                                       || (strcmp(format, "l") == 0 && sizeof(long) == 8));
    if (slots < 2 || (UINT64_C(1) << bits) != slots || (uint64_t)ids.len != 8 * slots
        || !int64s || ((uintptr_t)ids.buf & 7) != 0) {
        PyErr_SetString(PyExc_ValueError, "snapshot_check: the cache is a power of two (2 at "
                                          "least) of aligned int64 ids and as many rules");
        goto done;
    }
    to.cache = (rule_cache){.ids = ids.buf, .rules = rules, .slots = slots, .bits = bits};
    image im;
    if (!image_open(&img, layout, &im)) goto done;
    im.mask = mask.obj ? mask.buf : NULL;
    im.mask_len = mask.obj ? mask.len : 0;
    to.out = PyList_New(PyList_GET_SIZE(urls));
    to.missing = PyList_New(0);
    to.left = PyList_New(0);
    buf = scratch_take();
    if (to.out == NULL || to.missing == NULL || to.left == NULL || buf == NULL) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    mask_rows one_mask = {.base = NULL, .row_at = NULL, .stride = 0};
    Py_ssize_t n_left = match_batch(&im, urls, &one_mask, buf, verdict_put, &to);
    if (n_left >= 0) result = PyTuple_Pack(3, to.out, to.missing, to.left);
done:
    if (collecting) PyGC_Enable();
    Py_XDECREF(to.out);
    Py_XDECREF(to.missing);
    Py_XDECREF(to.left);
    scratch_give(buf);
    PyBuffer_Release(&img);
    PyBuffer_Release(&ids);
    if (mask.obj) PyBuffer_Release(&mask);
    return result;
}

/* ---------------------------------------------------------------------------------------
 * snapshot_verdicts: check_many's verdicts without their rules (SnapshotMatcher.check_many;
 * its Python body, Verdict.deferred per hit, is the reference the tests hold this equal
 * to). snapshot_match's loop, and per URL k a verdict of `verdict_type` (a class of slots,
 * urlsieve.match.base.Verdict): (none, None) when no rule matches; for a rule, its action
 * (the record's allow flag: `allow` or `block`) and its id, with `rules`, the table that
 * builds the rule when the verdict's rule is first read. No rule object is made, so a hit
 * on any of a million rules costs what a miss costs, plus an int. None for a URL off the
 * fast path or not a str (k in `left`, for the caller to parse). Returns (verdicts, left).
 */
typedef struct {
    PyObject *out, *left, *none, *allow, *block, *rules;
    const image *im;
    verdict_slots slots;
} deferred_sink;

static int
deferred_put(void *ctx, Py_ssize_t k, PyObject *url, int64_t id, const unsigned char *text,
             Py_ssize_t len, const spans *sp)
{
    deferred_sink *to = ctx;
    if (id == -2) {
        PyObject *at = PyLong_FromSsize_t(k);
        int failed = at == NULL || PyList_Append(to->left, at) < 0;
        Py_XDECREF(at);
        if (failed) return -1;
        PyList_SET_ITEM(to->out, k, Py_NewRef(Py_None));
        return 0;
    }
    if (id >= 0 && (uint64_t)id >= to->im->n_rules) { /* (match_one checked it already) */
        PyErr_SetString(PyExc_SystemError, "snapshot_verdicts: a rule id beyond the image");
        return -1;
    }
    PyObject *form = form_of(url, text, len, sp);
    if (form == NULL) return -1;
    PyObject *action = to->none, *rule = Py_None, *rules = Py_None;
    if (id >= 0) {
        action = record_itself(to->im, (uint64_t)id).flags & F_ALLOW ? to->allow : to->block;
        rule = PyLong_FromLongLong(id);
        rules = to->rules;
        if (rule == NULL) {
            Py_DECREF(form);
            return -1;
        }
    }
    PyObject *verdict = slots_verdict(&to->slots, action, rule, rules, form);
    if (id >= 0) Py_DECREF(rule);
    Py_DECREF(form);
    if (verdict == NULL) return -1;
    /* In no reference cycle: two strings, an int or None, and the engine, which holds no
       verdict (its rule, read later, is a rule of strings and numbers): left to reference
       counts, as make_verdict leaves its verdicts, so that no collection walks them. */
    PyObject_GC_UnTrack(verdict);
    PyList_SET_ITEM(to->out, k, verdict);
    return 0;
}

static PyObject *
snapshot_verdicts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "snapshot_verdicts(image, layout, urls, mask, "
                                         "verdict_type, none, allow, block, rules) takes 9 "
                                         "arguments");
        return NULL;
    }
    PyObject *layout = args[1], *urls = args[2], *mask_obj = args[3];
    if (!PyList_Check(urls)) {
        PyErr_SetString(PyExc_TypeError, "snapshot_verdicts: urls must be a list");
        return NULL;
    }
    deferred_sink to = {.none = args[5], .allow = args[6], .block = args[7], .rules = args[8]};
    if (!verdict_slots_of(args[4], &to.slots)) return NULL;
    Py_buffer img, mask = {0};
    if (PyObject_GetBuffer(args[0], &img, PyBUF_SIMPLE) < 0) return NULL;
    if (mask_obj != Py_None && PyObject_GetBuffer(mask_obj, &mask, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&img);
        return NULL;
    }
    PyObject *result = NULL;
    unsigned char *buf = NULL;
    /* No collection from here on, as in snapshot_check (the same reasons: the verdicts are
       untracked as they are made, and with no collection no Python code runs, so `urls` is
       read as it is): off before the first allocation. */
    int collecting = PyGC_Disable();
    image im;
    if (!image_open(&img, layout, &im)) goto done;
    im.mask = mask.obj ? mask.buf : NULL;
    im.mask_len = mask.obj ? mask.len : 0;
    to.im = &im;
    to.out = PyList_New(PyList_GET_SIZE(urls));
    to.left = PyList_New(0);
    buf = scratch_take();
    if (to.out == NULL || to.left == NULL || buf == NULL) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    mask_rows one_mask = {.base = NULL, .row_at = NULL, .stride = 0};
    if (match_batch(&im, urls, &one_mask, buf, deferred_put, &to) >= 0)
        result = PyTuple_Pack(2, to.out, to.left);
done:
    if (collecting) PyGC_Enable();
    Py_XDECREF(to.out);
    Py_XDECREF(to.left);
    scratch_give(buf);
    PyBuffer_Release(&img);
    if (mask.obj) PyBuffer_Release(&mask);
    return result;
}

/* ---------------------------------------------------------------------------------------
 * policy_decide: PolicyEngine.decide_many in one call (urlsieve/policy/engine.py; the
 * reference is decide_many_py, request by request, which the tests hold this equal to).
 * Per request k: its client's plan (who_index[whos[k]], else index_of(whos[k]), a Python
 * call for a client not seen this minute), the lookup with the plan's mask row, then
 * the walk down its pass list (PolicyEngine._finish): the entry of the rule's category;
 * while a rule-backed entry lies before it, a lookup restricted to those; then the
 * checks in front of the entry found (all, none: always; in-addr: the host is an
 * address). The plans' tables (PolicyEngine._tables, int64s): per plan at plan_at[p]:
 * size, mask row offset, category count (= stride), check count; per category id its
 * entry (size: none); per entry + 1 the offset of the mask before it (-1: none); per
 * check (entry, kind). A table that does not fit is not read: its requests are left.
 *
 * Out: decisions[k] = shared[p][found] when the walk found no rule and that decision is
 * shared (not None) and, when the plan rewrites (needles[p] not None), the URL holds
 * none of needles[p] (bytes, lower-case, compared ignoring case; an empty tuple: every
 * URL may be rewritten); else None and (k, p, found, best) in `rest` for the caller, found
 * -2 when the URL is off the fast path (or its plan is not in the tables) and -3 when an
 * expression list is checked in front of the entry found (best: the lookup's rule).
 * Returns (decisions, rest).
 */
enum { CHECK_ALL = 0, CHECK_NONE = 1, CHECK_IN_ADDR = 2, CHECK_EXPR = 3 };
#define POLICY_OFF_FAST_PATH (-2)
#define POLICY_EXPRESSIONS (-3)

typedef struct {
    const int64_t *table, *plan_at, *plans;
    Py_ssize_t n_table, n_plans;
    const unsigned char *masks;
    Py_ssize_t stride;
    PyObject *shared, *needles, *out, *rest;
    image *im;
    unsigned char *buf;
} policy_sink;

/* Whether s[0:n] holds needle[0:m] (lower-case), ignoring ASCII case: n * m steps at
   most (the caller keeps needles short). */
static int
holds_folded(const unsigned char *s, Py_ssize_t n, const unsigned char *needle, Py_ssize_t m)
{
    for (Py_ssize_t i = 0; i + m <= n; i++) {
        Py_ssize_t j = 0;
        while (j < m) {
            unsigned char c = s[i + j];
            if ((c >= 'A' && c <= 'Z' ? c + 32 : c) != needle[j]) break;
            j++;
        }
        if (j == m) return 1;
    }
    return 0;
}

/* Whether the plan's rewrite may change the URL s[0:n] (see policy_decide). */
static int
may_rewrite(PyObject *needles, const unsigned char *s, Py_ssize_t n)
{
    if (needles == Py_None) return 0;
    if (PyTuple_GET_SIZE(needles) == 0) return 1;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(needles); j++) {
        PyObject *needle = PyTuple_GET_ITEM(needles, j);
        if (holds_folded(s, n, (const unsigned char *)PyBytes_AS_STRING(needle),
                         PyBytes_GET_SIZE(needle)))
            return 1;
    }
    return 0;
}

/* Whether plan p's block lies inside the table, with every value in range. */
static int
plan_fits(const policy_sink *ps, Py_ssize_t masks_len, Py_ssize_t p)
{
    int64_t at = ps->plan_at[p];
    if (at < 0 || at > ps->n_table - 4) return 0;
    const int64_t *b = ps->table + at;
    int64_t size = b[0], row = b[1], n_cat = b[2], n_checks = b[3];
    int64_t room = ps->n_table - at - 4;
    if (size < 0 || size > room || n_cat != ps->stride || n_cat > room || n_checks < 0
        || n_checks > room || n_cat + size + 1 + 2 * n_checks > room)
        return 0;
    if (row < 0 || row > masks_len - ps->stride) return 0;
    const int64_t *position = b + 4, *before = position + n_cat, *checks = before + size + 1;
    for (int64_t c = 0; c < n_cat; c++)
        if (position[c] < 0 || position[c] > size) return 0;
    for (int64_t e = 0; e <= size; e++)
        if (before[e] < -1 || before[e] > masks_len - ps->stride) return 0;
    for (int64_t j = 0; j < n_checks; j++)
        if (checks[2 * j] < 0 || checks[2 * j] >= size || checks[2 * j + 1] < CHECK_ALL
            || checks[2 * j + 1] > CHECK_EXPR)
            return 0;
    PyObject *decisions = PyList_GET_ITEM(ps->shared, p);
    if (!PyList_Check(decisions) || PyList_GET_SIZE(decisions) != size + 1) return 0;
    PyObject *needles = PyList_GET_ITEM(ps->needles, p);
    if (needles == Py_None) return 1;
    if (!PyTuple_Check(needles)) return 0;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(needles); j++) {
        PyObject *needle = PyTuple_GET_ITEM(needles, j);
        if (!PyBytes_Check(needle) || PyBytes_GET_SIZE(needle) < 1
            || PyBytes_GET_SIZE(needle) > 64)
            return 0;
    }
    return 1;
}

static int
policy_put(void *ctx, Py_ssize_t k, PyObject *url, int64_t id, const unsigned char *text,
           Py_ssize_t len, const spans *sp)
{
    policy_sink *ps = ctx;
    int64_t p = ps->plans[k], found, best = -1;
    const int64_t *b = NULL;
    if (id == -2 || p < 0) {
        found = POLICY_OFF_FAST_PATH;
        p = p < 0 ? -p - 1 : p; /* (the plan index, kept for the caller) */
    } else {
        b = ps->table + ps->plan_at[p];
        int64_t size = b[0], n_cat = b[2], n_checks = b[3];
        const int64_t *position = b + 4, *before = position + n_cat, *checks = before + size + 1;
        found = size;
        int64_t first = id;
        /* the entry of the rule's category; a rule-backed entry before it is looked for
           again with their mask (each round moves found down: at most size rounds) */
        while (id >= 0 && (uint64_t)id < ps->im->n_rules) {
            uint16_t category = record_itself(ps->im, (uint64_t)id).category;
            int64_t at = category < n_cat ? position[category] : size;
            if (at >= found) break;
            found = at;
            best = id;
            if (before[at] < 0) break;
            ps->im->mask = ps->masks + before[at];
            ps->im->mask_len = ps->stride;
            spans again = *sp;
            id = match_one(ps->im, text, len, &again, ps->buf);
        }
        for (int64_t j = 0; j < n_checks; j++) {
            int64_t at = checks[2 * j], kind = checks[2 * j + 1];
            if (at >= found) break;
            if (kind == CHECK_EXPR) { /* a regular expression: the caller's */
                found = POLICY_EXPRESSIONS;
                best = first;
                break;
            }
            if (kind == CHECK_IN_ADDR) {
                const unsigned char *host = text + sp->host_start;
                if (!sp->is_ip && !(sp->host_end > sp->host_start && host[0] == '['))
                    continue;
            }
            found = at;
            best = -1;
            break;
        }
    }
    if (found >= 0 && best < 0) {
        PyObject *shared = PyList_GET_ITEM(PyList_GET_ITEM(ps->shared, p), found);
        if (shared != Py_None
            && !may_rewrite(PyList_GET_ITEM(ps->needles, p), PyUnicode_1BYTE_DATA(url),
                            PyUnicode_GET_LENGTH(url))) {
            PyList_SET_ITEM(ps->out, k, Py_NewRef(shared));
            return 0;
        }
    }
    PyList_SET_ITEM(ps->out, k, Py_NewRef(Py_None));
    PyObject *left = Py_BuildValue("(nLLL)", k, (long long)p, (long long)found, (long long)best);
    int failed = left == NULL || PyList_Append(ps->rest, left) < 0;
    Py_XDECREF(left);
    return failed ? -1 : 0;
}

static PyObject *
policy_decide(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError, "policy_decide(image, layout, urls, whos, who_index, "
                                         "index_of, table, plan_at, masks, stride, shared, "
                                         "needles) takes 12 arguments");
        return NULL;
    }
    PyObject *urls = args[2], *whos = args[3], *who_index = args[4], *index_of = args[5];
    PyObject *shared = args[10], *needles = args[11];
    if (!PyList_Check(urls) || !PyList_Check(whos) || !PyDict_Check(who_index)
        || !PyCallable_Check(index_of) || !PyList_Check(shared) || !PyList_Check(needles)) {
        PyErr_SetString(PyExc_TypeError, "policy_decide: urls and whos lists, who_index a "
                                         "dict, index_of a callable, shared and needles lists");
        return NULL;
    }
    if (PyList_GET_SIZE(urls) != PyList_GET_SIZE(whos)) {
        PyErr_SetString(PyExc_ValueError, "policy_decide: as many whos as urls");
        return NULL;
    }
    Py_ssize_t stride = PyLong_AsSsize_t(args[9]);
    if (stride == -1 && PyErr_Occurred()) return NULL;
    Py_buffer img, table = {0}, plan_at = {0}, masks = {0};
    if (PyObject_GetBuffer(args[0], &img, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = NULL, *refs = NULL, *people = NULL;
    policy_sink ps = {.shared = shared, .needles = needles, .stride = stride};
    int64_t *plans = NULL, *row_at = NULL;
    if (PyObject_GetBuffer(args[6], &table, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0
        || PyObject_GetBuffer(args[7], &plan_at, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0
        || PyObject_GetBuffer(args[8], &masks, PyBUF_SIMPLE) < 0)
        goto done;
    for (Py_buffer *v = &table; v; v = v == &table ? &plan_at : NULL) {
        const char *f = v->format ? v->format : "B";
        if (v->itemsize != 8 || ((uintptr_t)v->buf & 7) != 0
            || !(strcmp(f, "q") == 0 || strcmp(f, "<q") == 0 || strcmp(f, "=q") == 0
                 || (strcmp(f, "l") == 0 && sizeof(long) == 8))) {
            PyErr_SetString(PyExc_ValueError,
                            "policy_decide: table and plan_at must be aligned int64s");
            goto done;
        }
    }
    if (stride < 0 || PyList_GET_SIZE(shared) != plan_at.len / 8
        || PyList_GET_SIZE(needles) != plan_at.len / 8) {
        PyErr_SetString(PyExc_ValueError,
                        "policy_decide: a stride >= 0, and a shared list and needles per plan");
        goto done;
    }
    image im;
    if (!image_open(&img, args[1], &im)) goto done;
    ps.table = table.buf;
    ps.n_table = table.len / 8;
    ps.plan_at = plan_at.buf;
    ps.n_plans = plan_at.len / 8;
    ps.masks = masks.buf;
    ps.im = &im;
    /* The plans that fit (1), do not (0), not looked at yet (-1). */
    signed char *fits = NULL;
    /* Held copies: index_of runs Python code, which may change the caller's lists. */
    refs = held_strings(urls);
    people = refs == NULL ? NULL : PyList_GetSlice(whos, 0, PyList_GET_SIZE(whos));
    Py_ssize_t n = refs == NULL ? 0 : PyList_GET_SIZE(refs);
    if (people == NULL || PyList_GET_SIZE(people) != n) goto done;
    plans = PyMem_Malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    row_at = PyMem_Malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    fits = PyMem_Malloc((size_t)(ps.n_plans ? ps.n_plans : 1));
    if (plans == NULL || row_at == NULL || fits == NULL) {
        PyMem_Free(fits);
        PyErr_NoMemory();
        goto done;
    }
    memset(fits, -1, (size_t)ps.n_plans);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *who = PyList_GET_ITEM(people, k);
        PyObject *index = PyDict_GetItemWithError(who_index, who); /* borrowed */
        PyObject *owned = NULL;
        if (index == NULL) {
            if (PyErr_Occurred()) break;
            index = owned = PyObject_CallOneArg(index_of, who);
            if (index == NULL) break;
        }
        Py_ssize_t p = PyLong_AsSsize_t(index);
        Py_XDECREF(owned);
        if (p == -1 && PyErr_Occurred()) break;
        if (p < 0) {
            PyErr_SetString(PyExc_ValueError, "policy_decide: a plan index below 0");
            break;
        }
        plans[k] = p;
    }
    ps.plans = plans;
    if (!PyErr_Occurred()) {
        ps.out = PyList_New(n);
        ps.rest = PyList_New(0);
        ps.buf = scratch_take();
        if ((ps.out == NULL || ps.rest == NULL || ps.buf == NULL) && !PyErr_Occurred())
            PyErr_NoMemory();
    }
    if (PyErr_Occurred()) {
        PyMem_Free(fits);
        goto done;
    }
    /* No collection from here until the batch is done, and so no Python code (index_of
       ran above and may have changed the caller's lists): `shared` and `needles` are
       checked now, and read by the sink as checked. */
    int collecting = PyGC_Disable();
    int lists_ok = PyList_GET_SIZE(shared) == ps.n_plans && PyList_GET_SIZE(needles) == ps.n_plans
                   && masks.len >= stride;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t p = plans[k];
        if (lists_ok && p < ps.n_plans && fits[p] < 0)
            fits[p] = (signed char)plan_fits(&ps, masks.len, (Py_ssize_t)p);
        if (lists_ok && p < ps.n_plans && fits[p]) {
            row_at[k] = ps.table[ps.plan_at[p] + 1];
        } else { /* not in the tables: left to the caller, with its index */
            plans[k] = -p - 1;
            row_at[k] = 0;
        }
    }
    PyMem_Free(fits);
    /* (with no row at all, every request is left to the caller: matched with no mask) */
    mask_rows rows = {.base = masks.buf, .row_at = lists_ok ? row_at : NULL, .stride = stride};
    im.mask = NULL;
    im.mask_len = 0;
    Py_ssize_t matched = match_batch(&im, refs, &rows, ps.buf, policy_put, &ps);
    if (collecting) PyGC_Enable();
    if (matched >= 0) result = PyTuple_Pack(2, ps.out, ps.rest);
done:
    Py_XDECREF(ps.out);
    Py_XDECREF(ps.rest);
    Py_XDECREF(refs);
    Py_XDECREF(people);
    scratch_give(ps.buf);
    PyMem_Free(plans);
    PyMem_Free(row_at);
    PyBuffer_Release(&img);
    if (table.obj) PyBuffer_Release(&table);
    if (plan_at.obj) PyBuffer_Release(&plan_at);
    if (masks.obj) PyBuffer_Release(&masks);
    return result;
}

/* ---------------------------------------------------------------------------------------
 * compile_lines: plain list lines straight into the snapshot builder's arrays.
 *
 * The reference is the per-line path (urlsieve/rules/readers.py: plain_line, and the
 * squidGuard domains/urls parsers in rules/load.py, into SnapshotBuilder.add). A line
 * is taken here only when that path would make of it a rule whose every field is
 * known without further work: a canonical host name with a dot and no path, or (not
 * in a domains file) such a host and a canonical lower-case path with no query, no
 * anchor and, in a urls file, no leading www/web/ftp label. Empty lines and "#" lines
 * are counted as comments. Any other line stops the run: the caller reads it the slow
 * way and calls again after it, so rules keep their reading order.
 */
enum { LIST_PLAIN = 0, LIST_DOMAINS = 1, LIST_URLS = 2 };
#define MAX_LIST_LINE 65536
#define F_ALLOW 1
#define F_PATTERN_HOST 16
#define F_PATTERN_HOST_PATH 32

/* "www." / "web2." / "ftp." at the start, any case: squidGuard drops it from urls lines. */
static int
www_label(const unsigned char *s, Py_ssize_t n)
{
    if (n < 4) return 0;
    char a = (char)(s[0] | 0x20), b = (char)(s[1] | 0x20), c = (char)(s[2] | 0x20);
    if (!((a == 'w' && b == 'w' && c == 'w') || (a == 'w' && b == 'e' && c == 'b')
          || (a == 'f' && b == 't' && c == 'p')))
        return 0;
    Py_ssize_t i = 3;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    return i < n && s[i] == '.';
}

static PyObject *
compile_lines(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError,
                        "compile_lines(text, pos, mode, max_lines, rule_id, string_offset, "
                        "category_id, allow) takes 8 arguments");
        return NULL;
    }
    PyObject *text = args[0];
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "compile_lines: text must be a str");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    long mode = PyLong_AsLong(args[2]);
    Py_ssize_t max_lines = PyLong_AsSsize_t(args[3]);
    unsigned long long rule_id = PyLong_AsUnsignedLongLong(args[4]);
    unsigned long long string_offset = PyLong_AsUnsignedLongLong(args[5]);
    long category = PyLong_AsLong(args[6]);
    if (PyErr_Occurred()) return NULL;
    int allow = PyObject_IsTrue(args[7]);
    if (allow < 0) return NULL;
    if (mode < LIST_PLAIN || mode > LIST_URLS || category < 0 || category > 0xFFFF
        || max_lines < 1 || rule_id > 0xFFFFFFFFull) {
        PyErr_SetString(PyExc_ValueError, "compile_lines: argument out of range");
        return NULL;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    /* Only one-byte text (ASCII or Latin-1): a character past U+00FF is never on a fast
       line, and a text holding one is read line by line. */
    if (PyUnicode_KIND(text) != PyUnicode_1BYTE_KIND || pos < 0 || pos >= n) Py_RETURN_NONE;
    const unsigned char *s = PyUnicode_1BYTE_DATA(text);

    growbuf strings = {0}, offsets = {0}, lengths = {0}, lines = {0}, flags = {0}, dedup = {0},
            seen = {0}, expr_hash = {0}, expr_rule = {0}, host_hash = {0}, host_bits = {0};
    unsigned char *key = PyMem_Malloc(MAX_LIST_LINE + 8);
    if (key == NULL) return PyErr_NoMemory();
    Py_ssize_t taken = 0, comments = 0, rules = 0;
    uint64_t depths = 0;
    PyObject *result = NULL;
    int failed = 0;

    Py_BEGIN_ALLOW_THREADS
    while (pos < n && taken < max_lines) {
        const unsigned char *nl = memchr(s + pos, '\n', (size_t)(n - pos));
        Py_ssize_t end = nl ? nl - s : n, len = end - pos;
        const unsigned char *line = s + pos;
        while (len > 0 && line[len - 1] == '\r') len--;
        if (len == 0 || line[0] == '#') {
            comments++;
        } else {
            spans sp;
            if (len > MAX_LIST_LINE || line[len - 1] == '|'
                /* squidGuard drops a leading '-' of a domains/urls line: the slow path */
                || (mode != LIST_PLAIN && line[0] == '-')
                || (mode == LIST_URLS && www_label(line, len))
                || !scan_canonical(line, len, 0, &sp) || sp.has_scheme || sp.is_ip
                || (mode == LIST_DOMAINS && sp.has_path))
                break;
            Py_ssize_t n_host = sp.host_end, n_path = sp.has_path ? sp.path_end - n_host : 1;
            int dots = 0, slashes = 0, upper = 0;
            int plain = 1; /* a rule's host: [a-z0-9_.-] ("=" and "*" are rule syntax) */
            for (Py_ssize_t i = 0; i < n_host; i++) {
                dots += line[i] == '.';
                plain &= (cls[line[i]] & HOST) != 0;
            }
            if (!plain) break;
            if (dots == 0) break; /* one label: maybe a top-level domain, the slow path says */
            for (Py_ssize_t i = n_host; i < sp.path_end; i++) {
                slashes += line[i] == '/';
                upper |= line[i] >= 'A' && line[i] <= 'Z';
            }
            if (upper) break; /* rule paths are lower-cased: the pattern is kept as written */
            if (!sp.has_path) slashes = 1;
            /* host + path, the rule's strings and its first lookup expression */
            memcpy(key, line, (size_t)n_host);
            if (sp.has_path) memcpy(key + n_host, line + n_host, (size_t)n_path);
            else key[n_host] = '/';
            size_t base = (size_t)(n_host + n_path);
            uint64_t offset = string_offset + strings.n;
            uint32_t lens[3] = {0, (uint32_t)n_host, (uint32_t)n_path};
            uint16_t flag = (sp.has_path ? F_PATTERN_HOST_PATH : F_PATTERN_HOST) | (allow ? F_ALLOW : 0);
            uint32_t id = (uint32_t)(rule_id + (uint64_t)rules);
            /* the expressions: the path, and below it unless it ends with "/" */
            int below = key[base - 1] != '/';
            uint64_t eh[2], hb[2];
            eh[0] = h64(key, base);
            hb[0] = 1ull << (slashes < DEEP_BIT ? slashes : DEEP_BIT);
            if (below) {
                key[base] = '/';
                eh[1] = h64(key, base + 1);
                hb[1] = 1ull << (slashes + 1 < DEEP_BIT ? slashes + 1 : DEEP_BIT);
            }
            uint64_t hh = h64(key, (size_t)n_host);
            /* what the rule matches (shape 0: open host, open path, no query) */
            key[base] = 0;
            key[base + 1] = (unsigned char)(n_path & 0xFF);
            key[base + 2] = (unsigned char)(n_host & 0xFF);
            uint64_t sk = h64(key, base + 3);
            key[base + 3] = (unsigned char)(category & 0xFF);
            key[base + 4] = (unsigned char)(category >> 8);
            uint64_t dk = h64(key, base + 5);
            uint32_t line_at = (uint32_t)taken;
            int d = dots + 1 < 63 ? dots + 1 : 63;
            depths |= 1ull << d;
            if (grow_put(&strings, line, (size_t)n_host) < 0
                || grow_put(&strings, sp.has_path ? line + n_host : (const unsigned char *)"/",
                            (size_t)n_path) < 0
                || grow_put(&offsets, &offset, 8) < 0 || grow_put(&lengths, lens, 12) < 0
                || grow_put(&lines, &line_at, 4) < 0 || grow_put(&flags, &flag, 2) < 0
                || grow_put(&dedup, &dk, 8) < 0 || grow_put(&seen, &sk, 8) < 0) {
                failed = 1;
                break;
            }
            for (int e = 0; e <= below; e++) {
                if (grow_put(&expr_hash, &eh[e], 8) < 0 || grow_put(&expr_rule, &id, 4) < 0
                    || grow_put(&host_hash, &hh, 8) < 0 || grow_put(&host_bits, &hb[e], 8) < 0) {
                    failed = 1;
                    break;
                }
            }
            if (failed) break;
            rules++;
        }
        taken++;
        pos = end + 1;
    }
    Py_END_ALLOW_THREADS

    if (failed) {
        PyErr_NoMemory();
    } else if (taken > 0) {
#define BUF(b) ((b).p ? (b).p : ""), (Py_ssize_t)(b).n
        result = Py_BuildValue("nnnny#y#y#y#y#y#y#y#y#y#y#K", pos, taken, comments, rules,
                               BUF(strings), BUF(offsets), BUF(lengths), BUF(lines), BUF(flags),
                               BUF(dedup), BUF(seen), BUF(expr_hash), BUF(expr_rule),
                               BUF(host_hash), BUF(host_bits), (unsigned long long)depths);
#undef BUF
    } else {
        result = Py_NewRef(Py_None);
    }
    growbuf *all[] = {&strings, &offsets,   &lengths,  &lines,     &flags,    &dedup,
                      &seen,    &expr_hash, &expr_rule, &host_hash, &host_bits};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) PyMem_Free(all[k]->p);
    PyMem_Free(key);
    return result;
}


/* ---------------------------------------------------------------------------------------
 * table_place(keys, values, table): the open-addressing table of match/snapshot.py's
 * _table (its reference), placed in the same rounds: in each round every key still
 * homeless tries its current slot, and in input order the first to find it free takes
 * it; the others move one slot on. The same bytes as the reference, in one pass per
 * round instead of a sort.
 */
static PyObject *
table_place(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "table_place(keys, values, table) takes 3 arguments");
        return NULL;
    }
    Py_buffer kb, vb, tb;
    if (PyObject_GetBuffer(args[0], &kb, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (PyObject_GetBuffer(args[1], &vb, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&kb);
        return NULL;
    }
    if (PyObject_GetBuffer(args[2], &tb, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&kb);
        PyBuffer_Release(&vb);
        return NULL;
    }
    Py_ssize_t n = kb.len / 8, slots = tb.len / SLOT;
    PyObject *result = NULL;
    int64_t *pending = NULL;
    int64_t *position = NULL;
    unsigned char *occupied = NULL;
    if (kb.len % 8 || vb.len != n * 4 || tb.len % SLOT || slots < 1
        || (uint64_t)slots > (UINT64_C(1) << 32) || n > slots) {
        PyErr_SetString(PyExc_ValueError,
                        "table_place: keys hold n uint64, values n uint32, the table 12-byte "
                        "slots (at least n, at most 2**32)");
        goto done;
    }
    pending = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *pending);
    position = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *position);
    occupied = PyMem_Calloc((size_t)slots, 1);
    if (pending == NULL || position == NULL || occupied == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const uint64_t *keys = kb.buf;
    const uint32_t *values = vb.buf;
    unsigned char *table = tb.buf;
    Py_BEGIN_ALLOW_THREADS
    memset(table, 0, (size_t)tb.len);
    for (Py_ssize_t k = 0; k < n; k++) {
        pending[k] = k;
        position[k] = (int64_t)slot_home(keys[k], (uint64_t)slots);
    }
    Py_ssize_t left = n;
    while (left > 0) {
        Py_ssize_t kept = 0;
        for (Py_ssize_t j = 0; j < left; j++) {
            int64_t k = pending[j], at = position[k];
            if (!occupied[at]) {
                occupied[at] = 1;
                memcpy(table + SLOT * at, &keys[k], 8);
                memcpy(table + SLOT * at + 8, &values[k], 4);
            } else {
                position[k] = at + 1 == slots ? 0 : at + 1;
                pending[kept++] = k;
            }
        }
        left = kept;
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(pending);
    PyMem_Free(position);
    PyMem_Free(occupied);
    PyBuffer_Release(&kb);
    PyBuffer_Release(&vb);
    PyBuffer_Release(&tb);
    return result;
}

/* ---------------------------------------------------------------------------------------
 * snapshot_rules: the Rule objects of rule ids, read from the image in one call
 * (urlsieve/match/snapshot.py; SnapshotMatcher.rule is the reference, which the tests
 * hold this equal to). A rule whose strings are not all ASCII, or whose record points
 * outside the image or its name tables, gets None: the caller builds it (or raises) the
 * reference's way. categories and sources: the image's str tables; allow, block: the
 * action strings; rule_type: Rule (a tuple type of 12 fields, filled in its order).
 */
static PyObject *
ascii_str(const unsigned char *s, uint64_t n)
{
    PyObject *out = PyUnicode_New((Py_ssize_t)n, 127);
    if (out != NULL) memcpy(PyUnicode_1BYTE_DATA(out), s, (size_t)n);
    return out;
}

static PyObject *
snapshot_rules(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "snapshot_rules(image, layout, ids, categories, "
                                         "sources, rule_type, allow, block) takes 8 arguments");
        return NULL;
    }
    PyObject *ids = args[2], *categories = args[3], *sources = args[4];
    PyTypeObject *type = (PyTypeObject *)args[5];
    if (!PyList_Check(ids) || !PyTuple_Check(categories) || !PyTuple_Check(sources)
        || !PyType_Check(args[5]) || !PyType_IsSubtype(type, &PyTuple_Type)
        || type->tp_basicsize != PyTuple_Type.tp_basicsize || !PyUnicode_Check(args[6])
        || !PyUnicode_Check(args[7])) {
        PyErr_SetString(PyExc_TypeError, "snapshot_rules: ids a list, categories and sources "
                                         "tuples, rule_type a tuple type, allow and block str");
        return NULL;
    }
    Py_buffer img;
    if (PyObject_GetBuffer(args[0], &img, PyBUF_SIMPLE) < 0) return NULL;
    image im;
    PyObject *out = NULL;
    if (!image_open(&img, args[1], &im)) goto done;
    Py_ssize_t n = PyList_GET_SIZE(ids);
    out = PyList_New(n);
    if (out == NULL) goto done;
    for (Py_ssize_t k = 0; k < n; k++) PyList_SET_ITEM(out, k, Py_NewRef(Py_None));
    for (Py_ssize_t k = 0; k < n; k++) {
        if (k >= PyList_GET_SIZE(ids)) break; /* an id's __index__ changed the list */
        long long id = PyLong_AsLongLong(PyList_GET_ITEM(ids, k));
        if (id == -1 && PyErr_Occurred()) goto fail;
        if (id < 0 || (uint64_t)id >= im.n_rules) continue;
        record rec;
        if (!read_record(&im, (uint64_t)id, &rec)) continue;
        uint64_t off = rec.off, n_pat = rec.n_pat, n_host = rec.n_host, n_path = rec.n_path;
        int32_t n_query = rec.n_query;
        uint32_t source_id = rec.source_id, line = rec.line;
        uint16_t category_id = rec.category, flags = rec.flags;
        uint64_t total = n_pat + n_host + n_path + (n_query > 0 ? (uint64_t)n_query : 0);
        if (off > im.strings_len || total > im.strings_len - off
            || category_id >= PyTuple_GET_SIZE(categories)
            || source_id >= (uint64_t)PyTuple_GET_SIZE(sources)) {
            continue;
        }
        const unsigned char *st = im.strings + off;
        int ascii = 1;
        for (uint64_t j = 0; j < total && ascii; j++) ascii = st[j] < 0x80;
        if (!ascii) continue;
        const unsigned char *host = st + n_pat, *path = host + n_host, *query = path + n_path;
        PyObject *f[12] = {NULL};
        if (flags & F_PATTERN_HOST) {
            f[0] = ascii_str(host, n_host);
        } else if (flags & F_PATTERN_HOST_PATH) {
            f[0] = ascii_str(host, n_host + n_path);
        } else {
            f[0] = ascii_str(st, n_pat);
        }
        int allow = flags & F_ALLOW, exact = (flags & F_EXACT_HOST) != 0;
        int anchored = (flags & F_ANCHORED) != 0;
        PyObject *source = PyTuple_GET_ITEM(sources, source_id);
        uint64_t path_len = n_query < 0 ? n_path : n_path + (uint64_t)n_query + 1;
        if (path_len > 0x1FFFF) path_len = 0x1FFFF;
        f[1] = Py_NewRef(allow ? args[6] : args[7]);
        f[2] = Py_NewRef(PyTuple_GET_ITEM(categories, category_id));
        f[3] = ascii_str(host, n_host);
        f[4] = ascii_str(path, n_path);
        f[5] = n_query < 0 ? Py_NewRef(Py_None) : ascii_str(query, (uint64_t)n_query);
        f[6] = PyBool_FromLong(exact);
        f[7] = PyBool_FromLong(anchored);
        f[8] = PyBool_FromLong((flags & F_IP) != 0);
        f[9] = Py_NewRef(PyUnicode_Check(source) && PyUnicode_GET_LENGTH(source) ? source
                                                                                  : Py_None);
        f[10] = line ? PyLong_FromUnsignedLong(line) : Py_NewRef(Py_None);
        /* urlsieve.rules.model.rank_of */
        f[11] = PyLong_FromUnsignedLongLong(n_host << 20 | path_len << 3
                                            | (uint64_t)anchored << 2 | (uint64_t)exact << 1
                                            | (uint64_t)allow);
        PyObject *rule = NULL;
        int complete = 1;
        for (int j = 0; j < 12; j++) complete &= f[j] != NULL;
        if (complete) rule = type->tp_alloc(type, 12); /* as tuple.__new__(Rule, ...) */
        if (rule == NULL) {
            for (int j = 0; j < 12; j++) Py_XDECREF(f[j]);
            goto fail;
        }
        for (int j = 0; j < 12; j++) PyTuple_SET_ITEM(rule, j, f[j]);
        if (atomic_items(rule)) PyObject_GC_UnTrack(rule); /* as make_verdict does */
        PyList_SetItem(out, k, rule); /* drops the None */
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    PyBuffer_Release(&img);
    return out;
}

/* xxh3_64(data) / xxh3_128(data): _xxh3.h's hashes of a bytes-like object, for the tests
   that hold them equal to the xxhash package (xxh3_64_intdigest, xxh3_128_intdigest). */
static PyObject *
xxh3_64(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    uint64_t h = XXH3_64bits(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(h);
}

static PyObject *
xxh3_128(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    us_xxh128 h = XXH3_128bits(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    PyObject *high = PyLong_FromUnsignedLongLong(h.high64), *low = NULL, *shift = NULL,
             *up = NULL, *out = NULL;
    if (high == NULL) goto done;
    if ((low = PyLong_FromUnsignedLongLong(h.low64)) == NULL) goto done;
    if ((shift = PyLong_FromLong(64)) == NULL) goto done;
    if ((up = PyNumber_Lshift(high, shift)) == NULL) goto done;
    out = PyNumber_Or(up, low);
done:
    Py_XDECREF(high);
    Py_XDECREF(low);
    Py_XDECREF(shift);
    Py_XDECREF(up);
    return out;
}

/* Near-duplicate documents: SimHash of a text, the index's table walk. */
#include "_neardup.h"

static PyMethodDef methods[] = {
    {"scan_mode", (PyCFunction)(void (*)(void))scan_mode, METH_FASTCALL,
     "scan_mode(name=None) -> str\n\nThe canonical scan in use (bytes, sse2, avx512: the\n"
     "widest this CPU has by default); given a name, use that one and return the previous."},
    {"fast_canonical", (PyCFunction)(void (*)(void))fast_canonical, METH_FASTCALL,
     "fast_canonical(url, allow_query) -> str | None\n\n"
     "The canonical form of an already-canonical (or scheme-less canonical) URL,\n"
     "or None when the full canonicaliser must decide."},
    {"canonical_rewrite", (PyCFunction)(void (*)(void))canonical_rewrite, METH_FASTCALL,
     "canonical_rewrite(url, allow_query, keep_port) -> str | None\n\n"
     "The canonical form of a canonical or near-canonical URL (the compiled rewrite of\n"
     "the default steps), or None when the full canonicaliser must decide.\n"
     "keep_port: the profile keeps ports (a URL with one is left to the caller)."},
    {"url_parts", (PyCFunction)(void (*)(void))url_parts, METH_FASTCALL,
     "url_parts(url, allow_query, keep_port, cls) -> cls | None\n\n"
     "parse_url's URL (cls: its tuple type) of a canonical or near-canonical URL\n"
     "without userinfo or port, or None when the full parser must decide."},
    {"bloom_test", (PyCFunction)(void (*)(void))bloom_test, METH_FASTCALL,
     "bloom_test(bits, t, h, out) -> None\n\n"
     "out[i]: whether the Bloom layer `bits` holds fingerprint row h[i] = (h1, h2)."},
    {"bloom_insert", (PyCFunction)(void (*)(void))bloom_insert, METH_FASTCALL,
     "bloom_insert(bits, t, h, out, count, tested=False) -> int\n\n"
     "Add the fingerprint rows h to the Bloom layer: out flags the fresh ones (tested\n"
     "before the batch, the first of identical rows only); count[0] is raised by their\n"
     "number before their bits are set; returns it. tested: out already holds, for each\n"
     "row, whether the layer lacks it (bloom_urls' test), and the test is skipped."},
    {"exact_lookup", (PyCFunction)(void (*)(void))exact_lookup, METH_FASTCALL,
     "exact_lookup(table, keys, out) -> None\n\nout[i]: whether the exact table holds keys[i]."},
    {"exact_insert", (PyCFunction)(void (*)(void))exact_insert, METH_FASTCALL,
     "exact_insert(table, keys, out) -> int\n\n"
     "Insert keys in order: out flags the new ones; returns how many, -1 when it\n"
     "found the table full."},
    {"url_key", (PyCFunction)(void (*)(void))url_key, METH_FASTCALL,
     "url_key(allow_query, keep_port, bits, query, url) -> int | tuple[int, int] | None\n\n"
     "xxh3-64 (bits 64) or xxh3-128 as (high, low) (bits 128) of one URL's canonical form\n"
     "on the compiled path (None: the caller canonicalises it). query: None, or the\n"
     "crawler's query steps (drop, names, prefixes, sort, drop_empty)."},
    {"exact_add_locked", (PyCFunction)(void (*)(void))exact_add_locked, METH_FASTCALL,
     "exact_add_locked(words, fd, key, buckets, limit) -> int\n\n"
     "One key added to an exact store file under its flock: 1 held, 0 added, -2 left to\n"
     "the Python session (dirty or retired file, table at its limit). fd -1: a lookup\n"
     "without the lock."},
    {"bloom_add_locked", (PyCFunction)(void (*)(void))bloom_add_locked, METH_FASTCALL,
     "bloom_add_locked(words, fd, layers, h1, h2) -> int\n\n"
     "One fingerprint added to a Bloom store file under its flock: 1 held, 0 added, -2\n"
     "left to the Python session (dirty file, layers changed, last layer full). fd -1: a\n"
     "lookup without the lock."},
    {"snapshot_match", (PyCFunction)(void (*)(void))snapshot_match, METH_FASTCALL,
     "snapshot_match(image, layout, urls, mask, out[, canonical[, rows, stride]]) -> int\n\n"
     "Per URL of the list, the id of the deciding rule of a compiled image into out\n"
     "(int64): -1 when no rule matches, -2 off the canonical fast path (returns how\n"
     "many are); with a list\n"
     "`canonical` as long as urls, each fast-path URL's canonical form is stored in it.\n"
     "With rows (int64 per URL) and stride, URL k uses the mask bytes\n"
     "mask[rows[k]:rows[k] + stride] (a pass list per client)."},
    {"bloom_urls", (PyCFunction)(void (*)(void))bloom_urls, METH_FASTCALL,
     "bloom_urls(urls, allow_query, keep_port, bits, t, h, out, count)\n"
     "    -> (list[int], list[bool] | None)\n\n"
     "canonical_hashes' 128-bit fingerprints into h and their test against one Bloom layer\n"
     "(count None: out = held; count given: out = lacked, and the batch inserted when\n"
     "every URL is on the fast path). Returns the positions of the other URLs, and out\n"
     "as a list when there are none."},
    {"canonical_hashes", (PyCFunction)(void (*)(void))canonical_hashes, METH_FASTCALL,
     "canonical_hashes(urls, allow_query, bits, out, keep_port) -> list[int]\n\n"
     "xxh3-64 (bits 64) or xxh3-128 as (high, low) (bits 128) of each fast-path URL's\n"
     "canonical form into out (uint64); returns the positions of the other URLs.\n"
     "keep_port: the profile keeps ports (URLs with one are left to the caller)."},
    {"compile_lines", (PyCFunction)(void (*)(void))compile_lines, METH_FASTCALL,
     "compile_lines(text, pos, mode, max_lines, rule_id, string_offset, category_id,\n"
     "allow)"
     "-> tuple | None\n\n"
     "The run of plain rule lines of text from pos, as SnapshotBuilder arrays (None when\n"
     "the line at pos is for the line-by-line reader)."},
    {"table_place", (PyCFunction)(void (*)(void))table_place, METH_FASTCALL,
     "table_place(keys, values, table) -> None\n\n"
     "Fill table (12-byte slots: u64 key, u32 value) with the (key, value) pairs, linear\n"
     "probing in rounds."},
    {"snapshot_rules", (PyCFunction)(void (*)(void))snapshot_rules, METH_FASTCALL,
     "snapshot_rules(image, layout, ids, categories, sources, rule_type, allow, block)\n"
     "-> list[Rule | None]\n\n"
     "The rules of rule ids, read from a compiled image (None: the caller builds it)."},
    {"snapshot_check", (PyCFunction)(void (*)(void))snapshot_check, METH_FASTCALL,
     "snapshot_check(image, layout, urls, mask, cache_ids, cache_rules, verdict_type, none,\n"
     "action_at)\n"
     "-> tuple[list, list[tuple[int, int, str]], list[int]]\n\n"
     "check_many's verdicts for a list of URLs in one call, with its rule cache (ids\n"
     "int64, -1 empty, and rules). None where the caller is left to fill:\n"
     "(position, rule id, canonical form) of each rule not in the cache, and the\n"
     "positions of the URLs off the fast path."},
    {"policy_decide", (PyCFunction)(void (*)(void))policy_decide, METH_FASTCALL,
     "policy_decide(image, layout, urls, whos, who_index, index_of, table, plan_at, masks,"
     " stride, shared, needles) -> (decisions, rest): a policy's batch, its pass-list walk"
     " compiled"},
    {"snapshot_verdicts", (PyCFunction)(void (*)(void))snapshot_verdicts, METH_FASTCALL,
     "snapshot_verdicts(image, layout, urls, mask, verdict_type, none, allow, block, rules)"
     " -> (verdicts, left): check_many's verdicts, each holding its rule's id, not the rule"},
    {"xxh3_64", (PyCFunction)xxh3_64, METH_O,
     "xxh3_64(data) -> int\n\nXXH3-64 (seed 0) of a bytes-like object, as xxhash.xxh3_64_intdigest."},
    {"xxh3_128", (PyCFunction)xxh3_128, METH_O,
     "xxh3_128(data) -> int\n\nXXH3-128 (seed 0) of a bytes-like object, as\n"
     "xxhash.xxh3_128_intdigest."},
    {"quote_all", (PyCFunction)quote_all, METH_O,
     "quote_all(text) -> str | None\n\n"
     "ASCII text percent-encoded but A-Z a-z 0-9 _ . - ~ (None for non-ASCII text)."},
    {"squid_scan", (PyCFunction)(void (*)(void))squid_scan, METH_FASTCALL,
     "squid_scan(lines, channels, escaped, out) -> list[str | None]\n\n"
     "The URL of each plain Squid request line (None: parse it in Python); out gets\n"
     "the channel IDs (int64, -1 for none)."},
    {"squid_reply", (PyCFunction)(void (*)(void))squid_reply, METH_FASTCALL,
     "squid_reply(lines, channels, escaped, image, layout, mask, pieces, unknown)\n"
     "-> tuple[bytes, list[tuple[int, int]], int, int]\n\n"
     "Squid request lines answered in one call: the replies written, the holes (line,\n"
     "offset) left for the caller, the blocked and allowed counts."},
    {"filter_reply", (PyCFunction)(void (*)(void))filter_reply, METH_FASTCALL,
     "filter_reply(lines, image, layout, mask, categories, sources, only)\n"
     "-> tuple[bytes, list[tuple[int, int]]]\n\n"
     "urlsieve filter's text output for input lines in one call; the holes (line,\n"
     "offset) are left for the caller."},
    NEARDUP_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "urlsieve._speedups",
    "Compiled hot paths of urlsieve; the pure-Python code is the reference.", -1, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    init_classes();
    scan_level = scan_level_best();
    for (int k = 0; k < 5; k++) {
        if (scheme_names[k] == NULL) scheme_names[k] = PyUnicode_InternFromString(scheme_text[k]);
        if (scheme_names[k] == NULL) return NULL;
    }
    if (root_path == NULL) root_path = PyUnicode_InternFromString("/");
    if (root_path == NULL) return NULL;
    return PyModule_Create(&module);
}
