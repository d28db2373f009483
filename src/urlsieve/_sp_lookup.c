/*
 * _sp_lookup.c: rule lookup in the compiled rule format (a unit of urlsieve._speedups;
 * _speedups.c has the table of contents). Python reference: SnapshotMatcher._best of
 * urlsieve/match/snapshot/matcher.py (tests/match/test_snapshot_engine.py holds it equal).
 * Here: the image's tables, one URL's lookup (sp_match_url), the warmed batch
 * (sp_match_batch, which the verdict and Squid units drive too), snapshot_match.
 */
#include "_speedups.h"

/* ---------------------------------------------------------------------------------------
 * The compiled rule format's batch lookup (urlsieve/match/snapshot/; the reference is
 * SnapshotMatcher._best, which the tests hold this equal to). Per URL on the canonical
 * fast path: the id of the deciding rule, -1 when none matches; -2 for a URL off the fast
 * path (the caller parses it). Every offset read from the image is checked against the
 * image, so a damaged or hostile image gives wrong answers at worst, never a bad read.
 */

/* The value stored for key in a table of 12-byte slots, 0 when it is absent. */
static uint32_t
probe(const unsigned char *table, uint64_t slots, uint64_t key)
{
    uint64_t i = slot_home(key, slots);
    for (uint64_t tries = 0; tries < slots; tries++) {
        const unsigned char *p = table + SLOT * i;
        uint64_t slot = rd64(p);
        if (slot == key) return rd32(p + 8);
        if (slot == 0) return 0;
        if (++i == slots) i = 0;
    }
    return 0;
}

/* The cache lines of a key's home slot (a 12-byte slot may cross into the next line). */
static inline void
prefetch_slot(const unsigned char *table, uint64_t slots, uint64_t key)
{
    const unsigned char *p = table + SLOT * slot_home(key, slots);
    PREFETCH_READ(p);
    PREFETCH_READ(p + SLOT - 1);
}

/* The rank of rule `id` if it matches expression e[0:elen] at this level, else -1. */
static int64_t
candidate(const image *im, uint64_t id, const unsigned char *e, size_t elen, int exact_path,
          int level)
{
    record rec;
    if (id >= im->n_rules || !read_record(im, id, &rec)) return -1;
    uint32_t off = rec.off, n_pat = rec.n_pat, n_host = rec.n_host, n_path = rec.n_path;
    int32_t n_query = rec.n_query;
    uint16_t category = rec.category, flags = rec.flags;
    if ((flags & (F_EXACT_HOST | F_IP)) && level) return -1;
    int anchored = (flags & F_ANCHORED) != 0;
    if (anchored && !exact_path) return -1;
    if (im->mask != NULL && (category >= im->mask_len || !im->mask[category])) return -1;
    uint64_t hp = (uint64_t)n_host + n_path;
    uint64_t stored_len = hp + (n_query > 0 ? (uint64_t)n_query : 0);
    uint64_t start = (uint64_t)off + n_pat;
    if (start > im->strings_len || stored_len > im->strings_len - start) return -1;
    const unsigned char *st = im->strings + start;
    int ok;
    if (n_query >= 0) {
        ok = elen == hp + 1 + (uint64_t)n_query && memcmp(e, st, hp) == 0 && e[hp] == '?'
             && memcmp(e + hp + 1, st + hp, (size_t)n_query) == 0;
    } else if (elen == hp) {
        ok = memcmp(e, st, hp) == 0;
    } else { /* the "/ads" rule stored under "/ads/" */
        ok = !anchored && elen == hp + 1 && memcmp(e, st, hp) == 0 && e[hp] == '/';
    }
    if (!ok) return -1;
    uint64_t path_len = n_query < 0 ? n_path : (uint64_t)n_path + (uint64_t)n_query + 1;
    if (path_len > 0x1FFFF) path_len = 0x1FFFF;
    /* urlsieve.rules.model.rank_of */
    return (int64_t)((uint64_t)n_host << 20 | path_len << 3 | (uint64_t)anchored << 2
                     | (uint64_t)((flags & F_EXACT_HOST) != 0) << 1 | (flags & F_ALLOW));
}

/* The rule ids an expression slot's value names: 0 when they are not in the image.
   *value is where a lone id is kept (ONE_RULE: the value is the id, the bit cleared). */
