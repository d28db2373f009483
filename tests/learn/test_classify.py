"""The classifier on the origin's pages and on the cases E2Guardian gets wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.learn.origin import PAGES, load_test_phrases
from urlsieve.learn.classify import Classifier
from urlsieve.learn.page import Page
from urlsieve.learn.phrases import PhraseSet
from urlsieve.learn.text import decode, html_text, normalise

DATA = Path(__file__).parent / "data" / "phrases"


@pytest.fixture(scope="module")
def phrases() -> PhraseSet:
    return load_test_phrases()


@pytest.fixture(scope="module")
def classifier(phrases: PhraseSet) -> Classifier:
    return Classifier(phrases)


def _html(body: str) -> bytes:
    return f"<html><head><title>t</title></head><body>{body}</body></html>".encode()


CLASSIFIED = sorted(p for p, r in PAGES.items() if r.expect not in ("-", "redirect"))


@pytest.mark.parametrize("path", CLASSIFIED)
def test_origin_pages_are_classified_as_expected(classifier: Classifier, path: str) -> None:
    route = PAGES[path]
    result = classifier.classify_body(route.body, dict(route.headers).get("Content-Type"))
    assert (result.category if result.blocked else None) == route.expect, result.reason


def test_classify_page_uses_the_content_type(classifier: Classifier) -> None:
    route = PAGES["/zh/gbk-header.html"]
    page = Page("http://x/", "http://x/", 200, route.headers, route.body, 0.0)
    result = classifier.classify_page(page)
    assert (result.verdict, result.category, result.charset) == ("block", "gambling", "gb18030")


def test_a_huge_page_is_classified_over_all_of_it(classifier: Classifier) -> None:
    """Issue 30 item 7: phrases after megabytes of padding are seen (in segments), up to
    ``max_scan_bytes``; past it the result says ``truncated``."""
    route = PAGES["/huge.html"]
    assert len(route.body) > 4 * 1024 * 1024
    result = classifier.classify_body(route.body, "text/html; charset=utf-8")
    assert not result.truncated and result.chars > 4 * 1024 * 1024
    assert result.category == "gambling"
    late = b"<p>" + b"padding " * 280_000 + b"</p><p>online casino jackpot roulette</p>"
    found = classifier.classify_body(late, "text/html")
    assert found.blocked and not found.truncated
    assert min(h.offsets[0] for h in found.evidence) > 2_000_000  # in the whole text
    small = Classifier(load_test_phrases(), max_scan_bytes=2 * 1024 * 1024)
    past = small.classify_body(late, "text/html")
    assert past.truncated and not past.blocked


def test_evidence_explains_the_verdict(classifier: Classifier) -> None:
    route = PAGES["/en/casino.html"]
    result = classifier.classify_body(route.body, "text/html; charset=utf-8")
    top = result.evidence[0]
    assert (top.phrase, top.category, top.weight, top.contribution) == (
        "<online casino>",
        "gambling",
        40,
        40,
    )
    assert top.count == 2 and len(top.offsets) == 2
    assert top.source.endswith("gambling/weighted") and top.line == 3
    assert [h.contribution for h in result.evidence] == sorted(
        (h.contribution for h in result.evidence), reverse=True
    )
    assert result.score == sum(h.contribution for h in result.evidence) == 185
    assert dict(result.scores) == {"gambling": 185}


def test_offsets_point_into_the_normalised_text(classifier: Classifier) -> None:
    text = "Tomatoes. Then ONLINE  Casino!"
    result = classifier.classify_text(text)
    hit = next(h for h in result.evidence if h.phrase == "<online casino>")
    assert normalise(text)[hit.offsets[0] :].startswith("online casino")


def test_hard_negatives_are_allowed(classifier: Classifier) -> None:
    for path in ("/en/medical.html", "/en/news.html", "/zh/news.html", "/zh/edu.html"):
        route = PAGES[path]
        result = classifier.classify_body(route.body, dict(route.headers).get("Content-Type"))
        assert result.verdict == "allow", (path, result.reason)
    medical = classifier.classify_body(PAGES["/en/medical.html"].body, "text/html")
    assert medical.score < 0


def test_single_character_lexicon_word_does_not_block(phrases: PhraseSet) -> None:
    # 赌 is in the lexicon; with weight 100 it would block any page with 赌气 if loaded.
    strict = Classifier(
        PhraseSet.load(lexicons=[(DATA / "lexicon_zh.txt", "gambling", 100)]), limit=50
    )
    assert strict.classify_text("他赌气不吃饭。赌气，赌气，赌气。").verdict == "allow"
    assert strict.classify_text("赌博").verdict == "block"


def test_traditional_big5_matches_simplified_phrases(classifier: Classifier) -> None:
    body = _html("網上賭場，百家樂").decode().encode("big5")
    result = classifier.classify_body(body, "text/html; charset=big5")
    assert result.blocked
    assert {h.phrase for h in result.evidence} >= {"<网上赌场>", "<百家乐>"}


@pytest.mark.parametrize(
    ("content_type", "meta"),
    [
        ("text/html; charset=gbk", ""),
        ("text/html", '<meta charset="gbk">'),
        ("text/html", '<meta http-equiv="Content-Type" content="text/html; charset=GB2312">'),
    ],
)
def test_gbk_by_header_or_meta(classifier: Classifier, content_type: str, meta: str) -> None:
    body = f"<html><head>{meta}</head><body>网上赌场 百家乐 六合彩</body></html>".encode("gbk")
    result = classifier.classify_body(body, content_type)
    assert (result.verdict, result.charset) == ("block", "gb18030")


def test_big5_without_any_charset_is_detected(classifier: Classifier) -> None:
    route = PAGES["/zh/big5-bare.html"]
    assert b"charset" not in route.body and dict(route.headers)["Content-Type"] == "text/html"
    text, charset = decode(route.body, "text/html")
    assert "網上賭場" in text and charset == "big5hkscs"
    assert classifier.classify_body(route.body, "text/html").category == "gambling"


def test_entities_and_phrases_split_across_tags(classifier: Classifier) -> None:
    nbsp = classifier.classify_text(html_text("<p>casino&nbsp;bonus</p>"))
    assert "<casino>,<bonus>" in {h.phrase for h in nbsp.evidence}
    hex_refs = classifier.classify_body(_html("&#x8D4C;&#x535A;"), "text/html")
    assert "<赌博>" in {h.phrase for h in hex_refs.evidence}
    split = classifier.classify_body(_html("<b>online</b> casino"), "text/html")
    assert "<online casino>" in {h.phrase for h in split.evidence}
    inline_zh = classifier.classify_body(_html("<b>网上</b>赌场"), "text/html")
    assert "<网上赌场>" in {h.phrase for h in inline_zh.evidence}


def test_blocks_do_not_run_together() -> None:
    assert "poker" not in normalise(html_text("<ul><li>po</li><li>ker</li></ul>"))
    assert normalise(html_text("<p>online</p><p>casino</p>")).split() == ["online", "casino"]


def test_script_style_noscript_template_words_do_not_count(classifier: Classifier) -> None:
    body = (
        b"<html><head><style>.a{} /* online casino jackpot */</style>"
        b"<script>var a='online casino jackpot roulette'</script></head><body>"
        b"<noscript>online casino jackpot</noscript><template>jackpot roulette casino</template>"
        b"<p>hello</p></body></html>"
    )
    result = classifier.classify_body(body, "text/html")
    assert result.evidence == () and result.verdict == "allow"


def test_word_boundaries(classifier: Classifier) -> None:
    assert classifier.classify_text("casinos pokerface").evidence == ()
    assert {h.phrase for h in classifier.classify_text("Casino, poker.").evidence} == {
        "< casino >",
        "< poker >",
    }


def test_once_per_page_and_per_occurrence(phrases: PhraseSet) -> None:
    text = "casino casino casino"
    assert Classifier(phrases).classify_text(text).score == 30
    assert Classifier(phrases, per_occurrence=True).classify_text(text).score == 90
    combination = Classifier(phrases, per_occurrence=True).classify_text("casino bonus casino")
    assert {h.phrase: h.contribution for h in combination.evidence}["<casino>,<bonus>"] == 20


def test_limit_is_strictly_greater_and_over_the_total(classifier: Classifier) -> None:
    assert classifier.classify_text("poker casino").score == 50
    assert classifier.classify_text("poker casino").verdict == "allow"
    mixed = classifier.classify_text("casino jackpot breast cancer mammogram")
    assert dict(mixed.scores) == {"gambling": 55, "adult": -20}
    assert (mixed.score, mixed.verdict) == (35, "allow")


def test_per_category_limits(phrases: PhraseSet) -> None:
    strict = Classifier(phrases, limits={"gambling": 20})
    result = strict.classify_text("casino")
    assert (result.verdict, result.category) == ("block", "gambling")
    assert "its limit 20" in result.reason


def test_banned_blocks_and_exception_wins(classifier: Classifier) -> None:
    banned = classifier.classify_text("we sell stolen credit cards")
    assert (banned.verdict, banned.category, banned.score) == ("block", "banned", 0)
    both = classifier.classify_text("stolen credit cards, urlsieve research exception")
    assert both.verdict == "allow" and "exception" in both.reason


def test_plain_text_is_not_parsed_as_html(classifier: Classifier) -> None:
    result = classifier.classify_body(b"<b>online casino</b> & jackpot", "text/plain")
    assert result.blocked


def test_empty_phrase_set_allows_everything() -> None:
    result = Classifier(PhraseSet()).classify_body(b"online casino", "text/html")
    assert (result.verdict, result.score, result.evidence) == ("allow", 0, ())


def test_boundaries_and_offsets_next_to_multibyte_characters(classifier: Classifier) -> None:
    # The automaton runs over UTF-8 bytes: a neighbour of several bytes is decoded for the
    # boundary check, and offsets are still character offsets of the normalised text.
    text = "Ĉasino ΣcasinoΣ 賭場casino 𠀀 casino, poker日 é poker"
    normalised = normalise(text)
    result = classifier.classify_text(text)
    hits = {h.phrase: h for h in result.evidence}
    # "ĉasino" is not "casino"; σ, 场 (after t2s) and 日 are letters, so only "casino,"
    # after the four-byte 𠀀 and the last "poker" (after é) are whole words.
    assert (hits["< casino >"].count, hits["< poker >"].count) == (1, 1)
    assert set(hits) == {"< casino >", "< poker >"}
    for hit in result.evidence:
        first = hit.phrase.strip("<> ").split(">,<")[0].strip()
        for offset in hit.offsets:
            assert normalised[offset:].startswith(first), (hit.phrase, offset)


def test_lone_surrogates_in_text_do_not_raise(classifier: Classifier) -> None:
    # classify_text takes any str; a lone surrogate used to escape as UnicodeEncodeError.
    result = classifier.classify_text("\ud800 online casino \udfff jackpot")
    hit = next(h for h in result.evidence if h.phrase == "<online casino>")
    assert hit.offsets == (2,) and result.blocked
