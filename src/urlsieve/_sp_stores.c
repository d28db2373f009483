/*
 * _sp_stores.c: the seen stores' tables (a unit of urlsieve._speedups; _speedups.c has the
 * table of contents). Python references: the numpy code of urlsieve/seen/bloom.py and
 * seen/exact.py, and the stores' Python sessions over seen/_mapped.py's file (tests/seen/:
 * test_bloom_speedups.py, test_bloom_urls.py, test_exact_speedups.py, test_one_url.py).
 * Here: bloom_test, bloom_insert, exact_lookup, exact_insert, exact_add_locked and
 * bloom_add_locked (one add: lock-free, or under the file lock), store_session (the
 * locked sections' header steps beside lock-free adds; tests/seen/test_lockfree.py),
 * SeenSingle (the stores' add(url) and `in` in one call; ref. seen/_single.py), bloom_urls.
 */
#include "_speedups.h"

/* ---------------------------------------------------------------------------------------
 * The seen stores' batch tables (urlsieve/seen/bloom.py and exact.py; their numpy code is
 * the reference, which the tests hold these equal to).
 *
 * bloom_test / bloom_insert take one layer of the blocked Bloom filter (whole 64-byte
 * blocks of 8 words) and the fingerprints as n rows of (h1, h2); the block and the bits
 * of a row are computed here, as bloom.py's _masks and _Layer.block_of define them.
 * bloom_insert tests the batch against the layer as it is, keeping only the first of
 * identical fingerprints, raises the layer's count (a one-word array in the mapping)
 * by the fresh ones, then sets their bits: the count first, as the module doc says.
 *
 * exact_lookup / exact_insert take the exact store's table (buckets of 8 slots, 0 for
 * empty, linear probing by buckets) and non-zero 64-bit keys. exact_insert adds them in
 * order (a repeat finds its first) and returns how many were new, or -1 when it found the
 * table full (a damaged store: the caller's load limit keeps slots free).
 */

/* How many rows ahead the table loops ask for the block or bucket a row will read. */
#define TABLE_AHEAD 16

typedef struct {
    Py_buffer table, rows, out, count;
    Py_ssize_t n; /* rows */
} table_args;

static void
release_table_args(table_args *a)
{
    PyBuffer_Release(&a->table); /* a no-op on a buffer never taken (obj NULL) */
    PyBuffer_Release(&a->rows);
    PyBuffer_Release(&a->out);
    PyBuffer_Release(&a->count);
}

/* The table (writable when `write`), rows of `row_words` uint64 and out (one bool a row)
   of a table call; the table must be whole lines of 8 words. */
static int
get_table_args(const char *name, PyObject *table, PyObject *rows, PyObject *out, int write,
               Py_ssize_t row_words, table_args *a)
{
    memset(a, 0, sizeof(*a));
    int flags = PyBUF_C_CONTIGUOUS | (write ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(table, &a->table, flags) < 0
        || PyObject_GetBuffer(rows, &a->rows, PyBUF_C_CONTIGUOUS) < 0
        || PyObject_GetBuffer(out, &a->out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        release_table_args(a);
        return -1;
    }
    a->n = a->out.len;
    if (a->table.len == 0 || a->table.len % 64 || a->rows.len != a->n * row_words * 8
        || ((uintptr_t)a->table.buf & 7) != 0 || ((uintptr_t)a->rows.buf & 7) != 0) {
        PyErr_Format(PyExc_ValueError,
                     "%s: the table must be whole 64-byte lines (at least one), the rows %zd "
                     "uint64 each (both aligned to 8 bytes) and out one bool a row",
                     name, row_words);
        release_table_args(a);
        return -1;
    }
    return 0;
}

static inline Py_ssize_t
bloom_block(uint64_t h1, uint64_t blocks)
{
    return (Py_ssize_t)(((h1 >> 32) * blocks) >> 32);
}

/* The bits a row sets in each word of its block (bloom.py's _masks). */
static inline void
bloom_masks(uint64_t h1, uint64_t h2, int t, uint64_t m[8])
{
    for (int w = 0; w < 8; w++) {
        unsigned b = (unsigned)(h2 >> (8 * w)) & 255;
        m[w] = UINT64_C(1) << (b & 63);
        if (t == 2) m[w] |= UINT64_C(1) << ((b >> 6) | (((h1 >> (4 * w)) & 15) << 2));
    }
}

/* Is every bit of the row (h1, h2) set in its block? */
static inline int
bloom_covers(const uint64_t *bits, uint64_t blocks, int t, uint64_t h1, uint64_t h2)
{
    uint64_t m[8], missing = 0;
    bloom_masks(h1, h2, t, m);
    const uint64_t *row = bits + 8 * bloom_block(h1, blocks);
    for (int w = 0; w < 8; w++) missing |= m[w] & ~row[w];
    return missing == 0;
}

/* out[i] = every bit of row i is set in its block (no writes). */
static void
bloom_cover(const uint64_t *bits, uint64_t blocks, int t, const uint64_t *h, Py_ssize_t n,
            unsigned char *out)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + TABLE_AHEAD < n) {
            PREFETCH_READ(bits + 8 * bloom_block(h[2 * (i + TABLE_AHEAD)], blocks));
        }
        out[i] = (unsigned char)bloom_covers(bits, blocks, t, h[2 * i], h[2 * i + 1]);
    }
}

/* Of the `fresh` rows out marks, only the first of identical fingerprints stays marked.
   How many stay, or -1 when out of memory (no exception set: it runs without the GIL). */
static Py_ssize_t
bloom_first_only(const uint64_t *h, unsigned char *out, Py_ssize_t n, Py_ssize_t fresh)
{
    if (fresh < 2) return fresh;
    size_t size = 4;
    while (size < 2 * (size_t)fresh) size <<= 1;
    Py_ssize_t *slots = PyMem_RawMalloc(size * sizeof(Py_ssize_t));
    if (slots == NULL) return -1;
    for (size_t j = 0; j < size; j++) slots[j] = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!out[i]) continue;
        size_t j = (size_t)(h[2 * i + 1] ^ (h[2 * i] >> 17)) & (size - 1);
        while (slots[j] >= 0) {
            Py_ssize_t k = slots[j];
            if (h[2 * k] == h[2 * i] && h[2 * k + 1] == h[2 * i + 1]) {
                out[i] = 0;
                fresh--;
                break;
            }
            j = (j + 1) & (size - 1);
        }
        if (out[i]) slots[j] = i;
    }
    PyMem_RawFree(slots);
    return fresh;
}

/* Set the bits of the rows out marks. */
static void
bloom_set(uint64_t *bits, uint64_t blocks, int t, const uint64_t *h, const unsigned char *out,
          Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + TABLE_AHEAD < n && out[i + TABLE_AHEAD]) {
            PREFETCH_WRITE(bits + 8 * bloom_block(h[2 * (i + TABLE_AHEAD)], blocks));
        }
        if (!out[i]) continue;
        uint64_t m[8];
        bloom_masks(h[2 * i], h[2 * i + 1], t, m);
        uint64_t *row = bits + 8 * bloom_block(h[2 * i], blocks);
        for (int w = 0; w < 8; w++) row[w] |= m[w];
    }
}