static inline int
posted(const image *im, uint32_t *value, const uint32_t **ids, uint64_t *count)
{
    if (*value & ONE_RULE) {
        *value ^= ONE_RULE;
        *ids = value;
        *count = 1;
        return 1;
    }
    uint64_t at = *value;
    if (at >= im->n_postings) return 0;
    uint64_t n = im->postings[at];
    if (n > im->n_postings - at - 1) return 0;
    *ids = im->postings + at + 1;
    *count = n;
    return 1;
}

static inline uint64_t
depth_bit(Py_ssize_t depth)
{
    return UINT64_C(1) << (depth < DEEP_BIT ? depth : DEEP_BIT);
}

/* The host levels a lookup probes, most specific first: host[start:hl] for start = 0 and
   after each ".", while labels (of the level) counts down; an IP address is one level. */
static inline Py_ssize_t
host_labels(const unsigned char *host, Py_ssize_t hl)
{
    Py_ssize_t labels = 1;
    for (Py_ssize_t k = 0; k < hl; k++) labels += host[k] == '.';
    return labels;
}

/* Whether the rule set has hosts of this many labels (the image's host-depth mask). */
static inline int
level_stored(const image *im, Py_ssize_t labels)
{
    return im->host_depths >> (labels < 63 ? labels : 63) & 1;
}

/* Move *start and *labels to the parent level: 0 when there is none. */
static inline int
parent_level(const unsigned char *host, Py_ssize_t hl, int is_ip, Py_ssize_t *start,
             Py_ssize_t *labels)
{
    if (is_ip) return 0;
    Py_ssize_t k = *start;
    while (k < hl && host[k] != '.') k++;
    if (k >= hl) return 0;
    *start = k + 1;
    (*labels)--;
    return 1;
}

/* The lookup text of a canonical URL s[0:n] in buf: host + lower(path or "/") +
   ["?" + lower(query)], so that every expression of a host level is one slice of it.
   *hl, *pl: the host's and the path's lengths; *ql: the query's, -1 without one. */
