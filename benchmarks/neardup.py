"""Near-duplicate documents: urlsieve's SimHash index against datasketch's MinHash LSH.

Run: ``python benchmarks/neardup.py [--docs 100000] [--write]`` (datasketch from the
``bench`` extra).

Corpus (generated, seeded): ``--docs`` documents of ``--words`` words drawn from a
Zipf-like vocabulary of 50,000 words. One in ten is a near duplicate of one of the
nine documents before it: 0, 1, 2, 3, 5, 8, 12 or 20 words replaced (edit distance
controlled) and a date line changed, as mirrors and reposts differ.

The comparison is made **at the same threshold**, on the same features (each
document's set of distinct tokens, which is what urlsieve's SimHash votes over):

* a threshold ``T`` on the Jaccard similarity of the token sets; ground truth: the near
  duplicates whose Jaccard with their original is at least ``T`` (computed exactly);
* **MinHash LSH** (datasketch): ``MinHash(num_perm=128)`` built with ``MinHash.bulk``,
  ``MinHashLSH(threshold=T)``;
* **SimHash index** (urlsieve): ``k`` calibrated to ``T`` — two sets at Jaccard ``T``
  (equal sizes) have cosine ``2T/(1+T)``, and SimHash bits differ with probability
  ``angle/π``, so ``k = round(64 · arccos(2T/(1+T)) / π)``; ``MemoryIndex(k, blocks)``.

A query asks for the documents near a near duplicate; it is a hit when the original is
among them. Recall: hits among the ground truth. "Below T": near duplicates under the
threshold that were returned anyway (neither method is sharp at its threshold).
Precision: true pairs among every pair returned (copies of one original count as true).
Timing: per query, median of 3 rounds over 2,000 queries; *lookup* (signature given),
*batch* (``query_many``; LSH has no batch query) and *signature + lookup* (from the text).
Memory: tracemalloc growth while each index is built from precomputed signatures.
"""

from __future__ import annotations

import argparse
import itertools
import math
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


EDITS = (0, 1, 2, 3, 5, 8, 12, 20)


def corpus(n: int, words: int, seed: int = 7) -> tuple[list[str], dict[int, int]]:
    """``n`` documents; every tenth is a near duplicate of an earlier one: {copy: original}."""
    rnd = random.Random(seed)
    vocab = [f"w{i}" for i in range(VOCAB)]
    cumulative = list(itertools.accumulate(1 / (i + 10) for i in range(VOCAB)))  # Zipf-like
    docs: list[str] = []
    truth: dict[int, int] = {}
    for i in range(n):
        if i % 10 == 9:
            original = rnd.randrange(i - 9, i)
            body = docs[original].split("\n")[0].split(" ")
            for _ in range(rnd.choice(EDITS)):
                body[rnd.randrange(len(body))] = rnd.choice(vocab)
            docs.append(" ".join(body) + f"\nmirrored on 2026-11-{rnd.randint(10, 28)}")
            truth[i] = original
        else:
            body = rnd.choices(vocab, cum_weights=cumulative, k=words)
            docs.append(" ".join(body) + "\nupdated on 2026-11-01")
    return docs, truth


def token_set(text: str) -> set[bytes]:
    return {t.encode() for t in tokens(text)}


