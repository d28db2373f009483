"""Near-duplicate documents: urlsieve's SimHash index against datasketch's MinHash LSH.

Run: ``python benchmarks/neardup.py [--docs 100000] [--write]`` (datasketch from the
``bench`` extra).

Corpus (generated, seeded): ``--docs`` documents of ``--words`` words drawn from a
Zipf-like vocabulary of 50,000 words. One in ten is a near duplicate of an earlier
document: ``--edits`` words replaced (the edit distance, in words) and a boilerplate
line changed (a date), as mirrors and reposts differ. Ground truth: each near
duplicate and its original.

Each method in its standard setting, on the same text:

* **SimHash index** (``urlsieve.neardup``): 64-bit SimHash over the text's distinct tokens
  (Manku et al.'s features), pigeonhole tables, every document within ``k`` bits
  (``MemoryIndex``; k = 3, Manku et al.'s setting, and k = 4, 5 with more blocks, so
  more tables with wider keys). Queries one at a time
  (``query``) and as one batch (``query_many``, vectorised in numpy);
* **MinHash LSH** (datasketch): ``MinHash(num_perm=128)`` over 3-word shingles
  (Broder's features), built with ``MinHash.bulk`` (its vectorised path),
  ``MinHashLSH(threshold=0.8)``; it has no batch query.

A query asks for the documents near a near duplicate; it is a hit when the original
is among them. Recall = originals found / near duplicates; precision = true
pairs among every pair returned (a document's own entry excluded). Timing is
per query, median of 3 rounds over 2,000 queries: *lookup* (the signature
given) and *signature + lookup* (from the text, one at a time). Memory is the
tracemalloc growth while each index is built from precomputed signatures, per
document.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import machine, table, verdict, write_section
from urlsieve.neardup.index import BATCH_MIN, MemoryIndex
from urlsieve.neardup.simhash import simhash, tokens

VOCAB = 50_000
QUERIES = 2_000


def corpus(n: int, words: int, edits: int, seed: int = 7) -> tuple[list[str], dict[int, int]]:
    """``n`` documents; every tenth is a near duplicate of an earlier one: {copy: original}."""
    rnd = random.Random(seed)
    vocab = [f"w{i}" for i in range(VOCAB)]
    cumulative = list(itertools.accumulate(1 / (i + 10) for i in range(VOCAB)))  # Zipf-like
    docs: list[str] = []
    truth: dict[int, int] = {}
    for i in range(n):
        if i % 10 == 9:
            original = rnd.randrange(i - 9, i)  # one of the last nine originals
            body = docs[original].split("\n")[0].split(" ")
            for _ in range(edits):
                body[rnd.randrange(len(body))] = rnd.choice(vocab)
            docs.append(" ".join(body) + f"\nmirrored on 2026-11-{rnd.randint(10, 28)}")
            truth[i] = original
        else:
            body = rnd.choices(vocab, cum_weights=cumulative, k=words)
            docs.append(" ".join(body) + "\nupdated on 2026-11-01")
    return docs, truth


def shingles(text: str) -> list[bytes]:
    words = tokens(text)
    return [" ".join(words[i : i + 3]).encode() for i in range(max(1, len(words) - 2))]


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median_per_query(fn: Callable[[], object], count: int) -> float:
    return statistics.median(timed(fn) for _ in range(3)) / count


def grown(build: Callable[[], object]) -> tuple[float, object]:
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    start = time.perf_counter()
    built = build()
    seconds = time.perf_counter() - start
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return after - before, built if seconds >= 0 else None


def quality(found: dict[int, set[int]], truth: dict[int, int]) -> tuple[float, float]:
    hits = sum(1 for q, orig in truth.items() if orig in found[q])
    returned = sum(len(v) for v in found.values())
    true_pairs = 0
    for q, got in found.items():
        for other in got:
            if truth.get(q) == other or truth.get(other) == q:
                true_pairs += 1
            elif other in truth and q in truth and truth[other] == truth[q]:
                true_pairs += 1  # two copies of one original are near duplicates too
    return hits / len(truth), (true_pairs / returned if returned else 1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--words", type=int, default=600, help="words per document")
    parser.add_argument("--edits", type=int, default=1, help="words replaced in a near duplicate")
    parser.add_argument("--threshold", type=float, default=0.8, help="MinHash LSH threshold")
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = parser.parse_args()
    from datasketch import MinHash, MinHashLSH

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    docs, truth = corpus(args.docs, args.words, args.edits)
    log(f"corpus: {len(docs):,} docs in {time.perf_counter() - t0:.1f}s")
    sets = [shingles(d) for d in docs]
    jaccards = [
        len(set(sets[q]) & set(sets[o])) / len(set(sets[q]) | set(sets[o]))
        for q, o in list(truth.items())[:2000]
    ]
    t = time.perf_counter()
    fps = [simhash(d) for d in docs]
    sim_sig = (time.perf_counter() - t) / len(docs)
    t = time.perf_counter()
    mins = MinHash.bulk(sets, num_perm=128)
    min_sig = (time.perf_counter() - t) / len(docs)
    log(f"signatures: simhash {sim_sig * 1e6:.0f} µs, minhash {min_sig * 1e6:.0f} µs")
    keys = [str(i) for i in range(len(docs))]
    queries = list(truth)
    sample = random.Random(1).sample(queries, min(QUERIES, len(queries)))

    def build_lsh() -> MinHashLSH:
        lsh = MinHashLSH(threshold=args.threshold, num_perm=128)
        with lsh.insertion_session() as session:
            for key, m in zip(keys, mins, strict=True):
                session.insert(key, m)
        return lsh

    rows = []
    results: dict[str, tuple[float, float, float]] = {}  # name -> lookup, batch, recall
    for k, blocks in ((3, 4), (4, 6), (5, 7)):

        def build_simhash(k: int = k, blocks: int = blocks) -> MemoryIndex:
            index = MemoryIndex(k=k, blocks=blocks)
            index.add_many(keys, fps)
            return index

        insert = timed(build_simhash) / len(docs)
        memory, built = grown(build_simhash)
        assert isinstance(built, MemoryIndex)
        index = built
        index.query_many([fps[0]] * BATCH_MIN)  # builds the batch path's sorted tables
        found = {
            q: {int(key) for key, _ in hits} - {q}
            for q, hits in zip(queries, index.query_many([fps[q] for q in queries]), strict=True)
        }
        recall, precision = quality(found, truth)
        batch_fps = [fps[q] for q in sample]

        def one_by_one(index: MemoryIndex = index, batch_fps: list[int] = batch_fps) -> object:
            return [index.query(fp) for fp in batch_fps]

        def as_batch(index: MemoryIndex = index, batch_fps: list[int] = batch_fps) -> object:
            return index.query_many(batch_fps)

        def from_text(index: MemoryIndex = index) -> object:
            return [index.query(simhash(docs[q])) for q in sample]

        lookup = median_per_query(one_by_one, len(sample))
        batch = median_per_query(as_batch, len(sample))
        full = median_per_query(from_text, len(sample))
        tables = len(index.layout.tables)
        name = f"SimHash index, k = {k}, {blocks} blocks, {tables} tables (urlsieve)"
        results[name] = (lookup, batch, recall)
        rows.append(
            [
                name,
                f"{lookup * 1e6:.1f}",
                f"{batch * 1e6:.2f}",
                f"{full * 1e6:.0f}",
                f"{sim_sig * 1e6:.0f}",
                f"{insert * 1e6:.1f}",
                f"{recall:.4f}",
                f"{precision:.4f}",
                f"{memory / len(docs):.0f}",
            ]
        )
        log(f"k={k}: done")

    lsh_build = timed(build_lsh) / len(docs)
    lsh_mem, built_lsh = grown(build_lsh)
    assert isinstance(built_lsh, MinHashLSH)
    lsh = built_lsh
    lsh_found = {q: {int(key) for key in lsh.query(mins[q])} - {q} for q in queries}
    lsh_recall, lsh_precision = quality(lsh_found, truth)
    lsh_lookup = median_per_query(lambda: [lsh.query(mins[q]) for q in sample], len(sample))
    lsh_full = median_per_query(
        lambda: [lsh.query(MinHash.bulk([sets[q]], num_perm=128)[0]) for q in sample],
        len(sample),
    )
    rows.append(
        [
            f"MinHash LSH, 128 perms, threshold {args.threshold} (datasketch)",
            f"{lsh_lookup * 1e6:.1f}",
            "—",
            f"{lsh_full * 1e6:.0f}",
            f"{min_sig * 1e6:.0f}",
            f"{lsh_build * 1e6:.1f}",
            f"{lsh_recall:.4f}",
            f"{lsh_precision:.4f}",
            f"{lsh_mem / len(docs):.0f}",
        ]
    )
    header = [
        "index",
        "lookup µs/query",
        "batch lookup µs/query",
        "signature + lookup µs/query",
        "signature µs/doc",
        "insert µs/doc",
        "recall",
        "precision",
        "index bytes/doc",
    ]
    lines = []
    for name, (lookup, batch, recall) in results.items():
        single_x, batch_x = lsh_lookup / lookup, lsh_lookup / batch
        ok = batch_x >= 10 and recall >= lsh_recall
        lines.append(
            f"- {name}: {single_x:.1f}× faster one query at a time, {batch_x:.1f}× as a batch, "
            f"recall {recall:.4f} vs {lsh_recall:.4f} — ≥ 10× at equal or better recall: "
            + verdict(ok)
        )
    body = f"""## Near-duplicate documents (`benchmarks/neardup.py`)

Command: `python benchmarks/neardup.py {" ".join(sys.argv[1:])}`

{len(docs):,} generated documents of {args.words} words (Zipf-like vocabulary of
{VOCAB:,}); {len(truth):,} of them are near duplicates of an earlier one ({args.edits} word(s)
replaced and a date line changed: Jaccard of their 3-word shingle sets median
{statistics.median(jaccards):.3f}, min {min(jaccards):.3f}). SimHash over distinct tokens, MinHash
over 3-word shingles (each method's standard features). Queries: every near duplicate
for recall and precision; {len(sample):,} of them for timing (median of 3 rounds).
Memory: tracemalloc growth while each index is built from precomputed signatures.
Machine: {machine()}.

{table(header, rows)}

Against MinHash LSH's lookup ({lsh_lookup * 1e6:.1f} µs):

{chr(10).join(lines)}
"""
    print(body)
    if args.write:
        write_section("neardup", body)


if __name__ == "__main__":
    main()