static void
lookup_text(const unsigned char *s, Py_ssize_t n, const spans *sp, unsigned char *buf,
            Py_ssize_t *hl, Py_ssize_t *pl, Py_ssize_t *ql)
{
    *hl = sp->host_end - sp->host_start;
    memcpy(buf, s + sp->host_start, (size_t)*hl);
    unsigned char *path = buf + *hl;
    if (sp->has_path) {
        *pl = sp->path_end - sp->host_end;
        for (Py_ssize_t k = 0; k < *pl; k++) {
            unsigned char c = s[sp->host_end + k];
            path[k] = (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
        }
    } else {
        *pl = 1;
        path[0] = '/';
    }
    *ql = -1;
    if (sp->query_start >= 0) {
        *ql = n - sp->query_start;
        path[*pl] = '?';
        for (Py_ssize_t k = 0; k < *ql; k++) {
            unsigned char c = s[sp->query_start + k];
            path[*pl + 1 + k] = (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
        }
    }
}

/* The expressions of one host level, most specific first: the query expression, the
   path, then each prefix ending at a "/". `end` is the expression's length past the host
   (-1: the query expression), `bit` its depth bit in the host's depths, `exact_path`
   whether it is the whole path. */
typedef struct {
    const unsigned char *path;
    Py_ssize_t pl, ql, slashes, end, depth, cut;
    uint64_t bit;
    int exact_path, stage;
} expr_walk;

static inline void
walk_start(expr_walk *w, const unsigned char *path, Py_ssize_t pl, Py_ssize_t ql,
           Py_ssize_t slashes)
{
    *w = (expr_walk){.path = path, .pl = pl, .ql = ql, .slashes = slashes,
                     .end = ql >= 0 ? -1 : pl, .depth = 0, .cut = -1,
                     .bit = ql >= 0 ? QUERY_BIT : depth_bit(slashes),
                     .exact_path = 1, .stage = ql >= 0 ? 0 : 1};
}

/* The expression's length (host excluded). */
static inline size_t
walk_len(const expr_walk *w)
{
    return (size_t)(w->end < 0 ? w->pl + 1 + w->ql : w->end);
}

/* Move to the next expression: 0 when there is none. */
static inline int
walk_next(expr_walk *w)
{
    if (w->stage == 0) {
        w->stage = 1;
        w->end = w->pl;
        w->bit = depth_bit(w->slashes);
        return 1;
    }
    if (w->stage == 1) {
        w->stage = 2;
        w->depth = w->path[w->pl - 1] == '/' ? w->slashes - 1 : w->slashes;
        w->cut = w->pl - 1;
    } else {
        w->depth--;
    }
    /* cut = rfind("/", 0, cut) */
    Py_ssize_t c = w->cut - 1;
    while (c >= 0 && w->path[c] != '/') c--;
    if (c < 0) return 0;
    w->cut = c;
    w->end = c + 1;
    w->bit = depth_bit(w->depth);
    w->exact_path = 0;
    return 1;
}

static inline Py_ssize_t
count_slashes(const unsigned char *path, Py_ssize_t pl)
{
    Py_ssize_t slashes = 0;
    for (Py_ssize_t k = 0; k < pl; k++) slashes += path[k] == '/';
    return slashes;
}

/* Rule `id`, the one rule of host[0:host_len], if it matches one of the level's
   expressions (the most specific it matches: -1 for none). What probing the expression
   table would find: a rule is stored under every expression `candidate` takes for it
   (rules.model.storage_keys), or under a shorter one the URL also has, with the same
   rank. */
static int64_t
lone_rule(const image *im, uint64_t id, const unsigned char *host, size_t host_len,
          const unsigned char *path, Py_ssize_t pl, Py_ssize_t ql, Py_ssize_t slashes, int level)
{
    expr_walk w;
    walk_start(&w, path, pl, ql, slashes);
    do {
        if (candidate(im, id, host, host_len + walk_len(&w), w.exact_path, level) >= 0)
            return (int64_t)id;
    } while (walk_next(&w));
    return -1;
}

/* The rule deciding s[0:n], -1 for none, -2 off the fast path. buf: scratch of n + 1
   bytes (a "/" is added when there is no path). */
int64_t
sp_match_one(const image *im, const unsigned char *s, Py_ssize_t n, const spans *spp,
          unsigned char *buf)
{
    Py_ssize_t hl, pl, ql;
    lookup_text(s, n, spp, buf, &hl, &pl, &ql);
    const unsigned char *path = buf + hl;
    Py_ssize_t slashes = count_slashes(path, pl);
    Py_ssize_t labels = host_labels(buf, hl), start = 0;
    for (int level = 0;; level++) {
        if (level_stored(im, labels)) {
            const unsigned char *host = buf + start;
            size_t host_len = (size_t)(hl - start);
            uint32_t depths = probe(im->hosts, im->host_slots, h64(host, host_len));
            if (depths & LONE_HOST) {
                int64_t id = lone_rule(im, depths ^ LONE_HOST, host, host_len, path, pl, ql,
                                       slashes, level);
                if (id >= 0) return id;
            } else if (depths) {
                int64_t best_rank = -1, best_id = -1;
                expr_walk w;
                walk_start(&w, path, pl, ql, slashes);
                do {
                    if (!(depths & w.bit)) continue;
                    size_t elen = host_len + walk_len(&w);
                    uint32_t value = probe(im->exprs, im->expr_slots, h64(host, elen));
                    if (!value) continue;
                    const uint32_t *ids;
                    uint64_t count;
                    if (!posted(im, &value, &ids, &count)) continue;
                    for (uint64_t k = 0; k < count; k++) {
                        uint64_t id = ids[k];
                        int64_t rank = candidate(im, id, host, elen, w.exact_path, level);
                        if (rank > best_rank) {
                            best_rank = rank;
                            best_id = (int64_t)id;
                        }
                    }
                } while (walk_next(&w));
                if (best_id >= 0) return best_id;
            }
        }
        if (!parent_level(buf, hl, spp->is_ip, &start, &labels)) return -1;
    }
}

/* The canonical-form bytes a lookup matches the URL s[0:n] as: 1 with *text (s, or its
   rewrite in `rewritten`: REWRITE_CAP bytes), *len and *sp; 0 off the fast path. */
static int
lookup_form(const unsigned char *s, Py_ssize_t n, unsigned char *rewritten,
            const unsigned char **text, Py_ssize_t *len, spans *sp)
{
    return n <= MAX_URL - 8 && sp_scan_or_rewrite(s, n, 1, rewritten, text, len, sp, 0);
}

/* ---- Warming: the memory a URL's lookup will read, asked for a few URLs ahead --------
 * At 1M rules each lookup that finds its host waits on a chain of cache misses: the
 * expression slot, the postings (of an expression two rules or more share), the rule
 * record, the rule's strings; for a host with one rule (format 6), the record and the
 * strings straight after the host slot. snapshot_match walks
 * that chain for the URLs ahead of the one it matches, one link per URL step, with
 * prefetches only: what sp_match_one then reads is in the cache. The walk decides nothing
 * (sp_match_one alone does, unchanged), so it may stop short anywhere; every read is
 * bounds-checked as sp_match_one's are. */
#define WARM_MAX 16
/* A rewritten URL up to this long is kept in its ring slot (rewritten when its host slots
   are asked for, then matched as kept); a longer one is rewritten again when matched. */
#define WARM_TEXT 1024
/* The one-rule hosts of a URL whose rules are warmed (a URL has a few host levels). */
#define WARM_LONE 4

enum { WARM_NONE, WARM_AS_IS, WARM_REWRITTEN, WARM_REFUSED };

typedef struct {
    /* WARM_AS_IS: canonical as it is (sp its scan); WARM_REWRITTEN: text[0:len] is its
       rewrite (sp that text's scan); WARM_REFUSED: off the fast path (-2); WARM_NONE:
       matched without warming */
    int state;
    spans sp;
    int n; /* what v holds: expression keys, then table values, then rule ids */
    uint64_t v[WARM_MAX];
    int n_lone; /* the rules of one-rule hosts found (their records asked for already) */
    uint32_t lone[WARM_LONE];
    Py_ssize_t len;
    unsigned char text[WARM_TEXT];
} warm_url;

/* Step 0: the URL s[0:n] scanned, or rewritten into u->text (lookup_form, kept for when
   it is matched), and its host slots asked for. */
static void
warm_hosts(const image *im, const unsigned char *s, Py_ssize_t n, warm_url *u,
           unsigned char *rewritten)
{
    const unsigned char *text;
    Py_ssize_t len;
    u->n = 0;
    u->n_lone = 0;
    if (!lookup_form(s, n, rewritten, &text, &len, &u->sp)) {
        u->state = WARM_REFUSED;
        return;
    }
    if (text == s) {
        u->state = WARM_AS_IS;
    } else if (len > WARM_TEXT) {
        u->state = WARM_NONE; /* rewritten again when matched */
        return;
    } else {
        memcpy(u->text, text, (size_t)len);
        u->len = len;
        u->state = WARM_REWRITTEN;
        s = u->text;
    }
    const unsigned char *host = s + u->sp.host_start;
    Py_ssize_t hl = u->sp.host_end - u->sp.host_start, labels = host_labels(host, hl), start = 0;
    do { /* the levels of sp_match_one, in its order */
        if (level_stored(im, labels)) {
            uint64_t key = h64(host + start, (size_t)(hl - start));
            prefetch_slot(im->hosts, im->host_slots, key);
        }
    } while (parent_level(host, hl, u->sp.is_ip, &start, &labels));
}

/* Step 1: the expression slots of every stored host level's expressions; for a host
   with one rule, that rule's record. */
static void
warm_exprs(const image *im, PyObject *url, warm_url *u, unsigned char *buf)
{
    u->n = 0;
    u->n_lone = 0;
    const unsigned char *s;
    Py_ssize_t n;
    if (u->state == WARM_REWRITTEN) {
        s = u->text;
        n = u->len;
    } else if (u->state == WARM_AS_IS) { /* an ASCII str */
        s = PyUnicode_1BYTE_DATA(url);
        n = PyUnicode_GET_LENGTH(url);
    } else {
        return;
    }
    Py_ssize_t hl, pl, ql;
    lookup_text(s, n, &u->sp, buf, &hl, &pl, &ql);
    const unsigned char *path = buf + hl;
    Py_ssize_t slashes = count_slashes(path, pl);
    Py_ssize_t labels = host_labels(buf, hl), start = 0;
    do {
        if (!level_stored(im, labels)) continue;
        const unsigned char *host = buf + start;
        size_t host_len = (size_t)(hl - start);
        uint32_t depths = probe(im->hosts, im->host_slots, h64(host, host_len));
        if (depths & LONE_HOST) {
            uint32_t id = depths ^ LONE_HOST;
            if (id < im->n_rules && u->n_lone < WARM_LONE) {
                PREFETCH_READ(im->rules + RECORD * (uint64_t)id);
                u->lone[u->n_lone++] = id;
            }
            continue;
        }
        if (!depths) continue;
        expr_walk w;
        walk_start(&w, path, pl, ql, slashes);
        do {
            if (!(depths & w.bit)) continue;
            if (u->n == WARM_MAX) return;
            uint64_t key = h64(host, host_len + walk_len(&w));
            prefetch_slot(im->exprs, im->expr_slots, key);
            u->v[u->n++] = key;
        } while (walk_next(&w));
    } while (parent_level(buf, hl, u->sp.is_ip, &start, &labels));
}

/* A rule's strings, or for a rule with an extra, the extra (its strings are read cold). */
static inline void
warm_rule_strings(const image *im, uint64_t id)
{
    const record rec = record_itself(im, id);
    if (rec.flags & F_EXTRA) {
        if (rec.off < im->n_extras) PREFETCH_READ(im->extras + EXTRA * (uint64_t)rec.off);
    } else if (rec.off < im->strings_len) {
        /* host and path: both ends (they cross a cache line about every third rule) */
        uint64_t end = (uint64_t)rec.off + rec.n_host + rec.n_path;
        PREFETCH_READ(im->strings + rec.off);
        if (end > rec.off && end <= im->strings_len) PREFETCH_READ(im->strings + end - 1);
    }
}

/* Step 2: the postings of the expressions found (a lone rule's id is in its slot). */
static void
warm_postings(const image *im, warm_url *u)
{
    int kept = 0;
    for (int j = 0; j < u->n; j++) {
        uint32_t value = probe(im->exprs, im->expr_slots, u->v[j]);
        if (!value) continue;
        if (!(value & ONE_RULE) && value < im->n_postings) PREFETCH_READ(im->postings + value);
        u->v[kept++] = value;
    }
    u->n = kept;
}

/* Step 3: the records of the rules posted; the strings of a one-rule host's rule (its
   record was asked for in step 1). */
static void
warm_records(const image *im, warm_url *u)
{
    uint64_t values[WARM_MAX];
    int n = u->n, kept = 0;
    memcpy(values, u->v, (size_t)n * sizeof *values);
    for (int j = 0; j < n; j++) {
        uint32_t value = (uint32_t)values[j];
        const uint32_t *ids;
        uint64_t count;
        if (!posted(im, &value, &ids, &count)) continue;
        for (uint64_t k = 0; k < count && kept < WARM_MAX; k++) {
            uint64_t id = ids[k];
            if (id >= im->n_rules) continue;
            PREFETCH_READ(im->rules + RECORD * id);
            u->v[kept++] = id;
        }
    }
    /* (the one-rule hosts' rules are warm: the ids of v are those posted) */
    for (int j = 0; j < u->n_lone; j++) warm_rule_strings(im, u->lone[j]);
    u->n_lone = 0;
    u->n = kept;
}

/* Step 4: the strings of the rules posted (a one-rule host's were asked for in step 3). */
static void
warm_strings(const image *im, const warm_url *u)
{
    for (int j = 0; j < u->n; j++) warm_rule_strings(im, u->v[j]);
}

/* Fill *im from an image buffer and its layout tuple (SnapshotMatcher._layout): 0 with an
   error set when the layout does not fit the buffer (tables of 1 .. 2**32 slots,
   sections 8-byte aligned inside it). The mask is the caller's to set. */
int
sp_image_open(const Py_buffer *img, PyObject *layout, image *im)
{
    if (!PyTuple_Check(layout) || PyTuple_GET_SIZE(layout) != 13) {
        PyErr_SetString(PyExc_TypeError, "layout must be a tuple of 13 ints");
        return 0;
    }
    uint64_t v[13];
    for (int k = 0; k < 13; k++) {
        v[k] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(layout, k));
        if (v[k] == (uint64_t)-1 && PyErr_Occurred()) return 0;
    }
    uint64_t size = (uint64_t)img->len;
    /* sections: (offset, bytes) inside the image, 8-byte aligned; tables of 1 .. 2**32
       slots */
    uint64_t sect[6][2] = {{v[0], v[1] * SLOT}, {v[2], v[3] * SLOT}, {v[4], v[5] * 4},
                           {v[6], v[7] * RECORD}, {v[8], v[9] * EXTRA}, {v[10], v[11]}};
    int bad = v[1] == 0 || v[3] == 0 || v[1] > (UINT64_C(1) << 32) || v[3] > (UINT64_C(1) << 32)
              || v[1] > size || v[3] > size || v[5] > size || v[7] > size || v[9] > size;
    for (int k = 0; !bad && k < 6; k++) {
        bad = sect[k][0] % 8 || sect[k][0] > size || sect[k][1] > size - sect[k][0];
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "the layout does not fit the image");
        return 0;
    }
    const unsigned char *base = img->buf;
    *im = (image){
        .base = base, .size = img->len,
        .hosts = base + v[0], .host_slots = v[1],
        .exprs = base + v[2], .expr_slots = v[3],
        .postings = (const uint32_t *)(base + v[4]), .n_postings = v[5],
        .rules = base + v[6], .n_rules = v[7],
        .extras = base + v[8], .n_extras = v[9],
        .strings = base + v[10], .strings_len = v[11],
        .host_depths = v[12],
        .mask = NULL, .mask_len = 0,
    };
    return 1;
}

