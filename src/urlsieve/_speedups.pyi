# The compiled accelerator's signatures (urlsieve/_speedups.c; each function's doc says
# what it does). Buffers are numpy arrays or mappings. Every build has every function
# (urlsieve._accel.COMPILED_PATHS lists them; an older build may lack some).
from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T", bound=tuple[Any, ...])

def fast_canonical(url: str, allow_query: bool, /) -> str | None: ...
def canonical_rewrite(url: str, allow_query: bool, keep_port: bool, /) -> str | None: ...
def url_parts(url: str, allow_query: bool, keep_port: bool, cls: type[_T], /) -> _T | None: ...
def bloom_test(bits: Any, t: int, h: Any, out: Any, /) -> None: ...
def bloom_insert(bits: Any, t: int, h: Any, out: Any, count: Any, tested: bool = ..., /) -> int: ...
def scan_mode(name: str | None = ..., /) -> str: ...
def xxh3_64(data: bytes | bytearray | memoryview, /) -> int: ...
def xxh3_128(data: bytes | bytearray | memoryview, /) -> int: ...
def bloom_urls(
    urls: list[str],
    allow_query: bool,
    keep_port: bool,
    bits: Any,
    t: int,
    h: Any,
    out: Any,
    count: Any,
    /,
) -> tuple[list[int], list[bool] | None]: ...
def exact_lookup(table: Any, keys: Any, out: Any, /) -> None: ...
def exact_insert(table: Any, keys: Any, out: Any, /) -> int: ...
def url_key(
    allow_query: bool, keep_port: bool, bits: int, query: Any, url: str, /
) -> int | tuple[int, int] | None: ...
def exact_add_locked(words: Any, fd: int, key: int, buckets: int, limit: int, /) -> int: ...
def bloom_add_locked(words: Any, fd: int, layers: Any, h1: int, h2: int, /) -> int: ...
def store_session(words: Any, op: int, word: int = 32, /) -> int: ...
def table_place(keys: Any, values: Any, table: Any, /) -> None: ...
def quote_all(text: str, /) -> str | None: ...
def squid_scan(
    lines: list[bytes], channels: bool, escaped: bool, out: Any, /
) -> list[str | None]: ...

# xxhash
def snapshot_match(
    image: Any, layout: Any, urls: list[Any], mask: Any, out: Any, /, *rest: Any
) -> None: ...
def snapshot_checker(
    image: Any,
    layout: Any,
    mask: bytes | None,
    verdict_type: Any,
    none: Any,
    allow: Any,
    block: Any,
    rules: Any,
    fallback: Callable[[Any], Any],
    /,
) -> Callable[[Any], Any]: ...
def canonical_hashes(
    urls: list[str], allow_query: bool, bits: int, out: Any, keep_port: bool, /
) -> list[int]: ...
def compile_lines(
    text: Any,
    pos: int,
    mode: int,
    max_lines: int,
    rule_id: int,
    string_offset: int,
    category_id: int,
    allow: bool,
    /,
) -> tuple[Any, ...] | None: ...
def snapshot_rules(
    image: Any,
    layout: Any,
    ids: Any,
    categories: Any,
    sources: Any,
    rule_type: Any,
    allow: Any,
    block: Any,
    /,
) -> list[Any]: ...
def squid_reply(
    lines: list[bytes],
    channels: bool,
    escaped: bool,
    image: Any,
    layout: Any,
    mask: Any,
    pieces: Any,
    unknown: Any,
    /,
) -> tuple[bytes, list[tuple[int, int]], int, int]: ...
def filter_reply(
    lines: list[bytes],
    image: Any,
    layout: Any,
    mask: Any,
    categories: Any,
    sources: Any,
    only: Any,
    /,
) -> tuple[bytes, list[tuple[int, int]]]: ...

# Near-duplicate documents (_neardup.h): references in urlsieve/neardup/simhash.py and index.py.
def simhash_text(text: str, shingle: int, /) -> int | None: ...
def simhash_tokens(tokens: list[bytes], shingle: int, /) -> int: ...
def features_text(text: str, shingle: int, /) -> tuple[int, bytes] | None: ...
def features_tokens(tokens: list[bytes], shingle: int, /) -> tuple[int, bytes]: ...
def nd_jaccard(a: Any, b: Any, /) -> float: ...
def nd_jaccard_many(query: Any, others: Any, /) -> list[float]: ...
def nd_build(fps: Any, n: int, tables: Any, /) -> Any: ...
def nd_query(index: Any, fp: int, k: int, fps: Any, n_total: int, /) -> list[tuple[int, int]]: ...
def nd_popcount(name: str | None, /) -> str: ...