def calibrated_k(threshold: float) -> int:
    return round(64 * math.acos(2 * threshold / (1 + threshold)) / math.pi)


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
    parser.add_argument(
        "--thresholds", default="0.975:4,0.95:7", help="T:blocks pairs (k is calibrated to T)"
    )
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = parser.parse_args()
    from datasketch import MinHash, MinHashLSH

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    docs, truth = corpus(args.docs, args.words)
    sets = [token_set(d) for d in docs]
    jaccard = {q: len(sets[q] & sets[o]) / len(sets[q] | sets[o]) for q, o in truth.items()}
    log(f"corpus: {len(docs):,} docs in {time.perf_counter() - t0:.1f}s")
    t = time.perf_counter()
    fps = [simhash(d) for d in docs]
    sim_sig = (time.perf_counter() - t) / len(docs)
    t = time.perf_counter()
    mins = MinHash.bulk([list(s) for s in sets], num_perm=128)
    min_sig = (time.perf_counter() - t) / len(docs)
    log(f"signatures: simhash {sim_sig * 1e6:.0f} µs, minhash {min_sig * 1e6:.0f} µs")
    keys = [str(i) for i in range(len(docs))]
    queries = list(truth)
    sample = random.Random(1).sample(queries, min(QUERIES, len(queries)))
    sample_fps = [fps[q] for q in sample]
    header = [
        "T",
        "index",
        "lookup µs/query",
        "batch µs/query",
        "signature + lookup µs/query",
        "recall (J ≥ T)",
        "returned below T",
        "precision",
        "index bytes/doc",
    ]
    rows, lines = [], []
    for spec in args.thresholds.split(","):
        threshold, blocks = float(spec.split(":")[0]), int(spec.split(":")[1])
        k = calibrated_k(threshold)
        wanted = {q for q in queries if jaccard[q] >= threshold}

        def build_simhash(k: int = k, blocks: int = blocks) -> MemoryIndex:
            index = MemoryIndex(k=k, blocks=blocks)
            index.add_many(keys, fps)
            return index

        def build_lsh(threshold: float = threshold) -> MinHashLSH:
            lsh = MinHashLSH(threshold=threshold, num_perm=128)
            with lsh.insertion_session() as session:
                for key, m in zip(keys, mins, strict=True):
                    session.insert(key, m)
            return lsh

        sim_mem, built = grown(build_simhash)
        lsh_mem, built_lsh = grown(build_lsh)
        assert isinstance(built, MemoryIndex) and isinstance(built_lsh, MinHashLSH)
        index, lsh = built, built_lsh
        index.query_many(sample_fps[:BATCH_MIN])  # builds the batch path's sorted tables
        answers = index.query_many([fps[q] for q in queries])
        sim_found = {
            q: {int(key) for key, _ in a} - {q} for q, a in zip(queries, answers, strict=True)
        }
        lsh_found = {q: {int(key) for key in lsh.query(mins[q])} - {q} for q in queries}

        def one_by_one(index: MemoryIndex = index) -> object:
            return [index.query(fp) for fp in sample_fps]

        def as_batch(index: MemoryIndex = index) -> object:
            return index.query_many(sample_fps)

        def sim_text(index: MemoryIndex = index) -> object:
            return [index.query(simhash(docs[q])) for q in sample]

        def lsh_one(lsh: MinHashLSH = lsh) -> object:
            return [lsh.query(mins[q]) for q in sample]

        def lsh_text(lsh: MinHashLSH = lsh) -> object:
            return [
                lsh.query(MinHash.bulk([list(token_set(docs[q]))], num_perm=128)[0]) for q in sample
            ]

        measured = {}
        for name, found, one, batch, text, memory in (
            (
                f"SimHash, k = {k}, {blocks} blocks, {len(index.layout.tables)} tables",
                sim_found,
                one_by_one,
                as_batch,
                sim_text,
                sim_mem,
            ),
            (
                f"MinHash LSH, 128 perms, b = {lsh.b}, r = {lsh.r}",
                lsh_found,
                lsh_one,
                None,
                lsh_text,
                lsh_mem,
            ),
        ):
            hits = {q for q in queries if truth[q] in found[q]}
            recall = len(hits & wanted) / len(wanted)
            below = len(hits - wanted)
            _, precision = quality(found, truth)
            lookup = median_per_query(one, len(sample))
            batched = median_per_query(batch, len(sample)) if batch else None
            full = median_per_query(text, len(sample))
            measured[name] = (lookup, batched, recall, full)
            rows.append(
                [
                    f"{threshold}",
                    name,
                    f"{lookup * 1e6:.1f}",
                    "—" if batched is None else f"{batched * 1e6:.2f}",
                    f"{full * 1e6:.0f}",
                    f"{recall:.4f} of {len(wanted):,}",
                    f"{below:,}",
                    f"{precision:.4f}",
                    f"{memory / len(docs):.0f}",
                ]
            )
        (s_one, s_batch, s_recall, s_full), (l_one, _, l_recall, l_full) = measured.values()
        assert s_batch is not None
        better = s_recall >= l_recall
        lines.append(
            f"- T = {threshold} (k = {k}), recall {s_recall:.4f} vs {l_recall:.4f}: from the "
            f"text {l_full / s_full:.1f}× LSH's speed — {verdict(better and l_full >= 10 * s_full)}"
            f"; lookup alone {l_one / s_one:.1f}× one at a time, {l_one / s_batch:.1f}× as a "
            f"batch — {verdict(better and l_one >= 10 * s_batch)} (goal: ≥ 10× at equal or "
            "better recall)"
        )
        log(f"T={threshold}: done")
    body = f"""## Near-duplicate documents (`benchmarks/neardup.py`)

Command: `python benchmarks/neardup.py {" ".join(sys.argv[1:])}`

{len(docs):,} generated documents of {args.words} words (Zipf-like vocabulary of
{VOCAB:,}); {len(truth):,} of them near duplicates of an earlier one (0–20 words replaced
and a date line changed; token-set Jaccard with the original: median
{statistics.median(jaccard.values()):.3f}, 10th percentile
{statistics.quantiles(jaccard.values(), n=10)[0]:.3f}). Both methods on each document's
distinct tokens, at the same threshold T (SimHash's k calibrated to T, see the script).
Signatures: SimHash {sim_sig * 1e6:.0f} µs/doc, MinHash {min_sig * 1e6:.0f} µs/doc.
Machine: {machine()}.

{table(header, rows)}

{chr(10).join(lines)}
"""
    print(body)
    if args.write:
        write_section("neardup", body)


if __name__ == "__main__":
    main()