/* The rule deciding the URL s[0:n] (-1: none; -2: off the fast path, the caller parses
   it), with *text, *len and *sp the canonical-form bytes it was matched as. buf: scratch
   of MAX_URL + 16 bytes, rewritten: REWRITE_CAP bytes. Neither the scan nor the rewrite
   takes a byte above 0x7E (outside a fragment, which the rewrite drops, as the reader
   does), so the URL's bytes need no pass of their own here. */
int64_t
sp_match_url(const image *im, const unsigned char *s, Py_ssize_t n, unsigned char *buf,
          unsigned char *rewritten, const unsigned char **text, Py_ssize_t *len, spans *sp)
{
    if (!lookup_form(s, n, rewritten, text, len, sp)) return -2;
    return sp_match_one(im, *text, *len, sp, buf);
}

/* How many URLs ahead snapshot_match asks for their host-table slots, and for each later
   link of the lookup's chain (warm_exprs .. warm_strings). WARM_RING: a power of two above
   HOSTS_AHEAD. */
#define HOSTS_AHEAD 8
#define EXPRS_AHEAD 4
#define POSTINGS_AHEAD 3
#define RECORDS_AHEAD 2
#define STRINGS_AHEAD 1
#define WARM_RING 16

/* The canonical string of the URL `url` matched as text[0:len] (spans sp): the URL
   itself when it was canonical as it came (text its own bytes), else a new string. */
