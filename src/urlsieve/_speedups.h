/*
 * _speedups.h: the declarations urlsieve._speedups' units share (the table of contents is
 * at the top of _speedups.c). What one unit alone uses stays static in it; what several
 * use is here: the limits, the shared types and small inline readers, and the sp_
 * functions and tables, hidden from the shared object's exports (only PyInit__speedups
 * is visible).
 */
#ifndef URLSIEVE_SPEEDUPS_H
#define URLSIEVE_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* XXH3 (our own, from the published specification): the hash of the snapshot tables and
   of the seen stores' fingerprints, the same function as the xxhash package on the Python
   side. */
#include "_xxh3.h"

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif

#define MAX_URL 65536

/* How many items ahead a batch loop asks for the memory of (a list's strings are
   scattered over the heap: each is a cache miss the loop would otherwise wait for). */
#define PREFETCH 32
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

/* A growing output buffer (PyMem); sp_grow_put: -1 when out of memory. */
typedef struct {
    char *p;
    size_t n, cap;
} growbuf;

/* HOST: [a-z0-9_.-]; HOST_EXT: the other code points a canonical host may hold (printable
   ASCII but upper case and WHATWG's forbidden ones, url/host.py's check_host_chars). */
enum { HOST = 1, HOST_EXT = 2, SEG = 4, QUERY = 8 };
extern unsigned char sp_cls[128];
extern unsigned char sp_quote_safe[256]; /* A-Z a-z 0-9 _ . - ~ */

/* Where sp_scan_canonical found the parts of a canonical URL in s[0:n]. */
typedef struct {
    int has_scheme, has_path;
    Py_ssize_t host_start, host_end, path_end, query_start; /* query_start: -1 without "?" */
    int is_ip;
} spans;

/* The canonical form of text[0:n], which sp_scan_canonical accepted into *sp, written to o
   (room for n + 8 bytes): "http://" and the "/" of an empty path added. Its length. */
