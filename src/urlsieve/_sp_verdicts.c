/*
 * _sp_verdicts.c: Python objects made from lookups: verdicts, policy decisions, rules (a unit
 * of urlsieve._speedups; _speedups.c has the table of contents). Python references:
 * SnapshotMatcher.check_many's body and Verdict.deferred (snapshot_verdicts;
 * tests/match/test_verdicts.py), SnapshotMatcher._verdict_py (snapshot_checker, one URL;
 * tests/match/test_checker.py), PolicyEngine.decide_many_py of urlsieve/policy/engine.py
 * (policy_decide; tests/policy/), SnapshotMatcher.rule (snapshot_rules;
 * tests/match/test_snapshot_engine.py).
 */
#include "_speedups.h"
#include "structmember.h" /* PyMemberDef, T_OBJECT_EX: a verdict class's slots */

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

/* The verdict of URL `url` decided by rule `id` (-1: none; not -2), matched as
   text[0:len] (spans sp): a new reference, or NULL with an error set. */
static PyObject *
deferred_verdict(const deferred_sink *to, PyObject *url, int64_t id, const unsigned char *text,
                 Py_ssize_t len, const spans *sp)
{
    if (id >= 0 && (uint64_t)id >= to->im->n_rules) { /* (sp_match_one checked it already) */
        PyErr_SetString(PyExc_SystemError, "snapshot_verdicts: a rule id beyond the image");
        return NULL;
    }
    PyObject *form = sp_form_of(url, text, len, sp);
    if (form == NULL) return NULL;
    PyObject *action = to->none, *rule = Py_None, *rules = Py_None;
    if (id >= 0) {
        action = record_itself(to->im, (uint64_t)id).flags & F_ALLOW ? to->allow : to->block;
        rule = PyLong_FromLongLong(id);
        rules = to->rules;
        if (rule == NULL) {
            Py_DECREF(form);
            return NULL;
        }
    }
    PyObject *verdict = slots_verdict(&to->slots, action, rule, rules, form);
    if (id >= 0) Py_DECREF(rule);
    Py_DECREF(form);
    if (verdict == NULL) return NULL;
    /* In no reference cycle: two strings, an int or None, and the engine, which holds no
       verdict (its rule, read later, is a rule of strings and numbers): left to reference
       counts, so that no collection walks them. */
    PyObject_GC_UnTrack(verdict);
    return verdict;
}

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
    PyObject *verdict = deferred_verdict(to, url, id, text, len, sp);
    if (verdict == NULL) return -1;
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
    /* No collection runs from here on: each verdict is untracked at once, yet every
       allocation counts towards one, which at 10,000s of verdicts a call would scan the
       young objects once per 700. And with no collection no Python code runs (no
       finalizer, weakref or gc callback), so the lists' sizes read below hold for the whole
       call and `urls` is read as it is, without a copy: off before the first allocation,
       which could start a collection. */
    int collecting = PyGC_Disable();
    image im;
    if (!sp_image_open(&img, layout, &im)) goto done;
    im.mask = mask.obj ? mask.buf : NULL;
    im.mask_len = mask.obj ? mask.len : 0;
    to.im = &im;
    to.out = PyList_New(PyList_GET_SIZE(urls));
    to.left = PyList_New(0);
    buf = sp_scratch_take();
    if (to.out == NULL || to.left == NULL || buf == NULL) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    mask_rows one_mask = {.base = NULL, .row_at = NULL, .stride = 0};
    if (sp_match_batch(&im, urls, &one_mask, buf, deferred_put, &to) >= 0)
        result = PyTuple_Pack(2, to.out, to.left);
done:
    if (collecting) PyGC_Enable();
    Py_XDECREF(to.out);
    Py_XDECREF(to.left);
    sp_scratch_give(buf);
    PyBuffer_Release(&img);
    if (mask.obj) PyBuffer_Release(&mask);
    return result;
}

/* ---------------------------------------------------------------------------------------
 * snapshot_checker: SnapshotMatcher.check of one URL, its categories fixed, from the URL to
 * its verdict in one call (SnapshotMatcher.checker; the reference is _verdict_py, which the
 * tests hold this equal to). snapshot_checker(image, layout, mask, verdict_type, none,
 * allow, block, rules, fallback) checks the layout, the mask and the verdict class once
 * and gives a callable object. Called with a URL, it makes the verdict snapshot_verdicts
 * makes for it, with no list, no layout read and no collector switch per call. A URL off
 * the fast path, or not an ASCII str, is given to
 * fallback(url), whose result (or error) is the call's. The image is taken from its
 * exporter at each call (the view of a closed matcher is released: the call raises), and
 * its layout read again if the buffer moved (it cannot, for a memoryview: checked anyway).
 */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *view, *layout, *mask, *verdict_type, *fallback;
    deferred_sink to; /* its none, allow, block and rules held by the checker */
    image im;         /* the layout as read for the buffer at base, of size bytes */
    const void *base;
    Py_ssize_t size;
} checker_object;

