/*
 * _sp_scan.c: the canonical scan (a unit of urlsieve._speedups; _speedups.c has the table of
 * contents). Python reference: the regular expression _FAST of urlsieve/url/parse.py and
 * fast_canonical_py (tests/url/test_speedups.py and test_parse_fast.py hold them equal).
 * Here: the character classes, the scan (bytes, SSE2, AVX-512) and its selection
 * (scan_mode), sp_scan_canonical, the canonical form of a scanned URL, fast_canonical.
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
#include "_speedups.h"

unsigned char sp_cls[128];
unsigned char sp_quote_safe[256]; /* A-Z a-z 0-9 _ . - ~ */

static void
init_classes(void)
{
    for (int c = 0; c < 256; c++) {
        sp_quote_safe[c] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
                           || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'
                           || c == '~';
    }
    for (int c = 'a'; c <= 'z'; c++) sp_cls[c] |= HOST;
    for (int c = '0'; c <= '9'; c++) sp_cls[c] |= HOST;
    sp_cls['_'] |= HOST;
    sp_cls['-'] |= HOST;
    sp_cls['.'] |= HOST;
    for (const char *c = "!\"$&'()*+,;=`{}~"; *c; c++) sp_cls[(unsigned char)*c] |= HOST_EXT;
    /* Path characters: printable ASCII but space # % / ? \ (and no segment is "." or
       ".."). */
    for (int c = 0x21; c <= 0x7E; c++) {
        if (c != '#' && c != '%' && c != '/' && c != '?' && c != '\\') sp_cls[c] |= SEG;
        if (c != '#' && c != '%') sp_cls[c] |= QUERY;
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

#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__)) && !defined(URLSIEVE_SCALAR_SCAN)
/* ---------------------------------------------------------------------------------------
 * sp_scan_canonical's vector pass (SSE2, in every x86-64): the bytes after the scheme are
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

/* sp_scan_canonical from the host on, for p[0:m] (p = s + off): 1 or 0 as it would answer,
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
    if (h < len && p[h] < 128 && (sp_cls[p[h]] & HOST_EXT)) return -1; /* a host with "!" ... */
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

/* Which scan sp_scan_canonical runs: SCAN_BYTES (the per-byte definition only), SCAN_SSE2,
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
int
sp_scan_canonical(const unsigned char *s, Py_ssize_t n, int allow_query, spans *sp)
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
    while (i < n && s[i] < 128 && (sp_cls[s[i]] & (HOST | HOST_EXT))) i++;
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
                if (s[i] < 128 && (sp_cls[s[i]] & SEG)) i++;
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
            if (s[i] < 128 && (sp_cls[s[i]] & QUERY)) i++;
            else if ((e = esc_len(s, i, n)) != 0) i += e;
            else return 0;
        }
    }
    return 1;
}

/* The canonical string of text[0:n] that sp_scan_canonical accepted into *sp. */
PyObject *
sp_canonical_text(const unsigned char *text, Py_ssize_t n, const spans *sp)
{
    PyObject *out = PyUnicode_New(n + (sp->has_scheme ? 0 : 7) + (sp->has_path ? 0 : 1), 127);
    if (out != NULL) write_canonical(PyUnicode_1BYTE_DATA(out), text, n, sp);
    return out;
}

/* The canonical string of an ASCII `url` sp_scan_canonical accepted (a new reference). */
PyObject *
sp_canonical_of(PyObject *url, const spans *sp)
{
    if (sp->has_scheme && sp->has_path) return Py_NewRef(url);
    return sp_canonical_text(PyUnicode_1BYTE_DATA(url), PyUnicode_GET_LENGTH(url), sp);
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
    if (!sp_scan_canonical(s, n, allow_query, &sp)) Py_RETURN_NONE;
    return sp_canonical_of(url, &sp);
}

/* The classes and the widest scan this CPU has: once, at module init. */
void
sp_scan_init(void)
{
    init_classes();
    scan_level = scan_level_best();
}

const PyMethodDef sp_scan_methods[] = {
    {"scan_mode", (PyCFunction)(void (*)(void))scan_mode, METH_FASTCALL,
     "scan_mode(name=None) -> str\n\nThe canonical scan in use (bytes, sse2, avx512: the\n"
     "widest this CPU has by default); given a name, use that one and return the previous."},
    {"fast_canonical", (PyCFunction)(void (*)(void))fast_canonical, METH_FASTCALL,
     "fast_canonical(url, allow_query) -> str | None\n\n"
     "The canonical form of an already-canonical (or scheme-less canonical) URL,\n"
     "or None when the full canonicaliser must decide."},
    {NULL, NULL, 0, NULL},
};
