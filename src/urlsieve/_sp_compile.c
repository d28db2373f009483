/*
 * _sp_compile.c: compiling rules into the snapshot format (a unit of urlsieve._speedups;
 * _speedups.c has the table of contents). Python references: the per-line readers
 * (urlsieve/rules/readers.py plain_line, the squidGuard parsers of rules/load.py, into
 * SnapshotBuilder.add) for compile_lines, and match/snapshot/build.py's _table for table_place
 * (tests/match/test_snapshot_engine.py holds them equal).
 */
#include "_speedups.h"

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
                || !sp_scan_canonical(line, len, 0, &sp) || sp.has_scheme || sp.is_ip
                || (mode == LIST_DOMAINS && sp.has_path))
                break;
            Py_ssize_t n_host = sp.host_end, n_path = sp.has_path ? sp.path_end - n_host : 1;
            int dots = 0, slashes = 0, upper = 0;
            int plain = 1; /* a rule's host: [a-z0-9_.-] ("=" and "*" are rule syntax) */
            for (Py_ssize_t i = 0; i < n_host; i++) {
                dots += line[i] == '.';
                plain &= (sp_cls[line[i]] & HOST) != 0;
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
            if (sp_grow_put(&strings, line, (size_t)n_host) < 0
                || sp_grow_put(&strings, sp.has_path ? line + n_host : (const unsigned char *)"/",
                            (size_t)n_path) < 0
                || sp_grow_put(&offsets, &offset, 8) < 0 || sp_grow_put(&lengths, lens, 12) < 0
                || sp_grow_put(&lines, &line_at, 4) < 0 || sp_grow_put(&flags, &flag, 2) < 0
                || sp_grow_put(&dedup, &dk, 8) < 0 || sp_grow_put(&seen, &sk, 8) < 0) {
                failed = 1;
                break;
            }
            for (int e = 0; e <= below; e++) {
                if (sp_grow_put(&expr_hash, &eh[e], 8) < 0 || sp_grow_put(&expr_rule, &id, 4) < 0
                    || sp_grow_put(&host_hash, &hh, 8) < 0
                    || sp_grow_put(&host_bits, &hb[e], 8) < 0) {
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
 * table_place(keys, values, table): the open-addressing table of match/snapshot/build.py's
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

const PyMethodDef sp_compile_methods[] = {
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
    {NULL, NULL, 0, NULL},
};
