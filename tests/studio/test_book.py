"""Reading books into chapters: EPUB (spine order, headings, TOC titles), plain text and Markdown, and the
clear refusals (unknown extension, not an EPUB, DRM, no text)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.studio.book import html_to_paragraphs, read_book
from cosyvoice_ui.testing import ebooks

EXPECTED_TITLES = [title for title, _ in ebooks.SAMPLE_CHAPTERS]
EXPECTED_PARAGRAPHS = [list(paragraphs) for _, paragraphs in ebooks.SAMPLE_CHAPTERS]


def test_epub_chapters_in_spine_order_with_titles_and_paragraphs(tmp_path: Path) -> None:
    book = read_book(ebooks.write_epub(tmp_path / "journey.epub"))
    assert book.title == ebooks.SAMPLE_TITLE and book.author == ebooks.SAMPLE_AUTHOR
    # the text-less cover page and the navigation document are not chapters
    assert [c.title for c in book.chapters] == EXPECTED_TITLES
    # inline markup (<em>) and <br/> are read as plain words; the <h1> is the title, not the text
    assert [c.paragraphs for c in book.chapters] == EXPECTED_PARAGRAPHS


def test_epub_without_headings_takes_titles_from_the_table_of_contents(tmp_path: Path) -> None:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("x")
    book.set_title("No Headings")
    book.set_language("en")
    pages = []
    for n, name in enumerate(["Dawn", "Dusk"], start=1):
        page = epub.EpubHtml(title=name, file_name=f"p{n}.xhtml", lang="en")
        page.content = f"<html><body><p>Text of page {n}.</p></body></html>"
        book.add_item(page)
        pages.append(page)
    book.toc = pages
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = pages
    epub.write_epub(str(tmp_path / "plain.epub"), book, {})
    read = read_book(tmp_path / "plain.epub")
    assert [(c.title, c.text) for c in read.chapters] == [("Dawn", "Text of page 1."), ("Dusk", "Text of page 2.")]


def test_an_unlisted_file_without_a_heading_continues_the_previous_chapter(tmp_path: Path) -> None:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("y")
    book.set_title("Split")
    book.set_language("en")
    first = epub.EpubHtml(title="Only", file_name="a.xhtml", lang="en")
    first.content = "<html><body><h1>Only</h1><p>Start.</p></body></html>"
    rest = epub.EpubHtml(title="", file_name="a_split.xhtml", lang="en")
    rest.content = "<html><body><p>Continued.</p></body></html>"
    for page in (first, rest):
        book.add_item(page)
    book.toc = [first]
    book.add_item(epub.EpubNcx())
    book.spine = [first, rest]
    epub.write_epub(str(tmp_path / "split.epub"), book, {})
    read = read_book(tmp_path / "split.epub")
    assert [(c.title, c.paragraphs) for c in read.chapters] == [("Only", ["Start.", "Continued."])]


def test_html_to_paragraphs_drops_scripts_and_keeps_blocks_apart() -> None:
    heading, paragraphs = html_to_paragraphs(
        b"<html><head><title>t</title><style>p{}</style></head><body><script>var x=1;</script>"
        b"<h2>Part One</h2><div><p>First   line.</p><p>Second<br/>line.</p></div><ul><li>item</li></ul></body></html>")
    assert heading == "Part One"
    assert paragraphs == ["First line.", "Second line.", "item"]


def test_plain_text_chapters_at_headings_with_a_title_line(tmp_path: Path) -> None:
    book = read_book(ebooks.write_text_book(tmp_path / "journey.txt", ebooks.sample_text()))
    assert book.title == ebooks.SAMPLE_TITLE
    assert [c.title for c in book.chapters] == [f"Chapter {n}: {t}" for n, t in enumerate(EXPECTED_TITLES, 1)]
    # hard-wrapped lines are joined back into their paragraphs
    assert [c.paragraphs for c in book.chapters] == EXPECTED_PARAGRAPHS


def test_plain_text_without_headings_is_one_chapter_named_after_the_file(tmp_path: Path) -> None:
    path = ebooks.write_text_book(tmp_path / "the_old_mill.txt", "The mill stood by the river.\n\nIt was old.\n")
    book = read_book(path)
    assert book.title == "the old mill"
    assert [(c.title, c.paragraphs) for c in book.chapters] == [
        ("the old mill", ["The mill stood by the river.", "It was old."])]


def test_prose_that_starts_with_the_word_chapter_is_not_a_heading(tmp_path: Path) -> None:
    text = "Chapter 1\n\nChapter and verse were quoted.\n\nCHAPTER II. The Road\n\nOn we went.\n"
    book = read_book(ebooks.write_text_book(tmp_path / "b.txt", text))
    assert [c.title for c in book.chapters] == ["Chapter 1", "CHAPTER II. The Road"]
    assert book.chapters[0].paragraphs == ["Chapter and verse were quoted."]


def test_chinese_text_in_gb18030_with_numbered_chapters(tmp_path: Path) -> None:
    text = "第一章 出发\n\n他早上出门，\n走了很远。\n\n第二章 归来\n\n晚上他回家了。\n"
    path = tmp_path / "书.txt"
    path.write_bytes(text.encode("gb18030"))
    book = read_book(path)
    assert [c.title for c in book.chapters] == ["第一章 出发", "第二章 归来"]
    assert book.chapters[0].paragraphs == ["他早上出门，走了很远。"]  # CJK lines join without a space


def test_markdown_title_heading_with_chapter_subheadings(tmp_path: Path) -> None:
    book = read_book(ebooks.write_text_book(tmp_path / "journey.md", ebooks.sample_markdown()))
    assert book.title == ebooks.SAMPLE_TITLE and book.author == ebooks.SAMPLE_AUTHOR
    assert [c.title for c in book.chapters] == EXPECTED_TITLES
    # emphasis and link markup are gone, link text stays
    assert [c.paragraphs for c in book.chapters] == EXPECTED_PARAGRAPHS


def test_markdown_top_level_headings_are_chapters_and_markup_is_stripped(tmp_path: Path) -> None:
    text = ("# One\n\nSome *text* with `code`.\n\n```\nprint('skipped')\n```\n\n> A quote.\n\n"
            "# Two\n\n- first item\n- second item\n\n### A subsection\n\n---\n\n![img](a.png)Last words.\n")
    book = read_book(ebooks.write_text_book(tmp_path / "notes.markdown", text))
    assert book.title == "notes"
    assert [c.title for c in book.chapters] == ["One", "Two"]
    assert book.chapters[0].paragraphs == ["Some text with code.", "A quote."]
    assert book.chapters[1].paragraphs == ["first item second item", "A subsection", "Last words."]


def test_font_obfuscation_is_not_drm(tmp_path: Path) -> None:
    book = read_book(ebooks.write_font_obfuscated_epub(tmp_path / "fonts.epub"))
    assert [c.title for c in book.chapters] == EXPECTED_TITLES


def _code(path: Path) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        read_book(path)
    message = str(caught.value)
    assert str(path.parent) not in message and "Traceback" not in message
    return caught.value


def test_drm_protected_epub_is_refused_clearly(tmp_path: Path) -> None:
    error = _code(ebooks.write_drm_epub(tmp_path / "locked.epub"))
    assert error.code == "drm_book" and "DRM" in str(error) and "DRM-free" in str(error)


def test_unknown_extension_names_the_formats(tmp_path: Path) -> None:
    path = tmp_path / "book.pdf"
    path.write_bytes(b"%PDF-1.7")
    error = _code(path)
    assert error.code == "unsupported_book"
    assert all(ext in str(error) for ext in (".epub", ".txt", ".md"))


def test_a_file_named_epub_that_is_not_one(tmp_path: Path) -> None:
    path = tmp_path / "fake.epub"
    path.write_text("just some text", encoding="utf-8")
    assert _code(path).code == "bad_book"


def test_a_damaged_epub_zip(tmp_path: Path) -> None:
    path = tmp_path / "broken.epub"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip")
        archive.writestr("META-INF/container.xml", "<container><rootfiles>")
    assert _code(path).code == "bad_book"


def test_books_without_text_are_refused(tmp_path: Path) -> None:
    assert _code(ebooks.write_epub(tmp_path / "images.epub", chapters=())).code == "empty_book"
    assert _code(ebooks.write_text_book(tmp_path / "blank.txt", "\n\n   \n")).code == "empty_book"
    assert _code(ebooks.write_text_book(tmp_path / "rules.md", "# Title\n\n---\n\n* * *\n")).code == "empty_book"


def test_binary_data_in_a_text_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "data.txt"
    path.write_bytes(b"PK\x03\x04\x00\x00binary")
    assert _code(path).code == "bad_book"


def test_a_missing_file(tmp_path: Path) -> None:
    assert _code(tmp_path / "gone.epub").code == "bad_book"
