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
#include <string.h>

enum { HOST = 1, SEG_FIRST = 2, SEG_REST = 4, QUERY = 8 };
static unsigned char cls[128];

static void
init_classes(void)
{
    for (int c = 'a'; c <= 'z'; c++) cls[c] |= HOST;
    for (int c = '0'; c <= '9'; c++) cls[c] |= HOST;
    cls['_'] |= HOST;
    cls['-'] |= HOST;
    cls['.'] |= HOST;
    /* Path characters: printable ASCII but space # % . / ? \ (the first of a
       segment); "." is allowed after it. */
    for (int c = 0x21; c <= 0x7E; c++) {
        if (c != '#' && c != '%' && c != '/' && c != '?' && c != '\\') {
            cls[c] |= SEG_REST;
            if (c != '.') cls[c] |= SEG_FIRST;
        }
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

/* Is s[0:n] labels of [a-z0-9_-]+ joined by single dots, the last starting with a-z? */
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

static PyObject *
fast_canonical(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
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
    Py_ssize_t i;
    int has_scheme = 1;
    if (n >= 7 && memcmp(s, "http://", 7) == 0) i = 7;
    else if (n >= 8 && memcmp(s, "https://", 8) == 0) i = 8;
    else if (n >= 6 && memcmp(s, "ftp://", 6) == 0) i = 6;
    else if (n >= 5 && memcmp(s, "ws://", 5) == 0) i = 5;
    else if (n >= 6 && memcmp(s, "wss://", 6) == 0) i = 6;
    else {
        /* Only a string with no "://" at all is read as http:// + itself. */
        for (Py_ssize_t j = 0; j + 2 < n; j++) {
            if (s[j] == ':' && s[j + 1] == '/' && s[j + 2] == '/') Py_RETURN_NONE;
        }
        has_scheme = 0;
        i = 0;
    }

    const Py_ssize_t host_start = i;
    while (i < n && (cls[s[i]] & HOST)) i++;
    const Py_ssize_t host_end = i;
    if (host_end == host_start) Py_RETURN_NONE;
    if (!is_ipv4(s + host_start, host_end - host_start)
        && !is_hostname(s + host_start, host_end - host_start)) {
        Py_RETURN_NONE;
    }

    int has_path = 0;
    if (i < n && s[i] == '/') {
        has_path = 1;
        i++;
        while (i < n && s[i] != '?') {
            /* one segment: a first unit, then any number of units */
            Py_ssize_t e;
            if (cls[s[i]] & SEG_FIRST) i++;
            else if ((e = esc_len(s, i, n)) != 0) i += e;
            else Py_RETURN_NONE;
            while (i < n) {
                if (cls[s[i]] & SEG_REST) i++;
                else if ((e = esc_len(s, i, n)) != 0) i += e;
                else break;
            }
            if (i == n || s[i] == '?') break;
            if (s[i] != '/') Py_RETURN_NONE;
            i++; /* a "/" ends the segment; a trailing one ends the path */
        }
    }
    if (i < n) {
        if (s[i] != '?' || !allow_query) Py_RETURN_NONE;
        i++;
        while (i < n) {
            Py_ssize_t e;
            if (cls[s[i]] & QUERY) i++;
            else if ((e = esc_len(s, i, n)) != 0) i += e;
            else Py_RETURN_NONE;
        }
    }

    if (has_scheme && has_path) return Py_NewRef(url);
    const Py_ssize_t prefix = has_scheme ? 0 : 7, slash = has_path ? 0 : 1;
    PyObject *out = PyUnicode_New(n + prefix + slash, 127);
    if (out == NULL) return NULL;
    unsigned char *o = PyUnicode_1BYTE_DATA(out);
    if (prefix) memcpy(o, "http://", 7);
    memcpy(o + prefix, s, (size_t)host_end);
    if (slash) o[prefix + host_end] = '/';
    memcpy(o + prefix + host_end + slash, s + host_end, (size_t)(n - host_end));
    return out;
}

/* ---------------------------------------------------------------------------------------
 * The blocked Bloom filter's batch insert (urlsieve/seen/bloom.py; its numpy version
 * _insert_numpy is the reference). A block is 8 words of 64 bits; a URL's mask has bits
 * in each word. bloom_fresh tests a batch against the filter as it is (no writes),
 * keeping only the first of identical fingerprints; bloom_set ORs the masks of the
 * flagged URLs in. The caller raises the layer's count in between.
 */

enum { BITS, BLOCK, MASKS, H1, H2, OUT, NBUF };

typedef struct {
    Py_buffer buf[NBUF]; /* a slot a function does not take stays zeroed (obj == NULL) */
} batch_args;

static void
release_batch(batch_args *a)
{
    for (int i = 0; i < NBUF; i++) PyBuffer_Release(&a->buf[i]); /* no-op when obj is NULL */
}

/* Take argument i into buffer slots[i] (bits and out writable) and check the sizes. */
static int
get_batch(PyObject *const *args, Py_ssize_t nargs, const int *slots, Py_ssize_t nslots,
          batch_args *a, Py_ssize_t *n)
{
    memset(a, 0, sizeof(*a));
    if (nargs != nslots) {
        PyErr_Format(PyExc_TypeError, "expected %zd arguments, got %zd", nslots, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nslots; i++) {
        int writable = slots[i] == BITS || slots[i] == OUT;
        int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(args[i], &a->buf[slots[i]], flags) < 0) {
            release_batch(a);
            return -1;
        }
    }
    const Py_buffer *b = a->buf;
    *n = b[OUT].len;
    int with_hashes = b[H1].obj != NULL;
    if (b[BITS].len % 64 || b[BLOCK].len != 8 * *n || b[MASKS].len != 64 * *n
        || (with_hashes && (b[H1].len != 8 * *n || b[H2].len != 8 * *n))) {
        PyErr_SetString(PyExc_ValueError,
                        "bloom batch: bits must be whole 64-byte blocks and block (int64), "
                        "masks (n x 8 uint64), h1, h2 (uint64) and out (bool) one row per URL");
        release_batch(a);
        return -1;
    }
    const int64_t *block = b[BLOCK].buf;
    const int64_t nblocks = b[BITS].len / 64;
    for (Py_ssize_t i = 0; i < *n; i++) {
        if (block[i] < 0 || block[i] >= nblocks) {
            PyErr_Format(PyExc_IndexError, "bloom batch: block %lld out of range (%lld blocks)",
                         (long long)block[i], (long long)nblocks);
            release_batch(a);
            return -1;
        }
    }
    return 0;
}

static PyObject *
bloom_fresh(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    batch_args a;
    Py_ssize_t n;
    static const int slots[] = {BITS, BLOCK, MASKS, H1, H2, OUT};
    if (get_batch(args, nargs, slots, 6, &a, &n) < 0) return NULL;
    const uint64_t *bits = a.buf[BITS].buf, *masks = a.buf[MASKS].buf;
    const uint64_t *h1 = a.buf[H1].buf, *h2 = a.buf[H2].buf;
    const int64_t *block = a.buf[BLOCK].buf;
    unsigned char *out = a.buf[OUT].buf;
    Py_ssize_t fresh = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint64_t *row = bits + 8 * block[i], *m = masks + 8 * i;
        uint64_t missing = 0;
        for (int w = 0; w < 8; w++) missing |= m[w] & ~row[w];
        out[i] = missing != 0;
        fresh += out[i];
    }
    if (fresh > 1) {
        /* the same fingerprint twice among the fresh: only the first is new */
        size_t size = 4;
        while (size < 2 * (size_t)fresh) size <<= 1;
        Py_ssize_t *slots = PyMem_Malloc(size * sizeof(Py_ssize_t));
        if (slots == NULL) {
            release_batch(&a);
            return PyErr_NoMemory();
        }
        for (size_t j = 0; j < size; j++) slots[j] = -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (!out[i]) continue;
            size_t j = (size_t)(h2[i] ^ (h1[i] >> 17)) & (size - 1);
            while (slots[j] >= 0) {
                Py_ssize_t k = slots[j];
                if (h1[k] == h1[i] && h2[k] == h2[i]) {
                    out[i] = 0;
                    fresh--;
                    break;
                }
                j = (j + 1) & (size - 1);
            }
            if (out[i]) slots[j] = i;
        }
        PyMem_Free(slots);
    }
    release_batch(&a);
    return PyLong_FromSsize_t(fresh);
}