PyObject *
sp_form_of(PyObject *url, const unsigned char *text, Py_ssize_t len, const spans *sp)
{
    /* (an instance of a str subclass is copied: the form is a str, as Python's) */
    return text == PyUnicode_1BYTE_DATA(url) && PyUnicode_CheckExact(url)
               ? sp_canonical_of(url, sp)
               : sp_canonical_text(text, len, sp);
}

/* The warmed lookup of every URL of the list `refs`, in order, each answer given to the
   sink (an item that is not an ASCII str is off the fast path). The list must not change
   during the call: the caller holds a copy, or its sink runs no Python code. buf:
   sp_scratch_take's block. Returns how many URLs were off the fast path, -1 when the sink
   failed. */
Py_ssize_t
sp_match_batch(image *im, PyObject *refs, const mask_rows *rows, unsigned char *buf,
            match_sink sink, void *ctx)
{
    Py_ssize_t n_urls = PyList_GET_SIZE(refs);
    unsigned char *rewritten = buf + MAX_URL + 16;
    warm_url ring[WARM_RING];
    for (int j = 0; j < WARM_RING; j++) {
        ring[j].state = WARM_NONE;
        ring[j].n = 0;
        ring[j].n_lone = 0;
    }
    Py_ssize_t left = 0; /* URLs off the fast path (-2) */
    for (Py_ssize_t k = -HOSTS_AHEAD; k < n_urls; k++) {
        /* URL k + HOSTS_AHEAD's host slots are asked for, the later links of the URLs
           between are warmed, then URL k is matched */
        Py_ssize_t next = k + HOSTS_AHEAD; /* cannot overflow: n_urls is a list's size */
        if (next + PREFETCH < n_urls) prefetch_str(PyList_GET_ITEM(refs, next + PREFETCH));
        if (k >= 0) {
            PyObject *url = PyList_GET_ITEM(refs, k);
            warm_url *u = &ring[k % WARM_RING];
            const unsigned char *text = NULL;
            Py_ssize_t len = 0;
            spans sp;
            int64_t id;
            if (!PyUnicode_Check(url) || !PyUnicode_IS_ASCII(url)) {
                id = -2; /* (not a str: left to the caller) */
            } else {
                if (rows->row_at != NULL) {
                    im->mask = rows->base + rows->row_at[k];
                    im->mask_len = rows->stride;
                }
                text = PyUnicode_1BYTE_DATA(url);
                len = PyUnicode_GET_LENGTH(url);
                if (u->state == WARM_AS_IS) { /* scanned already */
                    sp = u->sp;
                    id = sp_match_one(im, text, len, &sp, buf);
                } else if (u->state == WARM_REWRITTEN) { /* rewritten already */
                    sp = u->sp;
                    text = u->text;
                    len = u->len;
                    id = sp_match_one(im, text, len, &sp, buf);
                } else if (u->state == WARM_REFUSED) {
                    id = -2;
                } else {
                    id = sp_match_url(im, text, len, buf, rewritten, &text, &len, &sp);
                }
            }
            left += id == -2;
            if (sink(ctx, k, url, id, text, len, &sp) < 0) return -1;
        }
        /* the links ahead, the furthest first (each URL's previous link was asked for one
           step ago) */
        if (k + EXPRS_AHEAD >= 0 && k + EXPRS_AHEAD < n_urls)
            warm_exprs(im, PyList_GET_ITEM(refs, k + EXPRS_AHEAD),
                       &ring[(k + EXPRS_AHEAD) % WARM_RING], buf);
        if (k + POSTINGS_AHEAD >= 0 && k + POSTINGS_AHEAD < n_urls)
            warm_postings(im, &ring[(k + POSTINGS_AHEAD) % WARM_RING]);
        if (k + RECORDS_AHEAD >= 0 && k + RECORDS_AHEAD < n_urls)
            warm_records(im, &ring[(k + RECORDS_AHEAD) % WARM_RING]);
        if (k + STRINGS_AHEAD >= 0 && k + STRINGS_AHEAD < n_urls)
            warm_strings(im, &ring[(k + STRINGS_AHEAD) % WARM_RING]);
        /* URL next takes the slot URL next - WARM_RING has left */
        if (next < n_urls) {
            warm_url *u = &ring[next % WARM_RING];
            PyObject *later = PyList_GET_ITEM(refs, next);
            u->state = WARM_NONE;
            u->n = 0;
            u->n_lone = 0;
            if (PyUnicode_Check(later) && PyUnicode_IS_ASCII(later))
                warm_hosts(im, PyUnicode_1BYTE_DATA(later), PyUnicode_GET_LENGTH(later), u,
                           rewritten);
        }
    }
    return left;
}

