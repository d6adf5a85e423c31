"""Hostile documents: books (EPUB, TXT, Markdown), scripts and subtitles built to stall or bloat the server, to
smuggle control characters into titles, or markup into the page. Every input is made here; nothing is in git.

What is promised, and checked here:

- Time: every parser is linear. Each pathological construction below (the ones that made the old regexes
  quadratic or cubic: `*a ` × N, `[` × N, `<` × N, spaces after `#`, ...) either reads or is refused with its
  specific code, within the parser's cooperative time budget (`budget.Budget`); no wall-clock is asserted except
  in the end-to-end test, where `/health` must answer within 1 s (p99; on a machine too busy for that, within half
  the slowest read, which a server that waited for the read could not do) while the real server reads the worst
  document of each kind. An expired budget refuses with `document_too_complex` and a clean message.
- Size: the caps (file bytes, characters, lines, chapters, script characters and lines, EPUB members, bytes per
  member and per book) each refuse with their own code and advice.
- Memory: reading any EPUB bomb here costs at most 64 MB of peak extra memory (`MAX_EXTRA_MB`), measured as
  the growth of `ru_maxrss` in a forked child of a fresh interpreter (so libxml2's memory counts too), one child
  per book. A 1 GB member, a member larger than it declares, a bzip2 member (200 MB in 177 bytes; EPUB allows
  only stored and deflated members), 100,000 members and entity bombs are refused before anything big is read
  (about 1-3 MB each); a member listed 8 times is read once (15 MB for its 2 MB of text); five 15 MB members
  stop at the per-book budget (about 50 MB).
- Text: control characters and bidi overrides are removed from titles from every source and in every encoding;
  a binary file is refused by looking at the whole file; nothing a title holds adds a chapter marker; WebVTT cue
  text is escaped; titles and names shown in Markdown are text.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
import unicodedata
import zipfile
from pathlib import Path

import pytest

from cosyvoice_ui.budget import Budget
from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.studio import book as book_module
from cosyvoice_ui.studio import epub as epub_module
from cosyvoice_ui.studio import script as script_module
from cosyvoice_ui.serving import subtitles
from cosyvoice_ui.studio.book import Book, read_book
from cosyvoice_ui.studio.script import parse_script
from tests.reliability.test_hostile_load import answers_beside_the_work
from cosyvoice_ui.serving.subtitles import Cue
from cosyvoice_ui.testing import ebooks

from .corpus import Refusal, check_clean

REPO = Path(__file__).resolve().parents[2]
MAX_EXTRA_MB = 64.0
N = 100_000  # repetitions of each pathological unit: 100-300 KB documents (the old regexes took minutes)
BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
TOO_COMPLEX = Refusal("document_too_complex", ("took longer than", "split it"))


def _is_clean(text: str) -> bool:
    return not any(unicodedata.category(ch) == "Cc" or ch in BIDI for ch in text)


def _read(path: Path, budget: Budget | None = None) -> Book | InvalidRequest:
    try:
        return read_book(path, budget)
    except InvalidRequest as exc:
        check_clean(str(exc), str(path.parent))
        return exc


class _Clock:
    """A clock for budgets: 0 when the budget is made, then `later`."""

    def __init__(self, later: float = 1000.0) -> None:
        self.calls, self.later = 0, later

    def __call__(self) -> float:
        self.calls += 1
        return 0.0 if self.calls == 1 else self.later


def _expired(what: str = "book") -> Budget:
    return Budget(30.0, what, every=1, clock=_Clock())


# --- Markdown: constructions that were quadratic (or worse) --------------------------------------------------

MARKDOWN = {  # id -> (document, words its text must keep, or None when the document has no words to read)
    "emphasis-star": ("*a " * N, "*a *a"),
    "emphasis-underscore": ("_a " * N, "_a _a"),
    "strong-unclosed": ("**a " * N, "**a **a"),
    "strike-unclosed": ("~~a " * N, "~~a ~~a"),
    "mixed-kinds": ("*a _b " * N, "*a _b"),
    "star-dash": ("-*" * N + " end", "end"),
    "intraword-underscores": ("a_" * N + " end", "end"),
    "brackets": ("[" * N, None),
    "image-openers": ("![" * N, None),
    "unclosed-links": ("[a](" * N, "[a]("),
    "bracket-pairs": ("[a]" * N, "[a][a]"),
    "unclosed-images": ("![a](" * N, "![a]("),
    "backticks": ("`" * N, None),
    "backtick-runs": ("`a ``b " * N, "``b"),
    "angle-brackets": ("<" * N, None),
    "tag-openers": ("<a " * N, "<a <a"),
    "backslashes": ("\\" * N + " end", "end"),
    "escapes": ("\\*a " * N, "*a *a"),
    "heading-spaces": ("# a" + " " * N + "b\n\nbody text\n", "body text"),
    "heading-hashes": ("#" * N + " title\n\nbody text\n", "body text"),
    "front-matter-spaces": ("---\ntitle: x" + " " * N + "y\nauthor:" + " " * N + "\n---\nbody text\n", "body text"),
    "list-markers": ("- " * N + "x", "x"),
    "numbered-markers": ("1. " * N + "x", "x"),
    "quote-markers": ("> " * N + "x", "x"),
    "rule-lookalike": ("- " * N + "-x", "x"),
    "table-lookalike": ("| " * N + "x", "x"),
    "table-separator-spaces": (" " * N + ":--" + " " * N + "x", "x"),
    "many-lines": ("*a\n" * N, "*a *a"),
    "many-headings": ("## a\n\n" * (N // 50) + "text", "text"),
}


@pytest.mark.parametrize("name", list(MARKDOWN))
def test_pathological_markdown_reads_within_its_budget(name: str, tmp_path: Path) -> None:
    text, words = MARKDOWN[name]
    path = tmp_path / "book.md"
    path.write_text(text, encoding="utf-8")
    result = _read(path, Budget(book_module.BOOK_SECONDS, "book"))
    if words is None:
        assert isinstance(result, InvalidRequest) and result.code == "empty_book", result
        return
    assert isinstance(result, Book), f"{result.code}: {result}"
    assert words in " ".join(c.text for c in result.chapters)
    assert all(_is_clean(c.title) and len(c.title) <= 201 for c in result.chapters)


def test_markdown_markup_still_reads_as_words() -> None:
    from cosyvoice_ui.studio.markdown import plain_inline

    assert plain_inline("Some *text*, **bold** and __strong__ ~~gone~~ with `co*de*` here.") == \
        "Some text, bold and strong gone with co*de* here."
    assert plain_inline("A [link *with* words](http://x.org/a_(b)) and ![an image](i.png) end.") == \
        "A link with words) and end."
    assert plain_inline("Keep snake_case, 2*3*4, a * b and \\*stars\\* <b>bold</b> <3.") == \
        "Keep snake_case, 234, a * b and *stars* bold <3."


# --- plain text, scripts and subtitles ------------------------------------------------------------------------

TXT = {
    "chapter-trailing-spaces": "Chapter 1" + " " * N + "\n\ntext\n",
    "chapter-leading-spaces": " " * N + "Chapter 1\n\ntext\n",
    "prologue-spaces": "Prologue." + " " * N + "x" * 70 + "\n\ntext\n",
    "number-words": ("chapter " + "-".join(["one"] * 20) + "\n\ntext\n") * (N // 100),
    "cjk-numerals": ("第" + "一" * 60 + "章\n\n文字\n") * (N // 100),
    "blank-lines": "text\n" + "\n \n" * N + "more\n",
    "one-long-line": "word " * N,
}


@pytest.mark.parametrize("name", list(TXT))
def test_pathological_plain_text_reads_within_its_budget(name: str, tmp_path: Path) -> None:
    path = tmp_path / "book.txt"
    path.write_text(TXT[name], encoding="utf-8")
    result = _read(path, Budget(book_module.BOOK_SECONDS, "book"))
    assert isinstance(result, Book), f"{result.code}: {result}"
    assert all(_is_clean(c.title) for c in result.chapters)


SCRIPTS = {
    "spaces-before-colon": "a" + " " * N + "b: words",
    "spaces-after-name": "Alice" + " " * N + ": hello",
    "colons": ":" * N,
    "full-width-colons": "：" * N,
    "brackets": "[" * N,
    "closing-brackets": "[" + "]" * N,
    "labels-on-one-line": "A: " * N,
    "many-speakers": "\n".join(f"Name{n}: line {n}" for n in range(script_module.MAX_SCRIPT_LINES)),
    "long-names": "\n".join("[" + "a" * 40 + "] words" for _ in range(5000)),
}


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_pathological_scripts_parse_within_their_budget(name: str) -> None:
    try:
        lines = parse_script(SCRIPTS[name])
    except InvalidRequest as exc:
        assert exc.code == "script_empty", exc
        check_clean(str(exc))
        return
    assert lines and all(_is_clean(line.speaker + line.text) for line in lines)


def test_a_rewritten_long_script_keeps_its_takes_without_a_quadratic_match(tmp_path: Path) -> None:
    from cosyvoice_ui.studio.project import Project

    old = "\n".join(["Ann: same line"] * 6000 + ["Bob: the end"])
    project = Project.create(tmp_path / "p", "p", old)
    ids = [line.id for line in project.lines]
    # nothing in common at either end: difflib would compare 6,001 x 6,001 equal lines; matched in place instead
    project.set_script("\n".join(["Cid: a new start"] + ["Ann: same line"] * 6000))
    assert len(project.lines) == 6001 and [line.id for line in project.lines[1:6000]] == ids[1:6000]


SUBTITLE_FILES = {
    "digits-before-arrow": "1\n" + "9" * N + " --> " + "9" * N + "\nwords\n",
    "blank-line-runs": "1\n00:00:00,000 --> 00:00:01,000\nwords\n" + "\n \n" * N,
    "vtt-angle-brackets": "WEBVTT\n\n1\n00:00:00.000 --> 00:00:01.000\n" + "<" * N + "words\n",
    "vtt-voice-unclosed": "WEBVTT\n\n1\n00:00:00.000 --> 00:00:01.000\n<v " + "a" * N + "\n",
    "vtt-entities": "WEBVTT\n\n1\n00:00:00.000 --> 00:00:01.000\n" + "&#" * N + "&amp" * N + "\n",
    "many-cues": "".join(f"{n}\n00:00:0{n % 10},000 --> 00:00:0{n % 10},500\nw\n\n" for n in range(N // 10)),
}


@pytest.mark.parametrize("name", list(SUBTITLE_FILES))
def test_pathological_subtitle_files_parse_within_their_budget(name: str) -> None:
    cues = subtitles.parse(SUBTITLE_FILES[name], Budget(subtitles.PARSE_SECONDS, "subtitle file"))
    assert isinstance(cues, list)


# --- budgets and caps -----------------------------------------------------------------------------------------


def test_an_expired_budget_refuses_every_kind_of_document(tmp_path: Path, monkeypatch) -> None:
    md = tmp_path / "a.md"
    md.write_text("# One\n\n" + "Some *text* here.\n\n" * 50, encoding="utf-8")
    txt = tmp_path / "a.txt"
    txt.write_text(ebooks.sample_text(), encoding="utf-8")
    for path in (md, txt, ebooks.write_epub(tmp_path / "a.epub")):
        result = _read(path, _expired())
        assert isinstance(result, InvalidRequest), path.suffix
        TOO_COMPLEX.check(result.code, str(result), str(tmp_path))
    monkeypatch.setattr(script_module, "SCRIPT_SECONDS", -1.0)
    with pytest.raises(InvalidRequest) as caught:
        parse_script("Ann: hello\n" * 300)
    TOO_COMPLEX.check(caught.value.code, str(caught.value))
    with pytest.raises(InvalidRequest) as caught:
        subtitles.parse("1\n00:00:00,000 --> 00:00:01,000\nw\n\n" * 300, _expired("subtitle file"))
    TOO_COMPLEX.check(caught.value.code, str(caught.value))


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as file:
        file.truncate(size)
    return path


def test_size_caps_refuse_with_their_own_codes(tmp_path: Path) -> None:
    cases = {
        "book_too_large": (_sparse(tmp_path / "huge.txt", book_module.MAX_TEXT_FILE_BYTES + 1), ("over", "MB")),
        "book_too_long": (ebooks.write_text_book(tmp_path / "long.txt", "a" * (book_module.MAX_BOOK_CHARS + 1)),
                          ("characters", "split it")),
        "book_too_many_lines": (ebooks.write_text_book(tmp_path / "lines.txt",
                                                       "a\n" * book_module.MAX_BOOK_LINES), ("lines", "paragraphs")),
        "book_too_many_chapters": (ebooks.write_text_book(tmp_path / "chapters.md",
                                                          "# c\n\nx\n\n" * (book_module.MAX_CHAPTERS + 1)),
                                   ("chapters", "split it")),
    }
    for code, (path, words) in cases.items():
        result = _read(path)
        assert isinstance(result, InvalidRequest), code
        Refusal(code, words).check(result.code, str(result), str(tmp_path))
    for code, text in {"script_too_long": "a" * (script_module.MAX_SCRIPT_CHARS + 1),
                       "script_too_many_lines": "a\n" * (script_module.MAX_SCRIPT_LINES + 1)}.items():
        with pytest.raises(InvalidRequest) as caught:
            parse_script(text)
        Refusal(code, ("split it",)).check(caught.value.code, str(caught.value))


def test_every_new_code_has_a_chinese_message() -> None:
    from cosyvoice_ui.ui import strings

    for code in ("document_too_complex", "book_too_large", "book_too_long", "book_too_many_lines",
                 "book_too_many_chapters", "epub_too_many_files", "epub_member_too_large", "epub_too_large",
                 "script_too_long", "script_too_many_lines"):
        assert code in strings.MESSAGES_ZH, code
    error = InvalidRequest("book_too_long", "x", what="book", amount=12_000_001, limit=12_000_000)
    assert strings.message(error, "zh") == "这本书有 12,000,001 个字符，最多只能读取 12,000,000 个；请拆成几本分别上传。"


# --- EPUB bombs -----------------------------------------------------------------------------------------------

BILLION_LAUGHS = ('<!DOCTYPE lolz [<!ENTITY lol1 "lol">' + "".join(
    f'<!ENTITY lol{i} "' + f"&lol{i - 1};" * 10 + '">' for i in range(2, 10)) + "]>")
EXTERNAL = '<!DOCTYPE x [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
ONE_PAGE = [("c1", "c1.xhtml", "application/xhtml+xml")]


def _laughs_in_package(path: Path) -> Path:
    opf = ebooks.package_opf("Title &lol9;", "A", ONE_PAGE, ["c1"], doctype=BILLION_LAUGHS)
    return ebooks.write_handmade_epub(path, opf, {"OEBPS/c1.xhtml": ebooks.xhtml("One", ["words"])})


def _laughs_in_page(path: Path) -> Path:
    page = ebooks.xhtml("One", ["x"], doctype=BILLION_LAUGHS).replace("<p>x</p>", "<p>words &lol9;</p>")
    return ebooks.write_handmade_epub(path, ebooks.package_opf("T", "A", ONE_PAGE, ["c1"]), {"OEBPS/c1.xhtml": page})


def _external_entities(path: Path) -> Path:
    page = ebooks.xhtml("One", ["x"], doctype=EXTERNAL).replace("<p>x</p>", "<p>words &xxe;</p>")
    opf = ebooks.package_opf("Title &xxe;", "A", ONE_PAGE, ["c1"], doctype=EXTERNAL)
    return ebooks.write_handmade_epub(path, opf, {"OEBPS/c1.xhtml": page})


def _declared_smaller(path: Path) -> Path:
    ebooks.simple_epub(path, chapters=(("One", ("word " * 400_000,)),))  # 2 MB unpacked, says 1 KB
    return ebooks.declare_size(path, "OEBPS/c1.xhtml", 1024)


def _bzip2_declared_small(path: Path) -> Path:
    """200 MB of zeros in 177 bytes of bzip2 (which EPUB does not allow), declaring 1 KB: zipfile would unpack
    it all in its first read."""
    ebooks.write_zero_bomb_epub(path, 200 * 2**20, compression=zipfile.ZIP_BZIP2)
    return ebooks.declare_size(path, "OEBPS/bomb.xhtml", 1024)


def _listed_eight_times(path: Path) -> Path:
    items = [(f"c{n}", "c1.xhtml", "application/xhtml+xml") for n in range(8)]
    opf = ebooks.package_opf("Eight", "A", items, [item for item, _, _ in items])
    page = ebooks.xhtml("One", ["word " * 400_000])  # 2 MB: read 8 times, as a read-everything reader does
    return ebooks.write_handmade_epub(path, opf, {"OEBPS/c1.xhtml": page})


def _many_members(path: Path, count: int = 100_000) -> Path:
    """An EPUB of `count` members: its mimetype, then empty pages."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip")
        for n in range(count - 1):
            archive.writestr(f"OEBPS/x{n}.xhtml", b"")
    return path


