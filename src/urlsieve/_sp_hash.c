/*
 * _sp_hash.c: URL fingerprints (a unit of urlsieve._speedups; _speedups.c has the table of
 * contents). Python references: urlsieve/fingerprint.py (xxhash over
 * canonicalize(url).encode("ascii")) and url/profile.py's query steps for url_key
 * (tests/seen/test_one_url.py, tests/test_fingerprint_batch.py); the xxhash package for
 * xxh3_64 / xxh3_128 (tests/url/test_xxh3.py). Here: url_key, the URL runs that
 * canonical_hashes and the stores' bloom_urls hash, canonical_hashes, xxh3_64, xxh3_128.
 */
#include "_speedups.h"

/* URLs (and bytes of their text) canonical_hashes copies with the GIL, then hashes
   without it, at a time. */
#define HASH_RUN 256
#define HASH_RUN_BYTES 16384

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

/* The query steps beyond the default (key_plan, _speedups.h), as url_key's `query`
   argument gives them: (drop names: tuple of bytes, drop prefixes: tuple of bytes, sort,
   drop_empty), or None. 1 a plan, 0 None, -1 with an error. */
int
sp_key_plan_of(PyObject *arg, key_plan *kp)
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

/* One URL's fingerprint on the compiled path (url_key's, below, and the stores' single
   add / in, _sp_stores.c's SeenSingle): the xxh3-64 (bits 64: o[0]) or xxh3-128 (bits 128:
   o[0] high, o[1] low) of the canonical form of the str url. planned: sp_key_plan_of's
   answer for kp. 1 with o filled, 0 for the Python path, -1 with an error. */
int
sp_url_key(PyObject *url, int allow_query, int keep_port, const key_plan *kp, int planned,
           int bits, uint64_t o[2])
{
    one_url u;
    int found = sp_one_url_scan(url, planned ? 1 : allow_query, keep_port ? REWRITE_KEEP_PORT : 0,
                                &u);
    if (found <= 0) {
        sp_scratch_give(u.buf);
        return found;
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
        len = key_query(text, len, kp, query);
        if (len < 0) goto python;
        text = query;
    }
    if (bits == 64) {
        o[0] = XXH3_64bits(text, (size_t)len);
    } else {
        us_xxh128 h = XXH3_128bits(text, (size_t)len);
        o[0] = h.high64;
        o[1] = h.low64;
    }
    sp_scratch_give(u.buf);
    return 1;
python:
    sp_scratch_give(u.buf);
    return 0;
}