/* A copy of snapshot_match's `urls` (a list) when every item is a str, else NULL with a
   TypeError naming the first that is not. */
PyObject *
sp_held_strings(PyObject *urls)
{
    PyObject *refs = PyList_GetSlice(urls, 0, PyList_GET_SIZE(urls));
    if (refs == NULL) return NULL;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(refs); k++) {
        if (!PyUnicode_Check(PyList_GET_ITEM(refs, k))) {
            PyErr_Format(PyExc_TypeError, "snapshot_match: urls[%zd] is %.100s, not str", k,
                         Py_TYPE(PyList_GET_ITEM(refs, k))->tp_name);
            Py_DECREF(refs);
            return NULL;
        }
    }
    return refs;
}

/* snapshot_match's sink: the ids into an int64 buffer, the canonical forms (when asked
   for) into a list. */
typedef struct {
    int64_t *ids;
    PyObject *canon;
} ids_sink;

static int
ids_put(void *ctx, Py_ssize_t k, PyObject *url, int64_t id, const unsigned char *text,
        Py_ssize_t len, const spans *sp)
{
    ids_sink *out = ctx;
    out->ids[k] = id;
    if (id == -2 || out->canon == NULL) return 0;
    /* Dropping an old item of `canonical` may run Python code that resizes it. */
    if (k >= PyList_GET_SIZE(out->canon)) {
        PyErr_SetString(PyExc_RuntimeError, "snapshot_match: a list changed size");
        return -1;
    }
    PyObject *form = sp_form_of(url, text, len, sp);
    if (form == NULL) return -1;
    PyObject *old = PyList_GET_ITEM(out->canon, k);
    PyList_SET_ITEM(out->canon, k, form);
    Py_DECREF(old);
    return 0;
}