def _over_the_book_budget(path: Path) -> Path:
    """Five chapter files of 15 MB each (under the per-member cap; 75 MB together, over the per-book one)."""
    padding = " " * (15 * 2**20)
    chapters = {f"OEBPS/c{n}.xhtml": ebooks.xhtml("", [f"part {n}"]).replace("</p>", "</p>" + padding)
                for n in range(1, 6)}
    items = [(f"c{n}", f"c{n}.xhtml", "application/xhtml+xml") for n in range(1, 6)]
    return ebooks.write_handmade_epub(path, ebooks.package_opf("Big", "A", items, [i for i, _, _ in items]),
                                      chapters)


def _deep_nesting(path: Path) -> Path:
    page = "<html><body>" + "<div>" * 200_000 + "deep words" + "</div>" * 200_000 + "</body></html>"
    return ebooks.write_handmade_epub(path, ebooks.package_opf("Deep", "A", ONE_PAGE, ["c1"]), {"OEBPS/c1.xhtml": page})


EPUB_BOMBS = {  # name -> (maker, refusal code or None when the book reads)
    "1-gb-member": (ebooks.write_zero_bomb_epub, "epub_member_too_large"),
    "declared-smaller-than-it-is": (_declared_smaller, "bad_book"),
    "bzip2-200-mb-declared-1-kb": (_bzip2_declared_small, "bad_book"),
    "listed-8-times": (_listed_eight_times, None),
    "100k-members": (_many_members, "epub_too_many_files"),
    "billion-laughs-in-package": (_laughs_in_package, "bad_book"),
    "billion-laughs-in-page": (_laughs_in_page, None),
    "external-entities": (_external_entities, None),
    "over-the-book-budget": (_over_the_book_budget, "epub_too_large"),
    "200k-nested-divs": (_deep_nesting, "empty_book"),  # libxml2 stops at depth 256: no words are left
}

