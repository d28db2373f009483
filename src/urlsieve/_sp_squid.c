/*
 * _sp_squid.c: Squid helper replies and line output (a unit of urlsieve._speedups;
 * _speedups.c has the table of contents). Python references: protocol.parse_request
 * (squid_scan) and SquidHelper's batch loop and handle (squid_reply) of urlsieve/gateway/,
 * the per-line path of urlsieve/cli/filter.py (filter_reply), gateway/protocol.py's
 * _quote_all (quote_all); held equal by tests/gateway/test_protocol.py, test_helper.py and
 * tests/cli/.
 */
#include "_speedups.h"

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
 * is on the canonical fast path (sp_match_url), and
 *   - an allow rule decides, or no rule and `unknown` is false: "ERR";
 *   - a block rule decides whose category id has pieces (pieces[id]: a tuple of ASCII
 *     str): the pieces joined by the URL percent-encoded as quote_all does.
 * Any other line is a hole, (line index, offset in the output where its reply goes),
 * for the caller to answer (bad lines, URLs off the fast path, block rules of a
 * category without pieces, URLs no rule decides when `unknown` is true). Returns
 * (replies: bytes, holes: list[tuple[int, int]], blocked, allowed).
 */
/* What squid_reply and filter_reply share: the image, scratch for sp_match_url, the output
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
    int ok = sp_image_open(&b->img, layout, &b->im);
    b->im.mask = b->mask.obj ? b->mask.buf : NULL;
    b->im.mask_len = b->mask.obj ? b->mask.len : 0;
    if (ok) {
        b->buf = sp_scratch_take();
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
    sp_scratch_give(b->buf);
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
    if (sp_grow_reserve(b, 3 * (size_t)n) < 0) return -1; /* the worst case, then in place */
    char *o = b->p + b->n;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (sp_quote_safe[c]) {
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
    return sp_grow_put(b, digits, (size_t)n);
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
            id = sp_match_url(&b.im, s + u0, u1 - u0, b.buf, b.rewritten, &text, &len, &sp);
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
            if (put_channel(&b.out, chan) < 0 || sp_grow_put(&b.out, "ERR\n", 4) < 0) goto nomem;
            allowed++;
        } else if (entry != NULL) {
            if (put_channel(&b.out, chan) < 0) goto nomem;
            for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(entry); j++) {
                PyObject *piece = PyTuple_GET_ITEM(entry, j);
                if (j > 0 && put_quoted(&b.out, s + u0, u1 - u0) < 0) goto nomem;
                if (sp_grow_put(&b.out, PyUnicode_1BYTE_DATA(piece),
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
        int64_t id = plain ? sp_match_url(&b.im, s, n, b.buf, b.rewritten, &text, &len, &sp) : -2;
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
            failed = sp_grow_put(&b.out, "none\t-\t-\t", 9) < 0;
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
            failed = sp_grow_put(&b.out, allow ? "allow\t" : "block\t", 6) < 0
                     || sp_grow_put(&b.out, PyBytes_AS_STRING(category),
                                    (size_t)PyBytes_GET_SIZE(category)) < 0
                     || sp_grow_put(&b.out, "\t", 1) < 0
                     || sp_grow_put(&b.out, where, (size_t)where_len) < 0
                     || sp_grow_put(&b.out, number, (size_t)digits) < 0
                     || sp_grow_put(&b.out, "\t", 1) < 0;
        }
        if (failed || sp_grow_put(&b.out, s, (size_t)n) < 0 || sp_grow_put(&b.out, "\n", 1) < 0) {
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
    for (Py_ssize_t i = 0; i < n; i++) extra += sp_quote_safe[s[i]] ? 0 : 2;
    if (extra == 0) return Py_NewRef(arg);
    PyObject *out = PyUnicode_New(n + extra, 127);
    if (out == NULL) return NULL;
    unsigned char *o = PyUnicode_1BYTE_DATA(out);
    static const char hex[] = "0123456789ABCDEF";
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (sp_quote_safe[c]) {
            *o++ = c;
        } else {
            *o++ = '%';
            *o++ = (unsigned char)hex[c >> 4];
            *o++ = (unsigned char)hex[c & 15];
        }
    }
    return out;
}

const PyMethodDef sp_squid_methods[] = {
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
    {"quote_all", (PyCFunction)quote_all, METH_O,
     "quote_all(text) -> str | None\n\n"
     "ASCII text percent-encoded but A-Z a-z 0-9 _ . - ~ (None for non-ASCII text)."},
    {NULL, NULL, 0, NULL},
};