static int
bloom_t(PyObject *arg)
{
    long t = PyLong_AsLong(arg);
    if (t == -1 && PyErr_Occurred()) return -1;
    if (t != 1 && t != 2) {
        PyErr_Format(PyExc_ValueError, "bloom: t is 1 or 2, not %ld", t);
        return -1;
    }
    return (int)t;
}

static PyObject *
bloom_test(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "bloom_test(bits, t, h, out) takes 4 arguments");
        return NULL;
    }
    int t = bloom_t(args[1]);
    table_args a;
    if (t < 0 || get_table_args("bloom_test", args[0], args[2], args[3], 0, 2, &a) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    bloom_cover(a.table.buf, (uint64_t)(a.table.len / 64), t, a.rows.buf, a.n, a.out.buf);
    Py_END_ALLOW_THREADS
    release_table_args(&a);
    Py_RETURN_NONE;
}

/* The layer's count word (a one-uint64 buffer, writable) into a->count. */
static int
get_count(const char *name, PyObject *count, table_args *a)
{
    if (PyObject_GetBuffer(count, &a->count, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0
        || a->count.len != 8 || ((uintptr_t)a->count.buf & 7) != 0) {
        if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s: count is one uint64", name);
        return -1;
    }
    return 0;
}

/* The insert of rows out marks as fresh: only the first of identical fingerprints stays
   fresh, the count is raised by those, then their bits are set (the count first). */
static Py_ssize_t
bloom_commit(table_args *a, int t, Py_ssize_t fresh)
{
    uint64_t *bits = a->table.buf;
    const uint64_t *h = a->rows.buf;
    unsigned char *out = a->out.buf;
    fresh = bloom_first_only(h, out, a->n, fresh);
    if (fresh < 0) {
        PyErr_NoMemory();
        return -1;
    }
    /* atomic: lock-free adds raise it too (see store_session) */
    __atomic_fetch_add((uint64_t *)a->count.buf, (uint64_t)fresh, __ATOMIC_SEQ_CST);
    Py_BEGIN_ALLOW_THREADS
    bloom_set(bits, (uint64_t)(a->table.len / 64), t, h, out, a->n);
    Py_END_ALLOW_THREADS
    return fresh;
}

static PyObject *
bloom_insert(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 5 && nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "bloom_insert(bits, t, h, out, count, tested=False) takes 5 or 6 "
                        "arguments");
        return NULL;
    }
    int t = bloom_t(args[1]);
    int tested = nargs == 6 ? PyObject_IsTrue(args[5]) : 0;
    table_args a;
    if (t < 0 || tested < 0
        || get_table_args("bloom_insert", args[0], args[2], args[3], 1, 2, &a) < 0) {
        return NULL;
    }
    if (get_count("bloom_insert", args[4], &a) < 0) {
        release_table_args(&a);
        return NULL;
    }
    unsigned char *out = a.out.buf;
    Py_ssize_t fresh = 0;
    Py_BEGIN_ALLOW_THREADS
    if (!tested) bloom_cover(a.table.buf, (uint64_t)(a.table.len / 64), t, a.rows.buf, a.n, out);
    for (Py_ssize_t i = 0; i < a.n; i++) {
        if (!tested) out[i] = !out[i];
        out[i] = out[i] != 0;
        fresh += out[i];
    }
    Py_END_ALLOW_THREADS
    fresh = bloom_commit(&a, t, fresh);
    release_table_args(&a);
    return fresh < 0 ? NULL : PyLong_FromSsize_t(fresh);
}

static inline uint64_t
exact_home(uint64_t key, uint64_t buckets)
{
    return ((key >> 32) * buckets) >> 32;
}

/* Where key is in the table, or where it would go: *slot is its slot's index (found) or
   the first empty slot of its probe (not found; -1 when the table is full). */
static int
exact_find(const uint64_t *table, uint64_t buckets, uint64_t key, Py_ssize_t *slot)
{
    uint64_t bucket = exact_home(key, buckets);
    for (uint64_t step = 0; step < buckets; step++) {
        const uint64_t *row = table + 8 * bucket;
        for (int s = 0; s < 8; s++) {
            if (row[s] == key) {
                *slot = (Py_ssize_t)(8 * bucket + s);
                return 1;
            }
            if (row[s] == 0) {
                *slot = (Py_ssize_t)(8 * bucket + s);
                return 0;
            }
        }
        if (++bucket == buckets) bucket = 0;
    }
    *slot = -1;
    return 0;
}

/* The arguments (table, keys, out) of an exact_* call; the keys must not be 0. */
static int
get_exact_args(const char *name, PyObject *const *args, Py_ssize_t nargs, int write,
               table_args *a)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "%s(table, keys, out) takes 3 arguments", name);
        return -1;
    }
    if (get_table_args(name, args[0], args[1], args[2], write, 1, a) < 0) return -1;
    const uint64_t *keys = a->rows.buf;
    for (Py_ssize_t i = 0; i < a->n; i++) {
        if (keys[i] == 0) {
            PyErr_Format(PyExc_ValueError, "%s: key %zd is 0 (0 marks an empty slot)", name, i);
            release_table_args(a);
            return -1;
        }
    }
    return 0;
}

static PyObject *
exact_lookup(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    table_args a;
    if (get_exact_args("exact_lookup", args, nargs, 0, &a) < 0) return NULL;
    const uint64_t *table = a.table.buf, *keys = a.rows.buf;
    const uint64_t buckets = (uint64_t)(a.table.len / 64);
    unsigned char *out = a.out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < a.n; i++) {
        if (i + TABLE_AHEAD < a.n) {
            PREFETCH_READ(table + 8 * exact_home(keys[i + TABLE_AHEAD], buckets));
        }
        Py_ssize_t slot;
        out[i] = (unsigned char)exact_find(table, buckets, keys[i], &slot);
    }
    Py_END_ALLOW_THREADS
    release_table_args(&a);
    Py_RETURN_NONE;
}

static PyObject *
exact_insert(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    table_args a;
    if (get_exact_args("exact_insert", args, nargs, 1, &a) < 0) return NULL;
    uint64_t *table = a.table.buf;
    const uint64_t *keys = a.rows.buf;
    const uint64_t buckets = (uint64_t)(a.table.len / 64);
    unsigned char *out = a.out.buf;
    Py_ssize_t added = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < a.n; i++) {
        if (i + TABLE_AHEAD < a.n) {
            PREFETCH_WRITE(table + 8 * exact_home(keys[i + TABLE_AHEAD], buckets));
        }
        Py_ssize_t slot;
        out[i] = 0;
        if (exact_find(table, buckets, keys[i], &slot)) continue;
        if (slot < 0) {
            added = -1;
            break;
        }
        table[slot] = keys[i];
        out[i] = 1;
        added++;
    }
    Py_END_ALLOW_THREADS
    release_table_args(&a);
    return PyLong_FromSsize_t(added);
}