static int
checker_traverse(PyObject *self, visitproc visit, void *arg)
{
    checker_object *c = (checker_object *)self;
    Py_VISIT(c->view);
    Py_VISIT(c->layout);
    Py_VISIT(c->mask);
    Py_VISIT(c->verdict_type);
    Py_VISIT(c->fallback);
    Py_VISIT(c->to.none);
    Py_VISIT(c->to.allow);
    Py_VISIT(c->to.block);
    Py_VISIT(c->to.rules);
    return 0;
}

static int
checker_clear(PyObject *self)
{
    checker_object *c = (checker_object *)self;
    Py_CLEAR(c->view);
    Py_CLEAR(c->layout);
    Py_CLEAR(c->mask);
    Py_CLEAR(c->verdict_type);
    Py_CLEAR(c->fallback);
    Py_CLEAR(c->to.none);
    Py_CLEAR(c->to.allow);
    Py_CLEAR(c->to.block);
    Py_CLEAR(c->to.rules);
    return 0;
}

static void
checker_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    checker_clear(self);
    Py_TYPE(self)->tp_free(self);
}

/* The layout of the buffer img (as the checker's, read again if the buffer moved): 0 with
   an error set. */
static int
checker_image(checker_object *c, const Py_buffer *img)
{
    if (img->buf == c->base && img->len == c->size) return 1;
    image fresh;
    if (!sp_image_open(img, c->layout, &fresh)) return 0;
    fresh.mask = c->im.mask;
    fresh.mask_len = c->im.mask_len;
    c->im = fresh;
    c->base = img->buf;
    c->size = img->len;
    return 1;
}

static PyObject *
checker_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    checker_object *c = (checker_object *)self;
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "a snapshot checker takes one URL");
        return NULL;
    }
    if (c->view == NULL) { /* (cleared by the collector) */
        PyErr_SetString(PyExc_ValueError, "a cleared snapshot checker");
        return NULL;
    }
    PyObject *url = args[0];
    if (!PyUnicode_Check(url) || !PyUnicode_IS_ASCII(url))
        return PyObject_CallOneArg(c->fallback, url);
    Py_buffer img;
    if (PyObject_GetBuffer(c->view, &img, PyBUF_SIMPLE) < 0) return NULL;
    if (!checker_image(c, &img)) {
        PyBuffer_Release(&img);
        return NULL;
    }
    unsigned char *buf = sp_scratch_take();
    if (buf == NULL) {
        PyBuffer_Release(&img);
        return PyErr_NoMemory();
    }
    /* Matched cold: for one URL, asking for its memory link by link (match_batch's
       warming) measured no faster than the out-of-order core's own overlap. */
    const unsigned char *text;
    Py_ssize_t len;
    spans sp;
    int64_t id = sp_match_url(&c->im, PyUnicode_1BYTE_DATA(url), PyUnicode_GET_LENGTH(url), buf,
                           buf + MAX_URL + 16, &text, &len, &sp);
    PyObject *verdict = id == -2 ? NULL : deferred_verdict(&c->to, url, id, text, len, &sp);
    sp_scratch_give(buf);
    PyBuffer_Release(&img);
    if (id == -2) return PyObject_CallOneArg(c->fallback, url);
    return verdict;
}

static PyTypeObject checker_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "urlsieve._speedups.SnapshotChecker",
    .tp_basicsize = sizeof(checker_object),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(checker_object, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = checker_dealloc,
    .tp_traverse = checker_traverse,
    .tp_clear = checker_clear,
    .tp_doc = "One URL's verdict from a compiled image, its categories fixed "
              "(snapshot_checker).",
};