static PyObject *
snapshot_match(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 5 && nargs != 6 && nargs != 8) {
        PyErr_SetString(PyExc_TypeError,
                        "snapshot_match(image, layout, urls, mask, out[, canonical[, rows, "
                        "stride]]) takes 5, 6 or 8 arguments");
        return NULL;
    }
    PyObject *layout = args[1], *urls = args[2], *mask_obj = args[3];
    PyObject *canon = nargs >= 6 && args[5] != Py_None ? args[5] : NULL;
    /* Per-URL masks: mask holds rows of `stride` bytes, rows[k] is the byte offset of
     * URL k's row (the policy engine: one pass list per client, one call per batch). */
    Py_ssize_t stride = 0;
    if (nargs == 8) {
        stride = PyLong_AsSsize_t(args[7]);
        if (stride == -1 && PyErr_Occurred()) return NULL;
        if (stride < 0 || mask_obj == Py_None) {
            PyErr_SetString(PyExc_ValueError,
                            "snapshot_match: rows need a mask and a stride >= 0");
            return NULL;
        }
    }
    if (canon != NULL
        && (!PyList_Check(canon) || !PyList_Check(urls)
            || PyList_GET_SIZE(canon) != PyList_GET_SIZE(urls))) {
        PyErr_SetString(PyExc_TypeError,
                        "snapshot_match: canonical must be a list as long as urls");
        return NULL;
    }
    if (!PyList_Check(urls)) {
        PyErr_SetString(PyExc_TypeError, "snapshot_match: urls must be a list of str");
        return NULL;
    }
    Py_buffer img, out, mask = {0}, rows = {0};
    if (PyObject_GetBuffer(args[0], &img, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[4], &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&img);
        return NULL;
    }
    if (mask_obj != Py_None && PyObject_GetBuffer(mask_obj, &mask, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&img);
        PyBuffer_Release(&out);
        return NULL;
    }
    if (nargs == 8 && PyObject_GetBuffer(args[6], &rows, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&img);
        PyBuffer_Release(&out);
        PyBuffer_Release(&mask);
        return NULL;
    }
    PyObject *result = NULL, *refs = NULL;
    unsigned char *buf = NULL;
    Py_ssize_t n_urls = PyList_GET_SIZE(urls);
    const int64_t *row_at = rows.obj ? rows.buf : NULL;
    if (row_at != NULL) {
        int bad_rows = rows.len != 8 * n_urls;
        for (Py_ssize_t k = 0; k < n_urls && !bad_rows; k++) {
            bad_rows = row_at[k] < 0 || row_at[k] > mask.len - stride;
        }
        if (bad_rows) {
            PyErr_SetString(PyExc_ValueError,
                            "snapshot_match: rows must hold one int64 per URL, each the offset "
                            "of a whole row of the mask");
            goto done;
        }
    }
    image im;
    if (out.len != 8 * n_urls) {
        PyErr_SetString(PyExc_ValueError, "snapshot_match: out must be one int64 per URL");
        goto done;
    }
    if (!sp_image_open(&img, layout, &im)) goto done;
    im.mask = mask.obj ? mask.buf : NULL;
    im.mask_len = mask.obj ? mask.len : 0;
    buf = sp_scratch_take();
    if (buf == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* The strings, held: Python code run below (dropping an old item of `canonical`)
       cannot change what a URL whose host slots were asked for ahead is. */
    refs = sp_held_strings(urls);
    if (refs == NULL) goto done;
    mask_rows per_url = {.base = mask.obj ? mask.buf : NULL, .row_at = row_at, .stride = stride};
    ids_sink sink = {.ids = out.buf, .canon = canon};
    Py_ssize_t left = sp_match_batch(&im, refs, &per_url, buf, ids_put, &sink);
    if (left >= 0) result = PyLong_FromSsize_t(left);
done:
    Py_XDECREF(refs);
    sp_scratch_give(buf);
    PyBuffer_Release(&img);
    PyBuffer_Release(&out);
    if (mask.obj) PyBuffer_Release(&mask);
    if (rows.obj) PyBuffer_Release(&rows);
    return result;
}

const PyMethodDef sp_lookup_methods[] = {
    {"snapshot_match", (PyCFunction)(void (*)(void))snapshot_match, METH_FASTCALL,
     "snapshot_match(image, layout, urls, mask, out[, canonical[, rows, stride]]) -> int\n\n"
     "Per URL of the list, the id of the deciding rule of a compiled image into out\n"
     "(int64): -1 when no rule matches, -2 off the canonical fast path (returns how\n"
     "many are); with a list\n"
     "`canonical` as long as urls, each fast-path URL's canonical form is stored in it.\n"
     "With rows (int64 per URL) and stride, URL k uses the mask bytes\n"
     "mask[rows[k]:rows[k] + stride] (a pass list per client)."},
    {NULL, NULL, 0, NULL},
};