/* ---------------------------------------------------------------------------------------
 * One add to a store file in one call (issue 34): exact_add_locked and bloom_add_locked.
 *
 * fd >= 0: the add under the file's exclusive flock (the stores' `locked` mode): check
 * the dynamic header words of seen/_mapped.py (dirty, retired, the layer count, no
 * lock-free adder registered), mark the file dirty, enter the writers' sequence, add,
 * leave it, clear the mark, unlock.
 * fd == -2: the add without the lock (the default), the shared protocol below.
 * fd == -1: a lookup without the lock.
 * Whatever the store's Python session would have to do first (repair a dead writer's or
 * adder's leftovers, follow a grown or retired file, grow, add a layer) is left to it:
 * the call returns -2 having changed nothing. The caller holds the store's thread lock
 * and has checked that the store is open in this process.
 *
 * The shared protocol (lock-free adds), words of the header:
 *   W_SEQ     the writers' sequence: every locked section (a batch, a growth, a repair,
 *             a locked add) makes it odd when it starts (a new value: (s + 2) | 1, then a
 *             full fence) and even when it ends. A writer that dies leaves it odd.
 *   W_ADDING  (epoch << 32) | the number of lock-free adds in flight in that epoch.
 * A lock-free add registers in W_ADDING (fetch_add, which also reads the epoch), reads
 * W_SEQ (s0), and gives up (-2, nothing changed) when s0 is odd, the file is dirty or
 * retired, or the layers changed. Otherwise it adds with atomics only: exact, a CAS of
 * the key into the empty slot its probe found (another key there: probe again; the same
 * key: held) then count + 1; Bloom, count + 1 (given back when the layer was full: -2)
 * then an atomic OR of each word. Then a full fence and W_SEQ read again (s1), and it
 * leaves W_ADDING (a CAS decrement, only in the epoch it entered).
 *   s1 == s0: every atomic of the add precedes, in the single order of seq_cst
 *     operations, the W_SEQ store of any locked section that had not started at s0: that
 *     writer's reads (a growth's copy, a batch's probes, a recount) come after its fence
 *     and see the add. Sections that started before s0 had ended (s0 even), or s0 would
 *     be odd. So the add is complete and counted: 0.
 *   s1 != s0: a locked section overlapped the add; its plain writes (a batch's slot or
 *     block, its count) may have overwritten the add's, or its copy (a growth) missed it.
 *     The call returns 2 ("added, redo it locked"): the store redoes the add under the
 *     lock (exact: recount, then find or insert; Bloom: OR the bits again; idempotent)
 *     and reports it new. The redo's own section may overlap other adds: they redo too;
 *     the last section of a burst overlaps none, so the final count is exact.
 * A lock-free adder killed mid-add stays registered in W_ADDING. A locked section, once
 * W_SEQ is odd (new adds give up at once), waits a little for the in-flight adds to
 * leave (store_session); those still there are taken for dead: the store repairs what
 * they may have left (exact: recount; Bloom: a count above the set bits) and opens a new
 * epoch with none in flight (a live adder of the old epoch that was only slow does not
 * decrement the new epoch; its s1 differs from its s0, so it redoes its add locked).
 */
#include <sys/file.h>
#include <errno.h>
#include <sched.h>
#include <time.h>

/* seen/_mapped.py's dynamic header words */
#define W_DIRTY 32
#define W_RETIRED 33
#define W_COUNT 34
#define W_NLAYERS 35
#define W_SEQ 36
#define W_ADDING 37
#define HEADER_WORDS 512
#define ADDING_IN_FLIGHT UINT64_C(0xffffffff)
#define SEQ __ATOMIC_SEQ_CST
#define RELAXED __ATOMIC_RELAXED
/* How long a locked section waits for the in-flight lock-free adds (nanoseconds). */
#define ADDING_WAIT_NS 2000000

/* flock(fd, how) without the GIL (another process may hold it); -1 on failure. */
static int
locked_flock(int fd, int how)
{
    int r;
    Py_BEGIN_ALLOW_THREADS
    do {
        r = flock(fd, how);
    } while (r < 0 && errno == EINTR);
    Py_END_ALLOW_THREADS
    return r;
}

/* The whole file as words (at least the header; writable unless fd is -1, a lookup), its
   fd; -1 with an error. */
static int
locked_args(const char *name, PyObject *words, PyObject *fd_arg, Py_buffer *view, int *fd)
{
    long v = PyLong_AsLong(fd_arg);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < -2 || v > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: fd is a file descriptor, -1 or -2, not %ld", name,
                     v);
        return -1;
    }
    *fd = (int)v;
    if (PyObject_GetBuffer(words, view, PyBUF_C_CONTIGUOUS | (*fd != -1 ? PyBUF_WRITABLE : 0))
        < 0) {
        return -1;
    }
    if (view->len < HEADER_WORDS * 8 || view->len % 64 || ((uintptr_t)view->buf & 7) != 0) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s: words is the whole store file as uint64", name);
        return -1;
    }
    return 0;
}

/* A locked section starts: W_SEQ odd (a value no earlier section had), then a full fence
   (the section's reads come after it in every process's view). */
static void
seq_enter(uint64_t *w)
{
    uint64_t s = __atomic_load_n(&w[W_SEQ], SEQ);
    __atomic_store_n(&w[W_SEQ], (s + 2) | 1, SEQ);
    __atomic_thread_fence(SEQ);
}

/* A locked section ends: W_SEQ even (its writes before it). */
static void
seq_leave(uint64_t *w)
{
    uint64_t s = __atomic_load_n(&w[W_SEQ], SEQ);
    __atomic_store_n(&w[W_SEQ], s + (s & 1), SEQ);
}

/* With the lock: 1 when the header lets the one-item add run here (then marked dirty and
   in a section). */
static int
locked_begin(uint64_t *w, uint64_t nlayers)
{
    if (__atomic_load_n(&w[W_DIRTY], SEQ) != 0 || __atomic_load_n(&w[W_RETIRED], SEQ) != 0
        || (nlayers && __atomic_load_n(&w[W_NLAYERS], SEQ) != nlayers)
        || (__atomic_load_n(&w[W_ADDING], SEQ) & ADDING_IN_FLIGHT) != 0) {
        return 0;
    }
    __atomic_store_n(&w[W_DIRTY], 1, SEQ);
    seq_enter(w);
    return 1;
}

static void
locked_end(uint64_t *w)
{
    seq_leave(w);
    __atomic_store_n(&w[W_DIRTY], 0, SEQ);
}

/* A lock-free add registers: its epoch. */
static inline uint64_t
adding_enter(uint64_t *w)
{
    return __atomic_fetch_add(&w[W_ADDING], 1, SEQ) >> 32;
}

/* ... and leaves, in its epoch only (a new epoch has forgotten it). */
static inline void
adding_leave(uint64_t *w, uint64_t epoch)
{
    uint64_t cur = __atomic_load_n(&w[W_ADDING], SEQ);
    while ((cur >> 32) == epoch && (cur & ADDING_IN_FLIGHT) != 0) {
        if (__atomic_compare_exchange_n(&w[W_ADDING], &cur, cur - 1, 0, SEQ, SEQ)) break;
    }
}

