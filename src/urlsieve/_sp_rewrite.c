/*
 * _sp_rewrite.c: the near-canonical rewrite and one URL through the compiled path (a unit of
 * urlsieve._speedups; _speedups.c has the table of contents). Python reference: the
 * canonicaliser of urlsieve/url/ (canonicalize and parse_url in parse.py, every path step in
 * path.py), held equal by tests/url/test_speedups.py and test_parse_fast.py. Here:
 * sp_scan_or_rewrite, canonical_rewrite (canonicalize), url_parts (parse_url).
 */
#include "_speedups.h"

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
 * The result must then pass sp_scan_canonical, so what comes out is canonical by the same
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
            if (c >= 128 || !(sp_cls[c] & (HOST | HOST_EXT))) return -1;
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

/* The rewrite of s into buf and sp_scan_canonical of that: 1 with *text = buf and *len set,
   0 for the Python path. */
static int
rewrite_and_scan(const unsigned char *s, Py_ssize_t n, int allow_query, unsigned char *buf,
                 const unsigned char **text, Py_ssize_t *len, spans *sp, int how)
{
    Py_ssize_t m = rewrite_near_canonical(s, n, buf, how);
    if (m < 0 || !sp_scan_canonical(buf, m, allow_query, sp)) return 0;
    *text = buf;
    *len = m;
    return 1;
}

/* sp_scan_canonical(s), else rewrite_and_scan: 1 with *text and *len set to the
   canonical-form bytes' source (s or buf), 0 for the Python path. */
int
sp_scan_or_rewrite(const unsigned char *s, Py_ssize_t n, int allow_query, unsigned char *buf,
                const unsigned char **text, Py_ssize_t *len, spans *sp, int how)
{
    if (!(how & REWRITE_HIGH) && sp_scan_canonical(s, n, allow_query, sp)) {
        *text = s;
        *len = n;
        return 1;
    }
    return rewrite_and_scan(s, n, allow_query, buf, text, len, sp, how);
}

/* ---------------------------------------------------------------------------------------
 * One URL through the compiled path, for canonicalize and parse_url (url/parse.py): the
 * scan, else the near-canonical rewrite. A str beyond ASCII is encoded first as path.py's
 * to_bytes does (sp_url_bytes, below). 0: the Python canonicaliser decides.
 */
/* The bytes path.py's to_bytes gives for a str of at most MAX_URL / 4 code points, into
   out: UTF-8, U+DC80..U+DCFF as the bytes 0x80..0xFF they stand for, another surrogate
   as its three UTF-8-style bytes. Returns the length. */
Py_ssize_t
sp_url_bytes(PyObject *text, unsigned char *out)
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

/* -1 with an exception set (out of memory), 0 for the Python path, 1 with *u filled. */
int
sp_one_url_scan(PyObject *url, int allow_query, int how, one_url *u)
{
    u->buf = NULL;
    const Py_ssize_t n = PyUnicode_GET_LENGTH(url);
    if (PyUnicode_IS_ASCII(url)) {
        const unsigned char *s = PyUnicode_1BYTE_DATA(url);
        if (sp_scan_canonical(s, n, allow_query, &u->sp)) {
            u->text = s;
            u->len = n;
            return 1;
        }
        u->buf = sp_scratch_take();
        if (u->buf == NULL) goto nomem;
        return rewrite_and_scan(s, n, allow_query, u->buf, &u->text, &u->len, &u->sp, how);
    }
    if (n > MAX_URL / 4) return 0;
    u->buf = sp_scratch_take(); /* MAX_URL + REWRITE_CAP bytes */
    if (u->buf == NULL) goto nomem;
    Py_ssize_t m = sp_url_bytes(url, u->buf);
    return rewrite_and_scan(u->buf, m, allow_query, u->buf + MAX_URL, &u->text, &u->len,
                            &u->sp, how | REWRITE_HIGH);
nomem:
    PyErr_NoMemory();
    return -1;
}

/* The arguments (url: str, allow_query, keep_port[, ...]) of canonical_rewrite and
   url_parts; usage: the call as its error message shows it. */
int
sp_one_url_args(const char *name, const char *usage, PyObject *const *args, Py_ssize_t nargs,
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
    if (sp_one_url_args("canonical_rewrite", "canonical_rewrite(url, allow_query, keep_port)", args,
                     nargs, 3, &allow_query, &keep_port)
        < 0) {
        return NULL;
    }
    one_url u;
    int found = sp_one_url_scan(args[0], allow_query, keep_port ? REWRITE_KEEP_PORT : 0, &u);
    PyObject *out = NULL;
    if (found > 0) {
        /* no buffer: the scan accepted the (ASCII) argument itself */
        out = u.buf == NULL ? sp_canonical_of(args[0], &u.sp)
                            : sp_canonical_text(u.text, u.len, &u.sp);
    } else if (found == 0) {
        out = Py_NewRef(Py_None);
    }
    sp_scratch_give(u.buf);
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

/* The items of url/model.py's URL for a URL sp_one_url_scan accepted. */
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
        if (scheme == 5) { /* sp_scan_canonical accepts these five only */
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
    if (sp_one_url_args("url_parts", "url_parts(url, allow_query, keep_port, cls)", args, nargs, 4,
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
    int found = sp_one_url_scan(args[0], allow_query, REWRITE_PLAIN, &u);
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
    sp_scratch_give(u.buf);
    return out;
}

/* The interned scheme names and "/" url_parts' tuples hold: once, at module init; -1 with
   an exception set when out of memory. */
int
sp_rewrite_init(void)
{
    for (int k = 0; k < 5; k++) {
        if (scheme_names[k] == NULL) scheme_names[k] = PyUnicode_InternFromString(scheme_text[k]);
        if (scheme_names[k] == NULL) return -1;
    }
    if (root_path == NULL) root_path = PyUnicode_InternFromString("/");
    if (root_path == NULL) return -1;
    return 0;
}

const PyMethodDef sp_rewrite_methods[] = {
    {"canonical_rewrite", (PyCFunction)(void (*)(void))canonical_rewrite, METH_FASTCALL,
     "canonical_rewrite(url, allow_query, keep_port) -> str | None\n\n"
     "The canonical form of a canonical or near-canonical URL (the compiled rewrite of\n"
     "the default steps), or None when the full canonicaliser must decide.\n"
     "keep_port: the profile keeps ports (a URL with one is left to the caller)."},
    {"url_parts", (PyCFunction)(void (*)(void))url_parts, METH_FASTCALL,
     "url_parts(url, allow_query, keep_port, cls) -> cls | None\n\n"
     "parse_url's URL (cls: its tuple type) of a canonical or near-canonical URL\n"
     "without userinfo or port, or None when the full parser must decide."},
    {NULL, NULL, 0, NULL},
};
