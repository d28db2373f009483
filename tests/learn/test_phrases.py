"""Reading E2Guardian phrase lists and the plain lexicon: entries, errors, includes."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from urlsieve.exceptions import RuleSyntaxError
from urlsieve.learn.phrases import Phrase, PhraseSet, Term

DATA = Path(__file__).parent / "data" / "phrases"
ERRORS = DATA / "errors"


def _by_text(phrases: PhraseSet) -> dict[str, Phrase]:
    return {str(p): p for p in phrases.phrases}


def test_test_lists_load_with_includes_categories_and_weights() -> None:
    phrases = PhraseSet.load(
        weighted=[DATA / "weightedphraselist"],
        banned=[DATA / "bannedphraselist"],
        exception=[DATA / "exceptionphraselist"],
    )
    assert phrases.errors == ()
    found = _by_text(phrases)
    assert found["< casino >"].terms == (Term("casino", True, True),)
    assert found["< casino >"].weight == 30
    assert found["< casino >"].category == "gambling"
    assert found["<online casino>"].terms == (Term("online casino"),)
    assert found["<casino>,<bonus>"].terms == (Term("casino"), Term("bonus"))
    assert found["<breast cancer>"].weight == -30
    assert found["<breast cancer>"].category == "adult"
    assert found["<网上赌场>"].weight == 50
    banned = found["<stolen credit cards>"]
    assert (banned.kind, banned.category, banned.weight) == ("banned", "banned", 0)
    assert found["<urlsieve research exception>"].kind == "exception"
    assert found["< casino >"].source.endswith("gambling/weighted")
    assert found["< casino >"].line == 4


def test_bad_lines_are_reported_as_file_line_reason_and_good_lines_load() -> None:
    path = ERRORS / "weighted"
    phrases = PhraseSet.load(weighted=[path])
    messages = [str(error) for error in phrases.errors]
    where = [(e.source, e.line) for e in phrases.errors]
    assert all(isinstance(error, RuleSyntaxError) for error in phrases.errors)
    assert where == [(str(path), n) for n in (3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14)]
    assert messages[0] == f"{path}:3: weight <25i> is not an integer"
    assert "missing >" in messages[1]
    assert "'<' inside a phrase" in messages[2]
    assert "no <weight>" in messages[3]
    assert "weight 0" in messages[4]
    assert "percentage" in messages[5]
    assert "empty phrase" in messages[6]
    assert "text after the weight" in messages[7]
    assert "not a phrase line" in messages[8]
    assert "not UTF-8 (byte 0xff at column 1)" in messages[9]
    assert "cannot read" in messages[10] and "missing-file" in messages[10]
    assert sorted(_by_text(phrases)) == [
        "<good one>",
        "<last good>",
        "<ok two>,< ok three >",
    ]
    combination = _by_text(phrases)["<ok two>,< ok three >"]
    assert (combination.weight, combination.category) == (15, "gambling")


def test_include_cycle_is_reported_once_and_both_files_load() -> None:
    phrases = PhraseSet.load(weighted=[ERRORS / "cycle_a"])
    assert sorted(_by_text(phrases)) == ["<in a>", "<in b>"]
    assert len(phrases.errors) == 1
    assert "include cycle" in str(phrases.errors[0])
    assert str(phrases.errors[0]).startswith(f"{ERRORS / 'cycle_b'}:1: ")


def test_included_file_inherits_the_category_until_it_sets_its_own() -> None:
    phrases = _by_text(PhraseSet.load(weighted=[ERRORS / "inherit_parent"]))
    assert phrases["<child phrase>"].category == "drugs"
    assert phrases["<child own>"].category == "child"
    assert phrases["<parent phrase>"].category == "drugs"


def test_include_depth_is_capped(tmp_path: Path) -> None:
    for level in range(30):
        (tmp_path / f"l{level}").write_text(f".Include<l{level + 1}>\n<p{level}><1>\n")
    (tmp_path / "l30").write_text("<deep><1>\n")
    phrases = PhraseSet.load(weighted=[tmp_path / "l0"])
    assert [e.reason for e in phrases.errors] == ["includes nested deeper than 16"]
    assert len(phrases.phrases) == 17


def test_absolute_include(tmp_path: Path) -> None:
    (tmp_path / "top").write_text(f".Include<{DATA / 'gambling' / 'weighted'}>\n")
    phrases = PhraseSet.load(weighted=[tmp_path / "top"])
    assert phrases.errors == ()
    assert "<jackpot>" in _by_text(phrases)


def test_missing_list_is_an_error_not_an_exception(tmp_path: Path) -> None:
    phrases = PhraseSet.load(banned=[tmp_path / "nope"])
    assert phrases.phrases == ()
    assert str(phrases.errors[0]).startswith(f"{tmp_path / 'nope'}: cannot read")


def test_weight_in_a_banned_list_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "banned").write_text("<x y><10>\n<z w>\n")
    phrases = PhraseSet.load(banned=[tmp_path / "banned"])
    assert [str(p) for p in phrases.phrases] == ["<z w>"]
    assert "a weight in a banned list" in str(phrases.errors[0])


def test_lexicon_skips_and_reports_single_characters() -> None:
    phrases = PhraseSet.load(lexicons=[(DATA / "lexicon_zh.txt", "gambling", 30)])
    assert sorted(_by_text(phrases)) == ["<六合彩>", "<博彩>", "<百家乐>", "<赌博>"]
    assert all(p.weight == 30 and p.category == "gambling" for p in phrases.phrases)
    assert len(phrases.errors) == 1
    assert str(phrases.errors[0]).startswith(f"{DATA / 'lexicon_zh.txt'}:6: one-character")


def test_phrases_are_normalised_like_page_text(tmp_path: Path) -> None:
    (tmp_path / "w").write_text("<網上賭場><50>\n<ＣＡＳＩＮＯ   Royale><10>\n<STRASSE><5>\n")
    phrases = PhraseSet.load(weighted=[tmp_path / "w"])
    assert sorted(_by_text(phrases)) == ["<casino royale>", "<strasse>", "<网上赌场>"]


def test_phrase_cap(tmp_path: Path) -> None:
    (tmp_path / "w").write_text("".join(f"<p{n}><1>\n" for n in range(10)))
    phrases = PhraseSet.load(weighted=[tmp_path / "w"], max_phrases=4)
    assert len(phrases.phrases) == 4
    assert [e.line for e in phrases.errors] == [5]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=60), max_size=20))
def test_any_bytes_load_without_raising(lines: list[bytes]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "list"
        path.write_bytes(b"\n".join(lines))
        first = PhraseSet.load(weighted=[path], lexicons=[(path, "x", 5)])
        again = PhraseSet.load(weighted=[path], lexicons=[(path, "x", 5)])
    assert first.phrases == again.phrases
    assert [str(e) for e in first.errors] == [str(e) for e in again.errors]
    for error in first.errors:
        assert isinstance(error, RuleSyntaxError)
        assert error.source == str(path)
    for phrase in first.phrases:
        assert phrase.terms and all(term.text for term in phrase.terms)