/* May a lock-free add run (s0 even, the file clean and current)? */
static inline int
adding_open(uint64_t *w, uint64_t s0, uint64_t nlayers)
{
    return !(s0 & 1) && __atomic_load_n(&w[W_DIRTY], SEQ) == 0
           && __atomic_load_n(&w[W_RETIRED], SEQ) == 0
           && (!nlayers || __atomic_load_n(&w[W_NLAYERS], SEQ) == nlayers);
}

/* 0 (added, no section overlapped), or 2 (added, redo it locked): see above. */
static inline long
adding_done(uint64_t *w, uint64_t s0)
{
    __atomic_thread_fence(SEQ);
    return __atomic_load_n(&w[W_SEQ], SEQ) == s0 ? 0 : 2;
}

/* exact_find with atomic loads (other processes CAS slots meanwhile). */
static int
exact_find_shared(uint64_t *table, uint64_t buckets, uint64_t key, Py_ssize_t *slot)
{
    uint64_t bucket = exact_home(key, buckets);
    for (uint64_t step = 0; step < buckets; step++) {
        uint64_t *row = table + 8 * bucket;
        for (int s = 0; s < 8; s++) {
            uint64_t v = __atomic_load_n(&row[s], RELAXED);
            if (v == key || v == 0) {
                *slot = (Py_ssize_t)(8 * bucket + s);
                return v == key;
            }
        }
        if (++bucket == buckets) bucket = 0;
    }
    *slot = -1;
    return 0;
}

/* The lock-free exact add: 1 held, 0 added, 2 added (redo locked), -2 nothing done. */
static long
exact_add_shared(uint64_t *w, uint64_t key, uint64_t buckets, uint64_t limit)
{
    uint64_t *table = w + HEADER_WORDS;
    uint64_t epoch = adding_enter(w), s0 = __atomic_load_n(&w[W_SEQ], SEQ);
    long r = -2;
    if (adding_open(w, s0, 0)) {
        for (;;) {
            Py_ssize_t slot;
            if (exact_find_shared(table, buckets, key, &slot)) {
                r = 1;
                break;
            }
            if (slot < 0 || __atomic_load_n(&w[W_COUNT], SEQ) >= limit) break;
            uint64_t expected = 0;
            if (__atomic_compare_exchange_n(&table[slot], &expected, key, 0, SEQ, SEQ)) {
                __atomic_fetch_add(&w[W_COUNT], 1, SEQ);
                r = adding_done(w, s0);
                break;
            }
            /* another key took the slot (or this one did): probe again */
        }
    }
    adding_leave(w, epoch);
    return r;
}

/* The lock-free exact lookup: 1 held, 0 not, -2 the file was replaced (retired). */
static long
exact_held(uint64_t *w, uint64_t key, uint64_t buckets)
{
    Py_ssize_t slot;
    if (__atomic_load_n(&w[W_RETIRED], SEQ) != 0) return -2;
    return exact_find_shared(w + HEADER_WORDS, buckets, key, &slot);
}

/* Whether a table of `buckets` buckets fits in a file of `len` bytes after its header. */
static int
exact_fits(uint64_t buckets, Py_ssize_t len)
{
    /* (not HEADER_WORDS / 8 + buckets < ...: a huge buckets wraps that sum past the check) */
    return buckets != 0 && buckets <= (uint64_t)len / 64 - HEADER_WORDS / 8;
}

/* exact_add_locked(words, fd, key, buckets, limit) -> int: 1 the table held key, 0 it was
   added (slot, then count), 2 it was added without the lock while a locked section ran
   (redo it locked), -2 the Python session decides (nothing changed). fd: see above. */
static PyObject *
exact_add_locked(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "exact_add_locked(words, fd, key, buckets, limit) takes 5 arguments");
        return NULL;
    }
    uint64_t key, buckets, limit;
    if (sp_key_arg("exact_add_locked", args[2], &key) < 0
        || sp_key_arg("exact_add_locked", args[3], &buckets) < 0
        || sp_key_arg("exact_add_locked", args[4], &limit) < 0) {
        return NULL;
    }
    if (key == 0 || buckets == 0) {
        PyErr_SetString(PyExc_ValueError, "exact_add_locked: key and buckets are not 0");
        return NULL;
    }
    Py_buffer view;
    int fd;
    if (locked_args("exact_add_locked", args[0], args[1], &view, &fd) < 0) return NULL;
    if (!exact_fits(buckets, view.len)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "exact_add_locked: the file is shorter than its table");
        return NULL;
    }
    long r = -2;
    uint64_t *w = view.buf, *table = w + HEADER_WORDS;
    Py_ssize_t slot;
    if (fd == -1) { /* a lookup: no lock, nothing written */
        r = exact_held(w, key, buckets);
    } else if (fd == -2) {
        r = exact_add_shared(w, key, buckets, limit);
    } else if (locked_flock(fd, LOCK_EX) == 0) {
        if (locked_begin(w, 0)) {
            if (exact_find_shared(table, buckets, key, &slot)) {
                r = 1;
            } else if (slot >= 0 && w[W_COUNT] < limit) {
                __atomic_store_n(&table[slot], key, SEQ);
                __atomic_fetch_add(&w[W_COUNT], 1, SEQ);
                r = 0;
            }
            locked_end(w);
        }
        locked_flock(fd, LOCK_UN);
    }
    PyBuffer_Release(&view);
    return PyLong_FromLong(r);
}

/* The Bloom add into the last layer (its row `last`), the layers tested by the caller:
   the count + 1 first, then the bits (atomic ORs); 0 added, -2 the layer is full. */
static long
bloom_add_shared(uint64_t *w, const int64_t *last, uint64_t h1, uint64_t h2)
{
    uint64_t *count = &w[last[4]];
    if (__atomic_fetch_add(count, 1, SEQ) >= (uint64_t)last[3]) { /* full: a new layer */
        __atomic_fetch_sub(count, 1, SEQ);
        return -2;
    }
    uint64_t m[8], *block = w + last[0] + 8 * bloom_block(h1, (uint64_t)last[1]);
    bloom_masks(h1, h2, (int)last[2], m);
    for (int k = 0; k < 8; k++) {
        if ((__atomic_load_n(&block[k], RELAXED) & m[k]) != m[k]) {
            __atomic_fetch_or(&block[k], m[k], RELAXED);
        }
    }
    return 0; /* the caller checks the sequence */
}

/* Does any layer hold (h1, h2)? (Atomic loads: other processes OR bits meanwhile.) */
static int
bloom_held(uint64_t *w, const int64_t *L, Py_ssize_t nl, uint64_t h1, uint64_t h2)
{
    for (Py_ssize_t i = 0; i < nl; i++) {
        const int64_t *row = L + 5 * i;
        uint64_t m[8], missing = 0;
        bloom_masks(h1, h2, (int)row[2], m);
        uint64_t *block = w + row[0] + 8 * bloom_block(h1, (uint64_t)row[1]);
        for (int k = 0; k < 8; k++) missing |= m[k] & ~__atomic_load_n(&block[k], RELAXED);
        if (!missing) return 1;
    }
    return 0;
}

