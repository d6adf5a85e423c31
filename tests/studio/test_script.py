"""Script parsing: the line forms, the narrator, comments, when "Word:" is a speaker, and in-place edits."""

from __future__ import annotations

import pytest

from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.studio.script import NARRATOR, is_name, parse_script, replace_line, speakers

SCRIPT = """# The cast: Alice, Bob
Alice: Hello there.
[Bob] Hi, Alice!

It was a dark night.
Carol：你好，我是卡罗尔。
Alice: See you at 10:30.
"""


def pairs(text: str) -> list[tuple[str, str]]:
    return [(line.speaker, line.text) for line in parse_script(text)]


def test_every_form_gives_its_speaker_and_text() -> None:
    lines = parse_script(SCRIPT)
    assert [(x.speaker, x.text) for x in lines] == [
        ("Alice", "Hello there."), ("Bob", "Hi, Alice!"), (NARRATOR, "It was a dark night."),
        ("Carol", "你好，我是卡罗尔。"), ("Alice", "See you at 10:30.")]
    assert [x.index for x in lines] == [0, 1, 2, 3, 4]
    assert [x.source for x in lines] == [1, 2, 4, 5, 6]  # blank lines and the comment are skipped


def test_speakers_in_order_of_first_appearance() -> None:
    assert speakers(parse_script(SCRIPT)) == ["Alice", "Bob", NARRATOR, "Carol"]


def test_a_lone_label_in_prose_stays_text() -> None:
    prose = "We met in the morning.\nNote: at 10:30 the bus leaves.\nThen we went home."
    assert pairs(prose) == [(NARRATOR, "We met in the morning."), (NARRATOR, "Note: at 10:30 the bus leaves."),
                            (NARRATOR, "Then we went home.")]


def test_the_same_label_twice_or_a_fully_labelled_script_is_a_dialogue() -> None:
    assert pairs("Ann: one\nIt rained.\nAnn: two") == [("Ann", "one"), (NARRATOR, "It rained."), ("Ann", "two")]
    assert pairs("Ann: only line") == [("Ann", "only line")]
    # Two different labels make a dialogue even when each appears once.
    assert pairs("Ann: hi\nBen: hello\nThe end.") == [("Ann", "hi"), ("Ben", "hello"), (NARRATOR, "The end.")]


@pytest.mark.parametrize("label", ["Well, then", "Why?", "He said this to me at last", "10", "End.",
                                   "a" * 33])
def test_sentence_like_labels_are_not_names(label: str) -> None:
    assert not is_name(label)
    assert pairs(f"{label}: something\nX: y\nZ: w")[0] == (NARRATOR, f"{label}: something")


def test_names_that_are_names() -> None:
    for label in ("Alice", "Dr. Smith", "Speaker 2", "老王", "Mary Ann Lee"):
        assert is_name(label)


def test_web_addresses_and_empty_labels_are_text() -> None:
    assert pairs("http://example.com is the page\nA: b\nC: d")[0] == (NARRATOR, "http://example.com is the page")
    assert pairs("[Bob]\nBob: hi") == [("Bob", "hi")]  # a label with nothing to say is skipped


@pytest.mark.parametrize("text", ["", "   \n\n", "# only a comment\n#another"])
def test_an_empty_script_is_refused(text: str) -> None:
    with pytest.raises(InvalidRequest) as error:
        parse_script(text)
    assert error.value.code == "script_empty" and "no lines" in error.value.message


def test_replace_line_rewrites_one_line_and_keeps_the_rest() -> None:
    edited = replace_line(SCRIPT, 4, NARRATOR, "It was a bright morning.")
    assert pairs(edited) == [("Alice", "Hello there."), ("Bob", "Hi, Alice!"), (NARRATOR, "It was a bright morning."),
                             ("Carol", "你好，我是卡罗尔。"), ("Alice", "See you at 10:30.")]
    assert edited.splitlines()[0] == "# The cast: Alice, Bob" and edited.endswith("\n")
    renamed = replace_line(SCRIPT, 2, "Bob", "Oh: hello again")  # the text may hold a colon
    assert pairs(renamed)[1] == ("Bob", "Oh: hello again")


def test_replace_line_writes_narrator_text_plainly_only_when_safe() -> None:
    edited = replace_line("Ann: a\nBen: b\nIt rained.", 2, NARRATOR, "Joe: did not speak")
    assert pairs(edited)[2] == (NARRATOR, "Joe: did not speak")
    assert edited.splitlines()[2] == "Narrator: Joe: did not speak"  # plain text would have made Joe speak
    assert replace_line("Ann: a\nBen: b\nIt rained.", 2, NARRATOR, "It poured.").splitlines()[2] == "It poured."
    assert pairs(edited)[:2] == [("Ann", "a"), ("Ben", "b")]