# Each book is read in a child forked from a fresh interpreter that has imported the reader: the child's
# ru_maxrss high-water mark grows only by the reading.
MEASURE = r"""
import json, os, resource, sys
from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.studio.book import read_book
import lxml.etree, lxml.html

def measure(work):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            book = work()
            outcome = ["read", book.title, [c.title for c in book.chapters], sum(len(c.text) for c in book.chapters),
                       " ".join(c.text for c in book.chapters)[:2000]] if book is not None else ["done"]
        except InvalidRequest as exc:
            outcome = [exc.code, str(exc)]
        extra = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        os.write(write, json.dumps([outcome, extra]).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        answer = json.loads(pipe.read())
    os.waitpid(pid, 0)
    return answer

results = {"control: 100 MB touched": measure(lambda: bytearray(100 * 2**20) and None)}
for name, path in json.loads(sys.argv[1]).items():
    results[name] = measure(lambda: read_book(path))
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict[str, tuple[list, float]]:
    folder = tmp_path_factory.mktemp("epub-bombs")
    files = {name: str(make(folder / f"{name}.epub")) for name, (make, _) in EPUB_BOMBS.items()}
    done = subprocess.run([sys.executable, "-c", MEASURE, json.dumps(files)], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    print("\npeak extra memory (MB) while reading:")
    for name, (outcome, extra) in results.items():
        print(f"  {name:32s} {extra:7.1f}  {outcome[0]}")
    return results


def test_the_memory_measure_sees_memory(measured) -> None:
    assert measured["control: 100 MB touched"][1] >= 90


@pytest.mark.parametrize("name", list(EPUB_BOMBS))
def test_epub_bombs_cost_little_memory_and_refuse_clearly(name: str, measured) -> None:
    (outcome, extra), expected = measured[name], EPUB_BOMBS[name][1]
    assert extra <= MAX_EXTRA_MB, f"{name}: {extra:.1f} MB"
    if expected is None:
        assert outcome[0] == "read", outcome
        assert "root:" not in json.dumps(outcome) and "lollol" not in json.dumps(outcome)
        return
    assert outcome[0] == expected, outcome
    check_clean(outcome[1])


def test_a_member_listed_8_times_is_read_once(tmp_path: Path, monkeypatch) -> None:
    path = _listed_eight_times(tmp_path / "eight.epub")
    opened: list[str] = []
    original = zipfile.ZipFile.open

    def counting(self, name, *args, **kwargs):
        opened.append(name if isinstance(name, str) else name.filename)
        return original(self, name, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", counting)
    read = read_book(path)
    assert [c.title for c in read.chapters] == ["One"] and opened.count("OEBPS/c1.xhtml") == 1


def test_epub_limits_are_checked_before_reading(tmp_path: Path, monkeypatch) -> None:
    """The refusals of an oversized member and of too many members come from the declared sizes and counts:
    the member is never opened, and zipfile never builds its list of 10,001 members."""
    bomb = ebooks.write_zero_bomb_epub(tmp_path / "bomb.epub", 64 * 2**20)
    many = _many_members(tmp_path / "many.epub", epub_module.MAX_MEMBERS + 1)
    original = zipfile.ZipFile.open

    def open_unless_the_bomb(self, name, *args, **kwargs):
        assert "bomb" not in str(getattr(name, "filename", name)), "the oversized member was opened"
        return original(self, name, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", open_unless_the_bomb)
    refused = _read(bomb)
    assert isinstance(refused, InvalidRequest)
    Refusal("epub_member_too_large", ("64 MB", "16 MB", "Calibre")).check(refused.code, str(refused))

    def no_directory(*args, **kwargs):
        raise AssertionError("zipfile read the member list")

    monkeypatch.setattr(zipfile, "ZipFile", no_directory)
    refused = _read(many)
    assert isinstance(refused, InvalidRequest)
    Refusal("epub_too_many_files", (f"{epub_module.MAX_MEMBERS + 1:,} files", "Calibre")).check(refused.code,
                                                                                                str(refused))


# --- control characters, NUL and binary files -----------------------------------------------------------------

_NASTY_TITLE = "Chapter 9: The \x1b[31mEnd\u202e\x07\x0b\x85 of \u2066it\u2069"
_CLEAN_TITLE = "Chapter 9: The [31mEnd of it"


def _deep_book(title_line: str) -> str:
    return ebooks.sample_text() + ("Filler words for a long middle.\n\n" * 6000) + title_line + "\n\nThe last words.\n"


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-16-le", "utf-16-be", "gb18030"])
def test_control_characters_deep_in_a_file_are_removed_from_titles(encoding: str, tmp_path: Path) -> None:
    path = tmp_path / "book.txt"
    path.write_bytes(_deep_book(_NASTY_TITLE).encode(encoding))  # "utf-16" writes a BOM, -le/-be do not
    read = read_book(path)
    assert read.chapters[-1].title == _CLEAN_TITLE and read.chapters[-1].paragraphs == ["The last words."]
    assert [c.title for c in read.chapters][:3] == [f"Chapter {n}: {t}" for n, (t, _) in
                                                     enumerate(ebooks.SAMPLE_CHAPTERS, 1)]
    assert all(_is_clean(c.title) and _is_clean(c.text.replace("\n", "")) for c in read.chapters)


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-16-le", "utf-16-be", "gb18030"])
def test_a_nul_deep_in_a_file_is_refused_as_binary(encoding: str, tmp_path: Path) -> None:
    path = tmp_path / "book.md"
    path.write_bytes(_deep_book("# Chapter\x00[CHAPTER]").encode(encoding))
    result = _read(path)
    assert isinstance(result, InvalidRequest)
    Refusal("bad_book", ("not a text book", "binary")).check(result.code, str(result), str(tmp_path))


def test_a_few_stray_nuls_in_a_utf8_file_are_binary_not_utf16(tmp_path: Path) -> None:
    data = bytearray(_deep_book("Chapter 9: End").encode("utf-8"))
    for at in range(1001, 1011, 2):  # five NULs, all on odd offsets, as UTF-16-LE would have them
        data[at] = 0
    path = tmp_path / "book.txt"
    path.write_bytes(bytes(data))
    result = _read(path)
    assert isinstance(result, InvalidRequest) and result.code == "bad_book"


def test_titles_and_names_from_epub_metadata_toc_and_headings_are_cleaned(tmp_path: Path) -> None:
    nasty = ebooks.simple_epub(tmp_path / "a.epub", chapters=(("Head\x1b[2J\u202eing\x07", ("Words\x1b here.",)),),
                               title="Book\u202e\x9b Title", author="Auth\u2066or\x85")
    read = read_book(nasty)
    assert (read.title, read.author) == ("Book Title", "Author")
    assert [c.title for c in read.chapters] == ["Head [2Jing"] and read.chapters[0].text == "Words here."
    from ebooklib import epub

    made = epub.EpubBook()
    made.set_identifier("x")
    made.set_title("T")
    pages = []
    for n, name in enumerate(["Dawn\u202e\x9b", "Du\u2067sk"], start=1):
        page = epub.EpubHtml(title=name, file_name=f"p{n}.xhtml", lang="en")
        page.content = f"<html><body><p>Text of page {n}.</p></body></html>"
        made.add_item(page)
        pages.append(page)
    made.toc = pages
    made.add_item(epub.EpubNcx())
    made.add_item(epub.EpubNav())
    made.spine = pages
    epub.write_epub(str(tmp_path / "toc.epub"), made, {})
    assert [c.title for c in read_book(tmp_path / "toc.epub").chapters] == ["Dawn", "Dusk"]


def test_nothing_a_title_holds_adds_a_chapter_marker(tmp_path: Path) -> None:
    import numpy as np

    from cosyvoice_ui.audio import encode, ensure_ffmpeg
    from cosyvoice_ui.studio.chapters import ffmetadata, read_chapters, write_chaptered

    if not ensure_ffmpeg():
        pytest.skip("ffmpeg/ffprobe are not installed")
    files = []
    for n in range(2):
        files.append(tmp_path / f"{n}.flac")
        files[-1].write_bytes(encode(np.full(24000, 0.01, np.float32), 24000, "flac"))
    injected = "One\x00[CHAPTER]\x00TIMEBASE=1/1000\x00START=100\x00END=200\x00title=Evil\r[CHAPTER]\rSTART=300"
    write_chaptered(files, [injected, "Two\u202e"], tmp_path / "b.m4b", "m4b")
    marks = read_chapters(tmp_path / "b.m4b")
    assert len(marks) == 2 and [m.start for m in marks] == pytest.approx([0.0, 1.0], abs=0.01)
    assert all(_is_clean(m.title) for m in marks) and marks[1].title == "Two"
    assert "\x00" not in ffmetadata(marks, "T\x00itle", "A\x1b")


# --- subtitles: WebVTT escaping -------------------------------------------------------------------------------


def test_vtt_cue_text_and_speakers_are_escaped_and_read_back() -> None:
    cues = [Cue(0, 1, "<v Other>hi</v> <b>bold</b> & more --> on", "A<b>&\n\nB"),
            Cue(1, 2, "first\n\nsecond\n\n\nthird", "")]
    vtt = subtitles.to_vtt(cues)
    body = vtt.split("\n", 2)[2]
    assert "<b>" not in body and "</v>" not in body and body.count("<v ") == 1
    assert "&lt;v Other&gt;hi&lt;/v&gt; &lt;b&gt;bold&lt;/b&gt; &amp; more → on" in vtt
    assert "<v A&lt;b&gt;&amp; B>" in vtt and vtt.count("-->") == 2
    back = subtitles.parse(vtt)
    assert [(c.text, c.speaker) for c in back] == [("<v Other>hi</v> <b>bold</b> & more → on", "A<b>& B"),
                                                   ("first second third", "")]
    srt = subtitles.to_srt(cues)
    assert [c.text for c in subtitles.parse(srt)] == ["A<b>& B: <v Other>hi</v> <b>bold</b> & more → on",
                                                       "first second third"]


# --- the UI: book and project text is shown as text ----------------------------------------------------------

HOSTILE_TITLES = ["<img src=x onerror=alert(1)>", "**bold** _it_", "[link](javascript:alert(1))", "# Big\n\n- item",
                  "$$\\frac{1}{2}$$", "https://evil.example/x @user", "a & b < c > d `code` | e"]


@pytest.mark.parametrize("title", HOSTILE_TITLES)
def test_titles_render_as_text_in_markdown(title: str) -> None:
    import html

    from markdown_it import MarkdownIt

    from cosyvoice_ui.ui.markup import plain
    from cosyvoice_ui.ui.studio.book_tab import chapters_markdown

    rendered = MarkdownIt("commonmark").render(plain(title))
    assert rendered.startswith("<p>") and rendered.endswith("</p>\n") and rendered.count("<") == 2, rendered
    assert html.unescape(rendered[3:-5]) == " ".join(title.split())
    page = chapters_markdown(Book(title, title, [book_module.Chapter(title, "text")]), "en")
    shown = MarkdownIt("commonmark").render(page)
    assert "<img" not in shown and "<strong>" not in shown and "<a " not in shown and "<h1>" not in shown
    assert shown.count("<li>") == 1 and html.unescape(shown).count(" ".join(title.split())) == 3


# --- end to end: /health stays fast while the server reads the worst documents --------------------------------


def _worst_documents(folder: Path) -> dict[str, Path]:
    """The slowest document of each kind this suite can build within the upload cap, each read in seconds."""
    folder.mkdir(parents=True, exist_ok=True)
    chapters = {f"OEBPS/c{n}.xhtml": ebooks.xhtml(f"Part {n}", ["*a _b [c <d " * 400]) for n in range(1, 2001)}
    items = [(f"c{n}", f"c{n}.xhtml", "application/xhtml+xml") for n in range(1, 2001)]
    epub = ebooks.write_handmade_epub(folder / "many-pages.epub",
                                      ebooks.package_opf("Many", "A", items, [i for i, _, _ in items]), chapters)
    return {
        "markdown": ebooks.write_text_book(folder / "emphasis.md", "*a _b [c ![d <e `f " * 150_000),
        "markdown-headings": ebooks.write_text_book(folder / "headings.md", ("# a" + " " * 2000 + "b\n\nx\n") * 400),
        # lines that look like headings until their last character (the heading pattern backtracks over the
        # numeral), and a few real chapters
        "text": ebooks.write_text_book(folder / "lines.txt", (("Chapter " + "I" * 70 + "y\n") * 30 + "Chapter 1\n\n")
                                       * 4000),
        "epub": epub,
        "epub-bomb": ebooks.write_zero_bomb_epub(folder / "bomb.epub", 2**28),
    }


def _inputs(config: dict, fn_index: int, values: dict[int, object]) -> list:
    """An event's input values in its order: `values` by component id, "en" for the hidden language box, else
    each component's value on the page."""
    dependency = next(d for d in config["dependencies"] if d["id"] == fn_index)
    components = {c["id"]: c for c in config["components"]}
    data = []
    for component in dependency["inputs"]:
        props = components.get(component, {}).get("props", {})
        if component in values:
            data.append(values[component])
        elif props.get("value") == "en" and props.get("visible") is False:
            data.append("en")
        else:
            data.append(props.get("value"))
    return data