/* url_key(allow_query, keep_port, bits, query, url): the xxh3-64 (bits 64: an int) or
   xxh3-128 (bits 128: (high, low)) of the canonical form of one URL on the compiled path,
   else None. query: None (allow_query says whether a query stays on the compiled path)
   or the plan of the crawler profile's query steps (sp_key_plan_of). The URL comes last,
   so that functools.partial binds the rest (a store's key function, with no Python
   frame). */
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
    if (sp_one_url_args("url_key", "url_key(allow_query, keep_port, bits, query, url)", ordered, 3,
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
    int planned = sp_key_plan_of(args[3], &kp);
    if (planned < 0) return NULL;
    uint64_t h[2];
    int found = sp_url_key(args[4], allow_query, keep_port, &kp, planned, (int)bits, h);
    if (found <= 0) return found < 0 ? NULL : Py_NewRef(Py_None);
    if (bits == 64) return PyLong_FromUnsignedLongLong(h[0]);
    PyObject *high = PyLong_FromUnsignedLongLong(h[0]);
    PyObject *low = PyLong_FromUnsignedLongLong(h[1]);
    PyObject *out = high == NULL || low == NULL ? NULL : PyTuple_Pack(2, high, low);
    Py_XDECREF(high);
    Py_XDECREF(low);
    return out;
}

/* A uint64 argument (a fingerprint), or -1 with an exception. */
int
sp_key_arg(const char *name, PyObject *arg, uint64_t *v)
{
    *v = PyLong_AsUnsignedLongLong(arg);
    if (*v == (uint64_t)-1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_ValueError, "%s: a fingerprint is an int in [0, 2**64)", name);
        return -1;
    }
    return 0;
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

void
sp_url_runs_close(url_runs *r)
{
    PyMem_Free(r->copy);
    PyMem_Free(r->wide);
    PyMem_Free(r->data);
    PyMem_Free(r->lens);
    PyMem_Free(r->flags);
    sp_scratch_give(r->buf);
}

int
sp_url_runs_open(url_runs *r, const char *name, PyObject *urls, PyObject *allow_query,
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
    r->buf = sp_scratch_take();
    r->rewritten = r->buf == NULL ? NULL : r->buf + MAX_URL + 16;
    r->copy = PyMem_Malloc(HASH_RUN_BYTES + MAX_URL);
    if (r->data == NULL || r->lens == NULL || r->flags == NULL || r->wide == NULL
        || r->buf == NULL || r->copy == NULL) {
        sp_url_runs_close(r);
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* With the GIL: the text of the run from `run` copied; where it ends, or -1 with an
   exception when the list shrank. */
Py_ssize_t
sp_url_runs_copy(url_runs *r, Py_ssize_t run)
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
            r->lens[end] = sp_url_bytes(url, r->copy + used);
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
int
sp_url_runs_hash(url_runs *r, Py_ssize_t k, int bits, uint64_t *o)
{
    spans sp;
    const unsigned char *s;
    Py_ssize_t len;
    r->flags[k] = 0;
    if (r->data[k] == NULL
        || !sp_scan_or_rewrite(r->data[k], r->lens[k], r->allow_query, r->rewritten, &s, &len, &sp,
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
PyObject *
sp_url_runs_rest(const url_runs *r)
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
    if (sp_url_runs_open(&r, "canonical_hashes", args[0], args[1], args[4]) < 0) return NULL;
    Py_buffer out;
    if (PyObject_GetBuffer(args[3], &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        sp_url_runs_close(&r);
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
        if ((end = sp_url_runs_copy(&r, run)) < 0) goto done;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t k = run; k < end; k++) sp_url_runs_hash(&r, k, (int)bits, o + words * k);
        Py_END_ALLOW_THREADS
    }
    result = sp_url_runs_rest(&r);
done:
    sp_url_runs_close(&r);
    PyBuffer_Release(&out);
    return result;
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

const PyMethodDef sp_hash_methods[] = {
    {"url_key", (PyCFunction)(void (*)(void))url_key, METH_FASTCALL,
     "url_key(allow_query, keep_port, bits, query, url) -> int | tuple[int, int] | None\n\n"
     "xxh3-64 (bits 64) or xxh3-128 as (high, low) (bits 128) of one URL's canonical form\n"
     "on the compiled path (None: the caller canonicalises it). query: None, or the\n"
     "crawler's query steps (drop, names, prefixes, sort, drop_empty)."},
    {"canonical_hashes", (PyCFunction)(void (*)(void))canonical_hashes, METH_FASTCALL,
     "canonical_hashes(urls, allow_query, bits, out, keep_port) -> list[int]\n\n"
     "xxh3-64 (bits 64) or xxh3-128 as (high, low) (bits 128) of each fast-path URL's\n"
     "canonical form into out (uint64); returns the positions of the other URLs.\n"
     "keep_port: the profile keeps ports (URLs with one are left to the caller)."},
    {"xxh3_64", (PyCFunction)xxh3_64, METH_O,
     "xxh3_64(data) -> int\n\nXXH3-64 (seed 0) of a bytes-like object, as xxhash.xxh3_64_intdigest."},
    {"xxh3_128", (PyCFunction)xxh3_128, METH_O,
     "xxh3_128(data) -> int\n\nXXH3-128 (seed 0) of a bytes-like object, as\n"
     "xxhash.xxh3_128_intdigest."},
    {NULL, NULL, 0, NULL},
};
