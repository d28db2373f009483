/*
 * urlsieve._speedups: urlsieve's hot paths, compiled. Every compiled function has a
 * pure-Python reference, which the tests hold it equal to; the reference is the truth, and
 * URLSIEVE_PURE_PYTHON=1 runs it alone (urlsieve/_accel.py: COMPILED_PATHS lists every
 * function, `urlsieve doctor` which are in use).
 *
 * TABLE OF CONTENTS: the units, compiled together into the one module (setup.py's
 * SPEEDUPS_SOURCES lists them; tests/url/test_speedups.py builds them with -Wall -Werror).
 * Each unit's header comment names its Python references; shared declarations are in
 * _speedups.h, everything else is static in its unit.
 *
 *   _speedups.c     this table, the scratch block and growing buffer every unit shares,
 *                   module init (the method table is the units' tables, in this order;
 *                   a unit's types are added by its init)
 *   _sp_scan.c      the canonical scan: fast_canonical, scan_mode
 *                   ref. url/parse.py _FAST, fast_canonical_py
 *   _sp_rewrite.c   the near-canonical rewrite, one URL through the compiled path:
 *                   canonical_rewrite, url_parts
 *                   ref. url/parse.py canonicalize, parse_url; url/path.py's steps
 *   _sp_hash.c      fingerprints: url_key, canonical_hashes, xxh3_64, xxh3_128
 *                   ref. fingerprint.py and url/profile.py's query steps; the xxhash package
 *                   (XXH3 itself is _xxh3.h, written from the published specification)
 *   _sp_stores.c    the seen stores: bloom_test, bloom_insert, exact_lookup, exact_insert,
 *                   exact_add_locked, bloom_add_locked, store_session, bloom_urls; the
 *                   type SeenSingle (a store's add(url) and `in` in one call)
 *                   ref. seen/bloom.py and seen/exact.py (numpy), their Python sessions
 *                   (seen/_mapped.py session_py for store_session), seen/_single.py
 *   _sp_lookup.c    rule lookup in the compiled rule format: snapshot_match
 *                   ref. match/snapshot/matcher.py SnapshotMatcher._best
 *   _sp_verdicts.c  objects made from lookups: snapshot_verdicts, snapshot_checker,
 *                   policy_decide, snapshot_rules
 *                   ref. SnapshotMatcher.check_many, ._verdict_py and .rule
 *                   (match/snapshot/matcher.py),
 *                   policy/engine.py PolicyEngine.decide_many_py
 *   _sp_compile.c   lists into the rule format: compile_lines, table_place
 *                   ref. rules/readers.py plain_line, rules/load.py into
 *                   SnapshotBuilder.add; match/snapshot/build.py _table
 *   _sp_squid.c     Squid replies and line output: squid_scan, squid_reply, filter_reply,
 *                   quote_all
 *                   ref. gateway/protocol.py parse_request and _quote_all, gateway/squid.py
 *                   SquidHelper (batch loop, handle), cli/filter.py's per-line path
 *   _sp_neardup.c   near-duplicate documents (_neardup.h): simhash_text, simhash_str,
 *                   simhash_tokens, features_text, features_str, features_tokens,
 *                   nd_jaccard, nd_jaccard_many, nd_build, nd_query, nd_popcount
 *                   ref. neardup/simhash.py, neardup/index.py _Tables._lookup_py
 */
#include "_speedups.h"

static unsigned char *kept_scratch;
static int kept_scratch_out;

unsigned char *
sp_scratch_take(void)
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

void
sp_scratch_give(unsigned char *p)
{
    if (p != NULL && p == kept_scratch) {
        kept_scratch_out = 0;
    } else {
        PyMem_Free(p);
    }
}

int
sp_grow_reserve(growbuf *b, size_t extra)
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

int
sp_grow_put(growbuf *b, const void *data, size_t len)
{
    if (sp_grow_reserve(b, len) < 0) return -1;
    memcpy(b->p + b->n, data, len);
    b->n += len;
    return 0;
}

/* The module's method table: every unit's, in the order of the table of contents, filled
   at the first init (the module keeps a pointer to it). */
static const PyMethodDef *const unit_methods[] = {
    sp_scan_methods,
    sp_rewrite_methods,
    sp_hash_methods,
    sp_stores_methods,
    sp_lookup_methods,
    sp_verdicts_methods,
    sp_compile_methods,
    sp_squid_methods,
    sp_neardup_methods,
};
#define MAX_METHODS 64
static PyMethodDef methods[MAX_METHODS + 1];

static int
methods_fill(void)
{
    if (methods[0].ml_name != NULL) return 0;
    size_t n = 0;
    for (size_t u = 0; u < sizeof(unit_methods) / sizeof(unit_methods[0]); u++) {
        for (const PyMethodDef *m = unit_methods[u]; m->ml_name != NULL; m++) {
            if (n == MAX_METHODS) {
                PyErr_SetString(PyExc_SystemError, "urlsieve._speedups: MAX_METHODS is too small");
                memset(methods, 0, sizeof(methods));
                return -1;
            }
            methods[n++] = *m;
        }
    }
    return 0;
}

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "urlsieve._speedups",
    "Compiled hot paths of urlsieve; the pure-Python code is the reference.", -1, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    sp_scan_init();
    if (sp_rewrite_init() < 0) return NULL;
    if (sp_verdicts_init() < 0) return NULL;
    if (methods_fill() < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && sp_stores_init(m) < 0) Py_CLEAR(m);
    return m;
}
