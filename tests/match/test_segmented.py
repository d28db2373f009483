"""The seed patent's table, step by step: hash, prefix value, classes, buckets, probing."""

from __future__ import annotations

from urlsieve import parse_rule
from urlsieve.match import SegmentedTable
from urlsieve.match.segmented import hf, prefix_value, rule_location, split_levels


def test_prefix_values_of_the_worked_example() -> None:
    assert prefix_value("www.taobao.com") == 30583
    assert prefix_value("image.baidu.com/channel") == 26989
    assert prefix_value("a") == ord("a") << 8
    assert prefix_value("") == 0


def test_hf_is_sum_of_c_times_3_times_i() -> None:
    assert hf("ab") == 97 * 3 * 1 + 98 * 3 * 2
    # C char is signed: bytes >= 0x80 count negative, and the result is made positive
    assert hf("é") == abs(-61 * 3 * 1 + -87 * 3 * 2)
    # 32-bit int arithmetic wraps
    long = "z" * 4000
    exact = sum(122 * 3 * i for i in range(1, 4001))
    wrapped = exact & 0xFFFFFFFF
    wrapped = wrapped - (1 << 32) if wrapped >= 1 << 31 else wrapped
    assert hf(long) == abs(wrapped)


def test_levels_are_cut_at_the_first_three_separators() -> None:
    assert split_levels("www.taobao.com") == ["www.taobao.com"]
    assert split_levels("www.taobao.com/") == ["www.taobao.com"]
    assert split_levels("image.baidu.com/channel") == ["image.baidu.com", "image.baidu.com/channel"]
    assert split_levels("a.com/b/c/d/e") == ["a.com", "a.com/b", "a.com/b/c"]
    assert rule_location(parse_rule("a.com/b/")) == "a.com/b"


def test_buckets_are_split_by_class_in_the_given_ratios() -> None:
    rules = [parse_rule(f"h{i}.example") for i in range(50)]
    rules += [parse_rule(f"h{i}.example/p") for i in range(25)]
    rules += [parse_rule(f"h{i}.example/p/q/r") for i in range(25)]
    table = SegmentedTable(rules, size=80, ratios=(0.5, 0.25, 0.25))
    black = table.black
    assert black.num == [40, 20, 20]
    assert black.offset == [0, 40, 60]
    assert black.counts == [50, 25, 25]
    for index, bucket in enumerate(black.buckets):
        for _, urls in bucket or []:
            for stored, _ in urls:
                cls = len(split_levels(stored))
                assert black.offset[cls - 1] <= index < black.offset[cls - 1] + black.num[cls - 1]
    # proportional by default
    assert SegmentedTable(rules, size=80).black.num == [40, 20, 20]


def test_prefix_nodes_group_urls_by_their_first_two_bytes() -> None:
    rules = [parse_rule("www.a.example"), parse_rule("www.b.example"), parse_rule("xx.example")]
    table = SegmentedTable(rules, size=1)  # one bucket: everything collides
    [bucket] = table.black.buckets
    assert bucket is not None
    assert sorted((value, len(urls)) for value, urls in bucket) == [
        (prefix_value("www"), 2),
        (prefix_value("xx"), 1),
    ]
    assert table.check("http://xx.example/x").action == "block"


def test_raw_prefix_comparison_blocks_on_a_bucket_collision() -> None:
    # The patent compares strings as raw prefixes: in a shared bucket "evil.com"
    # is a prefix of "evil.community" (a documented flaw; urlsieve never does this).
    table = SegmentedTable([parse_rule("evil.com")], size=1)
    assert table.check("http://evil.community/").action == "block"
    roomy = SegmentedTable([parse_rule("evil.com")], size=1 << 16)
    assert roomy.check("http://evil.community/").action == "none"


def test_whitelist_is_consulted_first() -> None:
    table = SegmentedTable([parse_rule("a.example"), parse_rule("a.example/p", "allow")])
    assert table.check("http://a.example/p/x").action == "allow"
    assert table.check("http://a.example/q").action == "block"