/* Whether the layer rows `lay` (int64: offset in words, blocks, t, capacity, count word)
   are at least one, and each inside a file of `len` bytes. */
static int
bloom_layers_fit(const Py_buffer *lay, Py_ssize_t len)
{
    const int64_t *L = lay->buf;
    const Py_ssize_t nl = lay->len / 40, words = len / 8;
    if (nl < 1 || lay->len % 40 || ((uintptr_t)lay->buf & 7) != 0) return 0;
    for (Py_ssize_t i = 0; i < nl; i++) {
        const int64_t *row = L + 5 * i;
        if (row[0] < HEADER_WORDS || row[0] % 8 || row[1] < 1 || (row[2] != 1 && row[2] != 2)
            || row[1] > (words - row[0]) / 8 || row[4] < W_NLAYERS || row[4] >= HEADER_WORDS) {
            return 0;
        }
    }
    return 1;
}

/* The lock-free Bloom lookup: 1 a layer holds (h1, h2), 0 none, -2 the layers changed. */
static long
bloom_lookup(uint64_t *w, const int64_t *L, Py_ssize_t nl, uint64_t h1, uint64_t h2)
{
    if (__atomic_load_n(&w[W_NLAYERS], SEQ) != (uint64_t)nl) return -2;
    return bloom_held(w, L, nl, h1, h2);
}

/* The lock-free Bloom add: 1 held, 0 added, 2 added (redo it locked), -2 nothing done. */
static long
bloom_add_free(uint64_t *w, const int64_t *L, Py_ssize_t nl, uint64_t h1, uint64_t h2)
{
    long r = -2;
    uint64_t epoch = adding_enter(w), s0 = __atomic_load_n(&w[W_SEQ], SEQ);
    if (adding_open(w, s0, (uint64_t)nl)) {
        if (bloom_held(w, L, nl, h1, h2)) {
            r = 1;
        } else if (bloom_add_shared(w, L + 5 * (nl - 1), h1, h2) == 0) {
            r = adding_done(w, s0);
        }
    }
    adding_leave(w, epoch);
    return r;
}

/* bloom_add_locked(words, fd, layers, h1, h2) -> int: layers is an int64 array of one row
   (offset in words, blocks, t, capacity, count word) a layer of the store; 1 a layer held
   (h1, h2), 0 it was added to the last one (count, then bits), 2 it was added without the
   lock while a locked section ran (redo it locked), -2 the Python session decides (the
   last layer is full, or see above; nothing changed). fd: see above. */
static PyObject *
bloom_add_locked(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "bloom_add_locked(words, fd, layers, h1, h2) takes 5 arguments");
        return NULL;
    }
    uint64_t h1, h2;
    if (sp_key_arg("bloom_add_locked", args[3], &h1) < 0
        || sp_key_arg("bloom_add_locked", args[4], &h2) < 0) {
        return NULL;
    }
    Py_buffer view, lay;
    int fd;
    if (locked_args("bloom_add_locked", args[0], args[1], &view, &fd) < 0) return NULL;
    if (PyObject_GetBuffer(args[2], &lay, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    PyObject *out = NULL;
    const int64_t *L = lay.buf;
    const Py_ssize_t nl = lay.len / 40;
    if (!bloom_layers_fit(&lay, view.len)) goto bad;
    long r = -2;
    uint64_t *w = view.buf;
    const int64_t *last = L + 5 * (nl - 1);
    if (fd == -1) { /* a lookup: no lock, nothing written */
        r = bloom_lookup(w, L, nl, h1, h2);
    } else if (fd == -2) {
        r = bloom_add_free(w, L, nl, h1, h2);
    } else if (locked_flock(fd, LOCK_EX) == 0) {
        if (locked_begin(w, (uint64_t)nl)) {
            if (bloom_held(w, L, nl, h1, h2)) {
                r = 1;
            } else {
                r = bloom_add_shared(w, last, h1, h2);
            }
            locked_end(w);
        }
        locked_flock(fd, LOCK_UN);
    }
    out = PyLong_FromLong(r);
    goto done;
bad:
    PyErr_SetString(PyExc_ValueError,
                    "bloom_add_locked: layers is (offset, blocks, t, capacity, count word) "
                    "rows of int64 inside the file");
done:
    PyBuffer_Release(&lay);
    PyBuffer_Release(&view);
    return out;
}

/* store_session(words, op) -> int: a locked section of seen/_mapped.py's sessions (the
   caller holds the flock). op 0: enter (W_SEQ odd and a fence, then wait up to 2 ms,
   without the GIL, for the in-flight lock-free adds to leave): 1 when some are still
   there (taken for dead: the caller repairs, then op 2). op 1: leave (W_SEQ even). op 2:
   a new epoch of W_ADDING with none in flight. op 3: header word `word` + 1, atomically
   (a count lock-free adds raise too). */
static PyObject *
store_session(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2 && nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "store_session(words, op, word=0) takes 2 or 3 arguments");
        return NULL;
    }
    long op = PyLong_AsLong(args[1]), word = nargs == 3 ? PyLong_AsLong(args[2]) : W_DIRTY;
    if ((op == -1 || word == -1) && PyErr_Occurred()) return NULL;
    if (op < 0 || op > 3 || word < W_DIRTY || word >= HEADER_WORDS) {
        PyErr_Format(PyExc_ValueError,
                     "store_session: op is 0, 1, 2 or 3 (not %ld), word a header word (not %ld)",
                     op, word);
        return NULL;
    }
    Py_buffer view;
    int fd;
    PyObject *minus2 = PyLong_FromLong(-2);
    if (minus2 == NULL) return NULL;
    int bad = locked_args("store_session", args[0], minus2, &view, &fd);
    Py_DECREF(minus2);
    if (bad < 0) return NULL;
    uint64_t *w = view.buf;
    long r = 0;
    if (op == 0) {
        seq_enter(w);
        if (__atomic_load_n(&w[W_ADDING], SEQ) & ADDING_IN_FLIGHT) {
            Py_BEGIN_ALLOW_THREADS
            struct timespec t0, t;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            do {
                sched_yield();
                clock_gettime(CLOCK_MONOTONIC, &t);
            } while ((__atomic_load_n(&w[W_ADDING], SEQ) & ADDING_IN_FLIGHT)
                     && (t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec)
                            < ADDING_WAIT_NS);
            Py_END_ALLOW_THREADS
            r = (__atomic_load_n(&w[W_ADDING], SEQ) & ADDING_IN_FLIGHT) != 0;
        }
    } else if (op == 1) {
        seq_leave(w);
    } else if (op == 3) {
        __atomic_fetch_add(&w[word], 1, SEQ);
    } else {
        uint64_t a = __atomic_load_n(&w[W_ADDING], SEQ);
        __atomic_store_n(&w[W_ADDING], ((a >> 32) + 1) << 32, SEQ);
    }
    PyBuffer_Release(&view);
    return PyLong_FromLong(r);
}