def _gradio_call(client, url: str, fn_index: int, data: list, trigger: int, timeout_s: float = 120.0) -> dict:
    """Run one of the app's events the way its page does (Gradio's queue: join, then read the event stream)."""
    session = f"hostile-{fn_index}-{time.monotonic_ns()}"
    joined = client.post(url + "gradio_api/queue/join", json={
        "data": data, "fn_index": fn_index, "session_hash": session, "event_data": None, "trigger_id": trigger})
    assert joined.status_code == 200, joined.text
    with client.stream("GET", url + "gradio_api/queue/data", params={"session_hash": session},
                       timeout=timeout_s) as stream:
        for line in stream.iter_lines():
            if line.startswith("data:"):
                message = json.loads(line[5:])
                if message.get("msg") == "process_completed":
                    return message
    raise AssertionError("the event never completed")


@pytest.mark.slow
def test_health_answers_within_a_second_while_the_worst_documents_are_read(tiny_sft: Path, tmp_path: Path) -> None:
    import httpx

    from tests.ui.launch import running_app

    documents = _worst_documents(tmp_path / "docs")
    script = "\n".join(["a" + " " * 3000 + "b: words", ":" * 3000, "[" * 3000, "Ann: " + "*a " * 1000] * 150)
    latencies: list[float] = []
    slowest = 0.0  # the longest hostile read, s
    outcomes: dict[str, str] = {}
    (tmp_path / "app").mkdir()
    with running_app(tiny_sft, tmp_path / "app") as url, httpx.Client(timeout=30) as client:
        config = client.get(url + "config").json()
        components = {c["id"]: c for c in config["components"]}

        def event(classes: str, trigger: str) -> tuple[int, int]:
            for dependency in config["dependencies"]:
                outputs = [components.get(o, {}).get("props", {}).get("elem_classes") or [] for o in
                           dependency["outputs"]]
                if any(classes in c for c in outputs) and dependency["targets"] and \
                        dependency["targets"][0][1] == trigger:
                    return dependency["id"], dependency["targets"][0][0]
            raise AssertionError(f"no {trigger} event shows .{classes}")

        read_fn, file_id = event("book-chapters", "change")
        names_fn, script_box = event("studio-voice-name", "blur")
        stop = threading.Event()

        def poll() -> None:
            with httpx.Client(timeout=10) as poller:
                while not stop.is_set():
                    began = time.monotonic()
                    assert poller.get(url + "health").status_code == 200
                    latencies.append(time.monotonic() - began)
                    time.sleep(0.05)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        try:
            for name, path in documents.items():
                uploaded = client.post(url + "gradio_api/upload",
                                       files={"files": (path.name, path.read_bytes())}).json()[0]
                file_data = {"path": uploaded, "orig_name": path.name, "meta": {"_type": "gradio.FileData"}}
                began = time.monotonic()
                done = _gradio_call(client, url, read_fn, [file_data, "en"], file_id)
                slowest = max(slowest, time.monotonic() - began)
                outcomes[name] = f"{'read' if done.get('success') else 'refused'} in {time.monotonic() - began:.1f} s"
                assert done.get("success") or name == "epub-bomb", (name, done.get("output"))
                text = json.dumps(done)
                assert "Traceback" not in text and ("####" in text or done.get("success") is False), text[:500]
            began = time.monotonic()
            done = _gradio_call(client, url, names_fn, _inputs(config, names_fn, {script_box: script}), script_box)
            outcomes["script"] = f"{'read' if done.get('success') else 'refused'} in {time.monotonic() - began:.1f} s"
            assert done.get("success"), done.get("output")
        finally:
            stop.set()
            poller.join(15)
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    print(f"\n/health: {len(latencies)} polls, median {statistics.median(latencies) * 1000:.0f} ms, "
          f"p99 {p99 * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms; {outcomes}")
    assert len(latencies) >= 20 and answers_beside_the_work(p99, slowest), (p99, slowest)