static PyObject *
snapshot_checker(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "snapshot_checker(image, layout, mask, verdict_type, "
                                         "none, allow, block, rules, fallback) takes 9 "
                                         "arguments");
        return NULL;
    }
    PyObject *mask = args[2], *fallback = args[8];
    if (mask != Py_None && !PyBytes_Check(mask)) {
        PyErr_SetString(PyExc_TypeError, "snapshot_checker: mask must be bytes or None");
        return NULL;
    }
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "snapshot_checker: fallback must be callable");
        return NULL;
    }
    verdict_slots slots;
    if (!verdict_slots_of(args[3], &slots)) return NULL;
    Py_buffer img;
    if (PyObject_GetBuffer(args[0], &img, PyBUF_SIMPLE) < 0) return NULL;
    image im;
    int ok = sp_image_open(&img, args[1], &im);
    const void *base = img.buf;
    Py_ssize_t size = img.len;
    PyBuffer_Release(&img);
    if (!ok) return NULL;
    im.mask = mask == Py_None ? NULL : (const unsigned char *)PyBytes_AS_STRING(mask);
    im.mask_len = mask == Py_None ? 0 : PyBytes_GET_SIZE(mask);
    checker_object *c = PyObject_GC_New(checker_object, &checker_type);
    if (c == NULL) return NULL;
    c->vectorcall = checker_call;
    c->view = Py_NewRef(args[0]);
    c->layout = Py_NewRef(args[1]);
    c->mask = Py_NewRef(mask);
    c->verdict_type = Py_NewRef(args[3]);
    c->fallback = Py_NewRef(fallback);
    c->to = (deferred_sink){.none = Py_NewRef(args[4]), .allow = Py_NewRef(args[5]),
                            .block = Py_NewRef(args[6]), .rules = Py_NewRef(args[7]),
                            .slots = slots};
    c->im = im;
    c->to.im = &c->im;
    c->base = base;
    c->size = size;
    PyObject_GC_Track(c);
    return (PyObject *)c;
}

/* Readies the types this unit defines (the module's init): -1 with an error set. */
int
sp_verdicts_init(void)
{
    return PyType_Ready(&checker_type);
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
            id = sp_match_one(ps->im, text, len, &again, ps->buf);
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
    if (!sp_image_open(&img, args[1], &im)) goto done;
    ps.table = table.buf;
    ps.n_table = table.len / 8;
    ps.plan_at = plan_at.buf;
    ps.n_plans = plan_at.len / 8;
    ps.masks = masks.buf;
    ps.im = &im;
    /* The plans that fit (1), do not (0), not looked at yet (-1). */
    signed char *fits = NULL;
    /* Held copies: index_of runs Python code, which may change the caller's lists. */
    refs = sp_held_strings(urls);
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
        ps.buf = sp_scratch_take();
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
    Py_ssize_t matched = sp_match_batch(&im, refs, &rows, ps.buf, policy_put, &ps);
    if (collecting) PyGC_Enable();
    if (matched >= 0) result = PyTuple_Pack(2, ps.out, ps.rest);
done:
    Py_XDECREF(ps.out);
    Py_XDECREF(ps.rest);
    Py_XDECREF(refs);
    Py_XDECREF(people);
    sp_scratch_give(ps.buf);
    PyMem_Free(plans);
    PyMem_Free(row_at);
    PyBuffer_Release(&img);
    if (table.obj) PyBuffer_Release(&table);
    if (plan_at.obj) PyBuffer_Release(&plan_at);
    if (masks.obj) PyBuffer_Release(&masks);
    return result;
}

/* ---------------------------------------------------------------------------------------
 * snapshot_rules: the Rule objects of rule ids, read from the image in one call
 * (urlsieve/match/snapshot/matcher.py; SnapshotMatcher.rule is the reference, which the tests
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
    if (!sp_image_open(&img, args[1], &im)) goto done;
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
        if (atomic_items(rule)) PyObject_GC_UnTrack(rule); /* in no reference cycle */
        PyList_SetItem(out, k, rule); /* drops the None */
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    PyBuffer_Release(&img);
    return out;
}

const PyMethodDef sp_verdicts_methods[] = {
    {"snapshot_verdicts", (PyCFunction)(void (*)(void))snapshot_verdicts, METH_FASTCALL,
     "snapshot_verdicts(image, layout, urls, mask, verdict_type, none, allow, block, rules)"
     " -> (verdicts, left): check_many's verdicts, each holding its rule's id, not the rule"},
    {"snapshot_checker", (PyCFunction)(void (*)(void))snapshot_checker, METH_FASTCALL,
     "snapshot_checker(image, layout, mask, verdict_type, none, allow, block, rules, "
     "fallback) -> SnapshotChecker: a callable giving one URL's verdict in one call"},
    {"policy_decide", (PyCFunction)(void (*)(void))policy_decide, METH_FASTCALL,
     "policy_decide(image, layout, urls, whos, who_index, index_of, table, plan_at, masks,"
     " stride, shared, needles) -> (decisions, rest): a policy's batch, its pass-list walk"
     " compiled"},
    {"snapshot_rules", (PyCFunction)(void (*)(void))snapshot_rules, METH_FASTCALL,
     "snapshot_rules(image, layout, ids, categories, sources, rule_type, allow, block)\n"
     "-> list[Rule | None]\n\n"
     "The rules of rule ids, read from a compiled image (None: the caller builds it)."},
    {NULL, NULL, 0, NULL},
};