static PyObject *
bloom_set(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    batch_args a;
    Py_ssize_t n;
    static const int slots[] = {BITS, BLOCK, MASKS, OUT};
    if (get_batch(args, nargs, slots, 4, &a, &n) < 0) return NULL;
    uint64_t *bits = a.buf[BITS].buf;
    const uint64_t *masks = a.buf[MASKS].buf;
    const int64_t *block = a.buf[BLOCK].buf;
    const unsigned char *flags = a.buf[OUT].buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!flags[i]) continue;
        uint64_t *row = bits + 8 * block[i];
        const uint64_t *m = masks + 8 * i;
        for (int w = 0; w < 8; w++) row[w] |= m[w];
    }
    release_batch(&a);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"fast_canonical", (PyCFunction)(void (*)(void))fast_canonical, METH_FASTCALL,
     "fast_canonical(url, allow_query) -> str | None\n\n"
     "The canonical form of an already-canonical (or scheme-less canonical) URL,\n"
     "or None when the full canonicaliser must decide."},
    {"bloom_fresh", (PyCFunction)(void (*)(void))bloom_fresh, METH_FASTCALL,
     "bloom_fresh(bits, block, masks, h1, h2, out) -> int\n\n"
     "Flag in out the URLs a batch adds (tested against the filter before the batch,\n"
     "the first of identical fingerprints only); return how many."},
    {"bloom_set", (PyCFunction)(void (*)(void))bloom_set, METH_FASTCALL,
     "bloom_set(bits, block, masks, flags) -> None\n\nOR the masks of the flagged URLs in."},
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
    return PyModule_Create(&module);
}