/* ---------------------------------------------------------------------------------------
 * SeenSingle (issue 34): the base type of the memory:, exact: and bloom: stores, whose
 * add(url) and `url in store` are one C call with no Python frame: the compiled key
 * (sp_url_key, url_key's) and the probe (a set's; exact: exact_held / exact_add_shared,
 * bloom: bloom_lookup / bloom_add_free, the functions exact_add_locked and
 * bloom_add_locked call with fd -1 and -2, so the lock-free protocol above is the same).
 * The store binds what the probe needs (_seen_bind) when it opens or maps its file, and
 * unbinds it when it unmaps or closes. Everything else goes to the store's Python
 * methods, the reference (seen/_single.py: SeenSinglePy calls them for every URL):
 *   not an exact str, nothing bound (closed, unmapped, a profile off the compiled path),
 *   or the URL off the compiled path: _add_slow(url) / _contains_slow(url);
 *   the probe leaves it to the Python session (-2: a dirty, retired or locked file, the
 *   layers changed, the last layer or the table full), or the store is not lock-free
 *   (?locked=1, read-only), or the process forked since the bind (a child reopens the
 *   file): add_fingerprint(key) / contains_fingerprint(key), key an int (exact) or
 *   (h1, h2) (bloom), as the Python add and in have always called them;
 *   added while a locked section ran (2): exact _add_locked(key, True), bloom
 *   _redo(last layer, h1, h2), then True.
 * The GIL is held throughout (a thread cannot remap the file meanwhile); the buffers held
 * keep the mapping alive (an mmap with exports refuses to close).
 */
#include <pthread.h>

/* Bumped in a forked child (pthread_atfork): a bind made before the fork is not used for
   adds there (seen/_mapped.py's forks, which the Python add checks). */
static unsigned long forks_seen;

static void
after_fork_child(void)
{
    forks_seen++;
}

enum { SEEN_NONE = 0, SEEN_MEMORY = 1, SEEN_EXACT = 2, SEEN_BLOOM = 3 };

typedef struct {
    PyObject_HEAD
    int kind;    /* SEEN_*: what is bound */
    int addable; /* lock-free adds (exact, bloom): not ?locked=1, not read-only */
    int allow_query, keep_port, planned;
    key_plan kp;    /* borrows from plan */
    PyObject *plan; /* the profile's query plan (None or sp_key_plan_of's tuple) */
    PyObject *set;  /* memory: the set of fingerprints */
    Py_buffer words, layers; /* exact, bloom: the file as words; bloom: its layer rows */
    int has_words, has_layers;
    uint64_t buckets, limit; /* exact */
    unsigned long forks;     /* forks_seen at the bind */
} seen_single;

static PyObject *name_add_slow, *name_contains_slow, *name_add_fp, *name_contains_fp;

static void
seen_unbind(seen_single *s)
{
    s->kind = SEEN_NONE;
    if (s->has_words) {
        s->has_words = 0;
        PyBuffer_Release(&s->words);
    }
    if (s->has_layers) {
        s->has_layers = 0;
        PyBuffer_Release(&s->layers);
    }
    Py_CLEAR(s->set);
    Py_CLEAR(s->plan);
}

static int
seen_traverse(PyObject *self, visitproc visit, void *arg)
{
    seen_single *s = (seen_single *)self;
    /* (a heap subclass's traverse visits its type: this static one is not visited) */
    Py_VISIT(s->set);
    Py_VISIT(s->plan);
    if (s->has_words) Py_VISIT(s->words.obj);
    if (s->has_layers) Py_VISIT(s->layers.obj);
    return 0;
}

static int
seen_clear(PyObject *self)
{
    seen_unbind((seen_single *)self);
    return 0;
}

static void
seen_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    seen_unbind((seen_single *)self);
    type->tp_free(self);
}

/* _seen_bind(None): unbind. _seen_bind(key, kind, ...): key = (allow_query, keep_port,
   query plan) of the store's profile; kind 1 (memory) with the set; 2 (exact) with the
   file (a buffer of whole words), its buckets and load limit, and whether adds are
   lock-free; 3 (bloom) with the file, its layer rows (int64, bloom_add_locked's) and
   whether adds are lock-free. */
static PyObject *
seen_bind(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    seen_single *s = (seen_single *)self;
    seen_unbind(s);
    if (nargs == 1 && args[0] == Py_None) Py_RETURN_NONE;
    long kind = nargs >= 2 ? PyLong_AsLong(args[1]) : 0;
    if (kind == -1 && PyErr_Occurred()) return NULL;
    const Py_ssize_t want = kind == SEEN_MEMORY ? 3 : kind == SEEN_EXACT ? 6 : 5;
    PyObject *key = nargs >= 2 ? args[0] : NULL;
    if (nargs != want || kind < SEEN_MEMORY || kind > SEEN_BLOOM || !PyTuple_Check(key)
        || PyTuple_GET_SIZE(key) != 3) {
        PyErr_SetString(PyExc_TypeError,
                        "_seen_bind(None) or _seen_bind((allow_query, keep_port, query), kind, "
                        "...): 1, set; 2, words, buckets, limit, addable; 3, words, layers, "
                        "addable");
        return NULL;
    }
    int allow_query = PyObject_IsTrue(PyTuple_GET_ITEM(key, 0));
    int keep_port = PyObject_IsTrue(PyTuple_GET_ITEM(key, 1));
    if (allow_query < 0 || keep_port < 0) return NULL;
    key_plan kp;
    int planned = sp_key_plan_of(PyTuple_GET_ITEM(key, 2), &kp);
    if (planned < 0) return NULL;
    int addable = 0;
    if (kind == SEEN_MEMORY) {
        if (!PySet_CheckExact(args[2])) {
            PyErr_SetString(PyExc_TypeError, "_seen_bind: a memory store binds a set");
            return NULL;
        }
        s->set = Py_NewRef(args[2]);
    } else {
        if ((addable = PyObject_IsTrue(args[nargs - 1])) < 0) return NULL;
        Py_buffer *v = &s->words;
        if (PyObject_GetBuffer(args[2], v, PyBUF_C_CONTIGUOUS | (addable ? PyBUF_WRITABLE : 0))
            < 0) {
            return NULL;
        }
        s->has_words = 1;
        if (v->len < HEADER_WORDS * 8 || v->len % 64 || ((uintptr_t)v->buf & 7) != 0) {
            PyErr_SetString(PyExc_ValueError, "_seen_bind: words is the whole store file");
            goto fail;
        }
        if (kind == SEEN_EXACT) {
            if (sp_key_arg("_seen_bind", args[3], &s->buckets) < 0
                || sp_key_arg("_seen_bind", args[4], &s->limit) < 0) {
                goto fail;
            }
            if (!exact_fits(s->buckets, v->len)) {
                PyErr_SetString(PyExc_ValueError,
                                "_seen_bind: the table is empty or past the end of the file");
                goto fail;
            }
        } else {
            if (PyObject_GetBuffer(args[3], &s->layers, PyBUF_C_CONTIGUOUS) < 0) goto fail;
            s->has_layers = 1;
            if (!bloom_layers_fit(&s->layers, v->len)) {
                PyErr_SetString(PyExc_ValueError,
                                "_seen_bind: layers is (offset, blocks, t, capacity, count "
                                "word) rows of int64 inside the file");
                goto fail;
            }
        }
    }
    s->plan = Py_NewRef(PyTuple_GET_ITEM(key, 2));
    s->kp = kp;
    s->planned = planned;
    s->allow_query = allow_query;
    s->keep_port = keep_port;
    s->addable = addable;
    s->forks = forks_seen;
    s->kind = (int)kind;
    Py_RETURN_NONE;
fail:
    seen_unbind(s);
    return NULL;
}