static inline Py_ssize_t
write_canonical(unsigned char *o, const unsigned char *text, Py_ssize_t n, const spans *sp)
{
    const Py_ssize_t prefix = sp->has_scheme ? 0 : 7, slash = sp->has_path ? 0 : 1;
    if (prefix) memcpy(o, "http://", 7);
    memcpy(o + prefix, text, (size_t)sp->host_end);
    if (slash) o[prefix + sp->host_end] = '/';
    memcpy(o + prefix + sp->host_end + slash, text + sp->host_end, (size_t)(n - sp->host_end));
    return n + prefix + slash;
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

static inline int
hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

typedef struct {
    unsigned char *buf; /* PyMem: the encoded str, then the rewrite (NULL when unused) */
    const unsigned char *text;
    Py_ssize_t len;
    spans sp;
} one_url;

/* ---- The compiled rule format (urlsieve/match/snapshot/format.py) ---- */

/* A key's home slot in a table of `slots` (at most 2**32) slots: the top 32 bits of the
   key scaled to the table (match/snapshot/format.py's _home), so any slot count works. */
static inline uint64_t
slot_home(uint64_t key, uint64_t slots)
{
    return ((key >> 32) * slots) >> 32;
}

/* A table slot of the compiled rule format: u64 key, u32 value (snapshot/format.py's _SLOT). */
#define SLOT 12

enum { F_ALLOW = 1, F_EXACT_HOST = 2, F_ANCHORED = 4, F_IP = 8, F_EXTRA = 64 };
/* a host slot's value with this bit set is the id of the host's one rule; else its
   path-depth mask, with these bits */
#define LONE_HOST (UINT32_C(1) << 31)
#define QUERY_BIT (UINT64_C(1) << 30)
#define DEEP_BIT 29 /* path depths from 29 on share one bit */
/* an expression slot's value with this bit set is the one rule id stored under it */
#define ONE_RULE (UINT32_C(1) << 31)
/* rule records and extras (snapshot/format.py's _RECORD, _EXTRA_RECORD) */
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

#define F_ALLOW 1
#define F_PATTERN_HOST 16
#define F_PATTERN_HOST_PATH 32

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

static inline uint16_t
rd16(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* A rule as its record (snapshot/format.py's _RECORD, "<IIHHHBB", 16 bytes) and, with F_EXTRA,
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

/* ---- Functions and tables shared across units ---- */

/* _speedups.c */
unsigned char *sp_scratch_take(void);
void sp_scratch_give(unsigned char *p);
int sp_grow_reserve(growbuf *b, size_t extra);
int sp_grow_put(growbuf *b, const void *data, size_t len);

/* _sp_scan.c */
int sp_scan_canonical(const unsigned char *s, Py_ssize_t n, int allow_query, spans *sp);
PyObject *sp_canonical_text(const unsigned char *text, Py_ssize_t n, const spans *sp);
PyObject *sp_canonical_of(PyObject *url, const spans *sp);
void sp_scan_init(void);

/* _sp_rewrite.c */
int sp_scan_or_rewrite(const unsigned char *s, Py_ssize_t n, int allow_query, unsigned char *buf,
                       const unsigned char **text, Py_ssize_t *len, spans *sp, int how);
Py_ssize_t sp_url_bytes(PyObject *text, unsigned char *out);
int sp_one_url_scan(PyObject *url, int allow_query, int how, one_url *u);
int sp_one_url_args(const char *name, const char *usage, PyObject *const *args, Py_ssize_t nargs,
                    Py_ssize_t want, int *allow_query, int *keep_port);
int sp_rewrite_init(void);

/* _sp_hash.c */
/* A profile's query steps beyond the default (url/profile.py's query_plan): the names
   and prefixes of the parameters dropped (tuples of bytes, borrowed from the plan), and
   whether to drop them, sort the parameters, drop an emptied query's "?". */
typedef struct {
    PyObject *exact, *prefixes;
    int drop, sort, drop_empty;
} key_plan;
int sp_key_plan_of(PyObject *arg, key_plan *kp);
int sp_url_key(PyObject *url, int allow_query, int keep_port, const key_plan *kp, int planned,
               int bits, uint64_t o[2]);
int sp_key_arg(const char *name, PyObject *arg, uint64_t *v);
void sp_url_runs_close(url_runs *r);
int sp_url_runs_open(url_runs *r, const char *name, PyObject *urls, PyObject *allow_query,
                     PyObject *keep_port);
Py_ssize_t sp_url_runs_copy(url_runs *r, Py_ssize_t run);
int sp_url_runs_hash(url_runs *r, Py_ssize_t k, int bits, uint64_t *o);
PyObject *sp_url_runs_rest(const url_runs *r);

/* _sp_stores.c */
int sp_stores_init(PyObject *module);

/* _sp_verdicts.c */
int sp_verdicts_init(void);

/* _sp_lookup.c */
int64_t sp_match_one(const image *im, const unsigned char *s, Py_ssize_t n, const spans *spp,
                     unsigned char *buf);
int sp_image_open(const Py_buffer *img, PyObject *layout, image *im);
int64_t sp_match_url(const image *im, const unsigned char *s, Py_ssize_t n, unsigned char *buf,
                     unsigned char *rewritten, const unsigned char **text, Py_ssize_t *len,
                     spans *sp);
PyObject *sp_form_of(PyObject *url, const unsigned char *text, Py_ssize_t len, const spans *sp);
Py_ssize_t sp_match_batch(image *im, PyObject *refs, const mask_rows *rows, unsigned char *buf,
                          match_sink sink, void *ctx);
PyObject *sp_held_strings(PyObject *urls);

/* Each unit's methods, ended by a NULL entry. */
extern const PyMethodDef sp_scan_methods[];
extern const PyMethodDef sp_rewrite_methods[];
extern const PyMethodDef sp_hash_methods[];
extern const PyMethodDef sp_stores_methods[];
extern const PyMethodDef sp_lookup_methods[];
extern const PyMethodDef sp_verdicts_methods[];
extern const PyMethodDef sp_compile_methods[];
extern const PyMethodDef sp_squid_methods[];
extern const PyMethodDef sp_neardup_methods[];

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif /* URLSIEVE_SPEEDUPS_H */
