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

static PyMethodDef methods[] = {
    {"fast_canonical", (PyCFunction)(void (*)(void))fast_canonical, METH_FASTCALL,
     "fast_canonical(url, allow_query) -> str | None\n\n"
     "The canonical form of an already-canonical (or scheme-less canonical) URL,\n"
     "or None when the full canonicaliser must decide."},
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