/* The key the Python fallbacks take: the int (64), or (h1, h2) (128). */
static PyObject *
seen_key_object(int kind, const uint64_t h[2])
{
    if (kind != SEEN_BLOOM) return PyLong_FromUnsignedLongLong(h[0]);
    return Py_BuildValue("(KK)", (unsigned long long)h[0], (unsigned long long)h[1]);
}

/* self.name(arg), arg a new reference or NULL (then NULL). */
static PyObject *
seen_call(PyObject *self, PyObject *name, PyObject *arg)
{
    if (arg == NULL) return NULL;
    PyObject *out = PyObject_CallMethodOneArg(self, name, arg);
    Py_DECREF(arg);
    return out;
}

/* The key of url: 1 (h filled), 0 (the Python path), -1 (an error). An exact store's
   key 0 is 1 (0 marks its empty slots: the Python add and in count it as 1 too). */
static int
seen_key(const seen_single *s, PyObject *url, uint64_t h[2])
{
    if (s->kind == SEEN_NONE || !PyUnicode_CheckExact(url)) return 0;
    int found = sp_url_key(url, s->allow_query, s->keep_port, &s->kp, s->planned,
                           s->kind == SEEN_BLOOM ? 128 : 64, h);
    if (found > 0 && s->kind == SEEN_EXACT && h[0] == 0) h[0] = 1;
    return found;
}

static PyObject *
seen_add(PyObject *self, PyObject *url)
{
    seen_single *s = (seen_single *)self;
    uint64_t h[2];
    int found = seen_key(s, url, h);
    if (found <= 0) return found < 0 ? NULL : PyObject_CallMethodOneArg(self, name_add_slow, url);
    const int kind = s->kind;
    if (kind == SEEN_MEMORY) {
        PyObject *fp = PyLong_FromUnsignedLongLong(h[0]);
        if (fp == NULL) return NULL;
        /* one lookup: the set grows only when fp is new */
        Py_ssize_t before = PySet_GET_SIZE(s->set);
        int failed = PySet_Add(s->set, fp) < 0;
        Py_DECREF(fp);
        return failed ? NULL : PyBool_FromLong(PySet_GET_SIZE(s->set) != before);
    }
    if (s->addable && s->forks == forks_seen) {
        uint64_t *w = s->words.buf;
        long r;
        if (kind == SEEN_EXACT) {
            r = exact_add_shared(w, h[0], s->buckets, s->limit);
        } else {
            r = bloom_add_free(w, s->layers.buf, s->layers.len / 40, h[0], h[1]);
        }
        if (r == 2) { /* added while a locked section ran: redone under the lock */
            PyObject *done;
            if (kind == SEEN_EXACT) {
                done = PyObject_CallMethod(self, "_add_locked", "KO", (unsigned long long)h[0],
                                           Py_True);
            } else {
                done = PyObject_CallMethod(self, "_redo", "nKK", s->layers.len / 40 - 1,
                                           (unsigned long long)h[0], (unsigned long long)h[1]);
            }
            if (done == NULL) return NULL;
            Py_DECREF(done);
        }
        if (r >= 0) return PyBool_FromLong(r != 1);
    }
    return seen_call(self, name_add_fp, seen_key_object(kind, h));
}

static int
seen_contains(PyObject *self, PyObject *url)
{
    seen_single *s = (seen_single *)self;
    uint64_t h[2];
    PyObject *out;
    int found = seen_key(s, url, h);
    if (found < 0) return -1;
    if (found == 0) {
        out = PyObject_CallMethodOneArg(self, name_contains_slow, url);
    } else if (s->kind == SEEN_MEMORY) {
        PyObject *fp = PyLong_FromUnsignedLongLong(h[0]);
        if (fp == NULL) return -1;
        int held = PySet_Contains(s->set, fp);
        Py_DECREF(fp);
        return held;
    } else {
        uint64_t *w = s->words.buf;
        long r;
        if (s->kind == SEEN_EXACT) {
            r = exact_held(w, h[0], s->buckets);
        } else {
            r = bloom_lookup(w, s->layers.buf, s->layers.len / 40, h[0], h[1]);
        }
        if (r >= 0) return (int)r;
        out = seen_call(self, name_contains_fp, seen_key_object(s->kind, h));
    }
    if (out == NULL) return -1;
    int held = PyObject_IsTrue(out);
    Py_DECREF(out);
    return held;
}

static PyMethodDef seen_methods[] = {
    {"add", (PyCFunction)seen_add, METH_O,
     "add(url) -> bool\n\nAdd the URL; True when it was not seen before (one C call on the\n"
     "compiled path, else the store's _add_slow)."},
    {"_seen_bind", (PyCFunction)(void (*)(void))seen_bind, METH_FASTCALL,
     "_seen_bind(None) | _seen_bind(key, kind, ...) -> None\n\n"
     "What add and in probe without a Python frame (see _sp_stores.c), or nothing."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods seen_as_sequence = {
    .sq_contains = seen_contains,
};

static PyTypeObject seen_single_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "urlsieve._speedups.SeenSingle",
    .tp_basicsize = sizeof(seen_single),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = seen_dealloc,
    .tp_traverse = seen_traverse,
    .tp_clear = seen_clear,
    .tp_methods = seen_methods,
    .tp_as_sequence = &seen_as_sequence,
    .tp_doc = "The base of the memory:, exact: and bloom: stores: add(url) and `url in "
              "store` in one C call (seen/_single.py has the reference).",
};

/* Readies SeenSingle and adds it to the module (its init): -1 with an error set. */
int
sp_stores_init(PyObject *module)
{
    static int once;
    if (!once) {
        if (pthread_atfork(NULL, NULL, after_fork_child) != 0) {
            PyErr_SetString(PyExc_OSError, "urlsieve._speedups: pthread_atfork failed");
            return -1;
        }
        once = 1;
    }
    PyObject **names[] = {&name_add_slow, &name_contains_slow, &name_add_fp, &name_contains_fp};
    const char *texts[] = {"_add_slow", "_contains_slow", "add_fingerprint",
                           "contains_fingerprint"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (*names[i] == NULL && (*names[i] = PyUnicode_InternFromString(texts[i])) == NULL) {
            return -1;
        }
    }
    if (PyType_Ready(&seen_single_type) < 0) return -1;
    return PyModule_AddObjectRef(module, "SeenSingle", (PyObject *)&seen_single_type);
}

/* ---------------------------------------------------------------------------------------
 * bloom_urls(urls, allow_query, keep_port, bits, t, h, out, count): canonical_hashes'
 * 128-bit fingerprints of the URLs into h's rows and, in the same pass, their test
 * against one layer of the Bloom filter (bloom_test's and bloom_insert's; each block is
 * asked for as its fingerprint is made, and read once the run is hashed).
 *   count None: out[k] = the layer holds URL k.
 *   count given (the layer's count word): out[k] = the layer lacks URL k; then, when
 *     every URL is on the fast path, the batch is inserted as bloom_insert does it (out
 *     keeps the first of identical fingerprints, the count is raised, the bits set).
 * Returns (positions, flags): the positions of the URLs off the fast path, whose rows
 * and out the caller fills (when there are any, the layer is left as it was), and out as
 * a list of bools when there are none (else None).
 */
static PyObject *
bloom_urls(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "bloom_urls(urls, allow_query, keep_port, bits, t, h, "
                                         "out, count) takes 8 arguments");
        return NULL;
    }
    const int t = bloom_t(args[4]), insert = args[7] != Py_None;
    if (t < 0) return NULL;
    table_args a;
    if (get_table_args("bloom_urls", args[3], args[5], args[6], insert, 2, &a) < 0) return NULL;
    if (insert && get_count("bloom_urls", args[7], &a) < 0) {
        release_table_args(&a);
        return NULL;
    }
    url_runs r;
    if (sp_url_runs_open(&r, "bloom_urls", args[0], args[1], args[2]) < 0) {
        release_table_args(&a);
        return NULL;
    }
    PyObject *result = NULL;
    if (a.rows.readonly || r.n != a.n) {
        PyErr_SetString(PyExc_ValueError,
                        "bloom_urls: h must be writable, and h and out one row a URL");
        goto done;
    }
    const uint64_t *bits = a.table.buf;
    const uint64_t blocks = (uint64_t)(a.table.len / 64);
    uint64_t *h = a.rows.buf;
    unsigned char *out = a.out.buf;
    Py_ssize_t rest = 0, fresh = 0;
    for (Py_ssize_t run = 0, end; run < r.n; run = end) {
        if ((end = sp_url_runs_copy(&r, run)) < 0) goto done;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t k = run; k < end; k++) {
            if (sp_url_runs_hash(&r, k, 128, h + 2 * k)) {
                PREFETCH_READ(bits + 8 * bloom_block(h[2 * k], blocks));
            } else {
                rest++;
            }
        }
        for (Py_ssize_t k = run; k < end; k++) {
            out[k] = 0;
            if (!r.flags[k]) continue;
            out[k] = (unsigned char)(bloom_covers(bits, blocks, t, h[2 * k], h[2 * k + 1])
                                     ^ insert);
            fresh += out[k];
        }
        Py_END_ALLOW_THREADS
    }
    if (insert && rest == 0 && bloom_commit(&a, t, fresh) < 0) goto done;
    PyObject *positions = sp_url_runs_rest(&r);
    PyObject *flags = rest ? Py_NewRef(Py_None) : PyList_New(r.n);
    if (positions != NULL && flags != NULL) {
        for (Py_ssize_t k = 0; k < r.n && !rest; k++) {
            PyList_SET_ITEM(flags, k, Py_NewRef(out[k] ? Py_True : Py_False));
        }
        result = PyTuple_Pack(2, positions, flags);
    }
    Py_XDECREF(positions);
    Py_XDECREF(flags);
done:
    sp_url_runs_close(&r);
    release_table_args(&a);
    return result;
}

const PyMethodDef sp_stores_methods[] = {
    {"bloom_test", (PyCFunction)(void (*)(void))bloom_test, METH_FASTCALL,
     "bloom_test(bits, t, h, out) -> None\n\n"
     "out[i]: whether the Bloom layer `bits` holds fingerprint row h[i] = (h1, h2)."},
    {"bloom_insert", (PyCFunction)(void (*)(void))bloom_insert, METH_FASTCALL,
     "bloom_insert(bits, t, h, out, count, tested=False) -> int\n\n"
     "Add the fingerprint rows h to the Bloom layer: out flags the fresh ones (tested\n"
     "before the batch, the first of identical rows only); count[0] is raised by their\n"
     "number before their bits are set; returns it. tested: out already holds, for each\n"
     "row, whether the layer lacks it (bloom_urls' test), and the test is skipped."},
    {"exact_lookup", (PyCFunction)(void (*)(void))exact_lookup, METH_FASTCALL,
     "exact_lookup(table, keys, out) -> None\n\nout[i]: whether the exact table holds keys[i]."},
    {"exact_insert", (PyCFunction)(void (*)(void))exact_insert, METH_FASTCALL,
     "exact_insert(table, keys, out) -> int\n\n"
     "Insert keys in order: out flags the new ones; returns how many, -1 when it\n"
     "found the table full."},
    {"exact_add_locked", (PyCFunction)(void (*)(void))exact_add_locked, METH_FASTCALL,
     "exact_add_locked(words, fd, key, buckets, limit) -> int\n\n"
     "One key added to an exact store file under its flock: 1 held, 0 added, -2 left to\n"
     "the Python session (dirty or retired file, table at its limit), 2 added without the\n"
     "lock while a locked section ran (redo it locked). fd -1: a lookup without the\n"
     "lock; -2: the add without the lock."},
    {"bloom_add_locked", (PyCFunction)(void (*)(void))bloom_add_locked, METH_FASTCALL,
     "bloom_add_locked(words, fd, layers, h1, h2) -> int\n\n"
     "One fingerprint added to a Bloom store file under its flock: 1 held, 0 added, -2\n"
     "left to the Python session (dirty file, layers changed, last layer full), 2 added\n"
     "without the lock while a locked section ran (redo it locked). fd -1: a lookup\n"
     "without the lock; -2: the add without the lock."},
    {"store_session", (PyCFunction)(void (*)(void))store_session, METH_FASTCALL,
     "store_session(words, op, word=32) -> int\n\n"
     "A locked section of a store file: op 0 enters (1: lock-free adds still in flight,\n"
     "taken for dead), 1 leaves, 2 opens a new epoch of the lock-free adds, 3 raises\n"
     "header word `word` by one atomically."},
    {"bloom_urls", (PyCFunction)(void (*)(void))bloom_urls, METH_FASTCALL,
     "bloom_urls(urls, allow_query, keep_port, bits, t, h, out, count)\n"
     "    -> (list[int], list[bool] | None)\n\n"
     "canonical_hashes' 128-bit fingerprints into h and their test against one Bloom layer\n"
     "(count None: out = held; count given: out = lacked, and the batch inserted when\n"
     "every URL is on the fast path). Returns the positions of the other URLs, and out\n"
     "as a list when there are none."},
    {NULL, NULL, 0, NULL},
};
