"""Reading a book into chapters of plain text: EPUB (spine order, `epub.py`), Markdown (`#`/`##` headings,
`markdown.py`) and plain text ("Chapter 1", "CHAPTER IV", "第三章" headings).

A chapter's `text` is its body as paragraphs separated by blank lines, without its heading (the job speaks the
title on its own). Every failure is an `InvalidRequest` that says what is wrong with the file and what to do.

Uploads are hostile until read: every parser here is linear in its input (line scans, `markdown.plain_inline`'s
delimiter stack, lxml), titles and text are cleaned of control characters (`textclean.py`), and a book is read
within a size budget (file bytes, characters, lines, chapters; EPUB members in `epub.py`) and a time budget
(`budget.Budget`, checked every line, token and chunk), each refusal with its own code and advice.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..budget import Budget, too_large
from ..errors import InvalidRequest
from .epub import EpubArchive, html_parser
from .markdown import front_matter, heading, plain_inline, strip_line_markup
from .textclean import NotText, clean_text, clean_title, collapse_spaces, decode_document

BOOK_EXTENSIONS = (".epub", ".txt", ".md", ".markdown")
MAX_BOOK_BYTES = 200 * 1024 * 1024  # an EPUB with its images; bigger files are refused before reading
MAX_TEXT_FILE_BYTES = 48 * 1024 * 1024  # a text book of MAX_BOOK_CHARS characters in UTF-8 or UTF-16
MAX_BOOK_CHARS = 12_000_000  # War and Peace has 3.2 million; the longest web novels about 10 million
MAX_BOOK_LINES = 1_000_000  # a hard-wrapped book of MAX_BOOK_CHARS has about 200,000 lines
MAX_CHAPTERS = 5_000  # serialised web novels reach 3,000 chapters
BOOK_SECONDS = 60.0  # the time budget of reading one book (a linear read of the largest book takes seconds)
_BLOCK_TAGS = ("p", "div", "h1", "h2", "h3", "h4", "h5", "h6", "li", "blockquote", "pre", "tr", "dt", "dd",
               "section", "article", "figcaption", "table", "ul", "ol", "header", "footer", "aside")
_CJK_NUMERAL = "0-9０-９一二三四五六七八九十百千零〇两"
_NUMBER_WORD = (r"(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|"
                r"sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|"
                r"hundred)")
# Matched only against a stripped line of at most _MAX_HEADING_CHARS: its backtracking is bounded by that.
_TXT_HEADING = re.compile(
    rf"(?:chapter\s+(?:\d+|[IVXLCDM]+\b|{_NUMBER_WORD}(?:[- ]{_NUMBER_WORD})*\b)(?:[.:]|\s|$).*"
    r"|(?:prologue|epilogue)(?:[.:]\s*.{0,60})?"
    rf"|第[{_CJK_NUMERAL}]+[章回节卷].*)", re.IGNORECASE)
_MAX_HEADING_CHARS = 80
# One or more blank lines: starts only at a newline and stops at the next non-space, so each character is
# looked at a bounded number of times (linear).
_BLANK_LINES = re.compile(r"\n\s*\n")


@dataclass(frozen=True)
class Chapter:
    """One chapter: its title and its body text (paragraphs separated by blank lines)."""

    title: str
    text: str

    @property
    def paragraphs(self) -> list[str]:
        return [p for p in (part.strip() for part in self.text.split("\n\n")) if p]


@dataclass(frozen=True)
class Book:
    """A book as the audiobook job reads it."""

    title: str
    author: str = ""
    chapters: list[Chapter] = field(default_factory=list)

    @property
    def characters(self) -> int:
        return sum(len(c.title) + len(c.text) for c in self.chapters)


def read_book(path: str | Path, budget: Budget | None = None) -> Book:
    """The book in `path` (by its extension: .epub, .txt, .md/.markdown), with at least one chapter of text.
    `budget` bounds the time (default `BOOK_SECONDS`)."""
    path = Path(path)
    budget = budget or Budget(BOOK_SECONDS, "book")
    suffix = path.suffix.lower()
    if suffix not in BOOK_EXTENSIONS:
        raise InvalidRequest("unsupported_book", f"cannot read {suffix or 'a file without an extension'!s} as a "
                             "book; use an EPUB (.epub), plain text (.txt) or Markdown (.md) file",
                             extension=suffix)
    if not path.is_file():
        raise InvalidRequest("bad_book", "the book file was not found; upload it again", name=path.name)
    size = path.stat().st_size
    limit = MAX_BOOK_BYTES if suffix == ".epub" else MAX_TEXT_FILE_BYTES
    if size > limit:
        raise InvalidRequest("book_too_large", f"the book file is over {limit // 2**20} MB; split it into parts "
                             "or remove its images", size_mb=-(-size // 2**20), limit_mb=limit // 2**20)
    if suffix == ".epub":
        book = _read_epub(path, budget)
    else:
        try:
            text = decode_document(path.read_bytes())
        except NotText:
            raise InvalidRequest("bad_book", "this file is not a text book (it holds binary data); use an EPUB, "
                                 "plain text or Markdown file") from None
        _check_text_size(text)
        fallback = _title_from_name(path)
        book = _read_markdown(text, fallback, budget) if suffix in (".md", ".markdown") else \
            _read_txt(text, fallback, budget)
    chapters = [c for c in book.chapters if any(ch.isalnum() for ch in c.text)]  # "* * *" alone is no text
    if not chapters:
        raise InvalidRequest("empty_book", "the book has no text to read (only images or empty pages?); "
                             "use a book with text in it", name=path.name)
    if len(chapters) > MAX_CHAPTERS:
        raise too_large("book_too_many_chapters", "book", len(chapters), MAX_CHAPTERS, "chapters",
                        "Split it into several books and upload each.")
    return Book(clean_title(book.title) or _title_from_name(path), clean_title(book.author), chapters)


def _check_text_size(text: str) -> None:
    if len(text) > MAX_BOOK_CHARS:
        raise too_large("book_too_long", "book", len(text), MAX_BOOK_CHARS, "characters",
                        "Split it into several books and upload each.")
    lines = text.count("\n") + 1
    if lines > MAX_BOOK_LINES:
        raise too_large("book_too_many_lines", "book", lines, MAX_BOOK_LINES, "lines",
                        "Join its hard-wrapped lines into paragraphs, or split it into several books.")


# --- EPUB ------------------------------------------------------------------------------------------------


def _read_epub(path: Path, budget: Budget) -> Book:
    import zipfile

    if not zipfile.is_zipfile(path):
        raise InvalidRequest("bad_book", "this .epub file is not an EPUB book (it is not a zip archive); "
                             "export the book again as EPUB", name=path.name)
    with EpubArchive(path, budget) as archive:
        archive.refuse_drm()
        contents = archive.contents()
        titles = contents.toc
        chapters: list[Chapter] = []
        characters = 0
        for name in contents.documents:
            data = archive.read_once(name)
            if data is None:
                continue
            heading_text, paragraphs = html_to_paragraphs(data, budget)
            if not paragraphs:
                continue
            characters += sum(len(p) for p in paragraphs)
            if characters > MAX_BOOK_CHARS:
                raise too_large("book_too_long", "book", characters, MAX_BOOK_CHARS, "characters",
                                "Split it into several books and upload each.")
            listed = titles.get(name, "")
            if not heading_text and not listed and titles and chapters:
                # a file the table of contents does not list, without a heading: the rest of the previous chapter
                # (converters split long chapters into several files)
                previous = chapters.pop()
                chapters.append(Chapter(previous.title, "\n\n".join([previous.text, *paragraphs])))
                continue
            chapters.append(Chapter(heading_text or listed or f"Chapter {len(chapters) + 1}",
                                    "\n\n".join(paragraphs)))
            if len(chapters) > MAX_CHAPTERS:
                raise too_large("book_too_many_chapters", "book", len(chapters), MAX_CHAPTERS, "chapters",
                                "Split it into several books and upload each.")
    return Book(contents.title or _title_from_name(path), contents.author, chapters)


def html_to_paragraphs(content: bytes | str, budget: Budget | None = None) -> tuple[str, list[str]]:
    """(first heading, body paragraphs) of an XHTML page: one paragraph per block element, whitespace collapsed,
    control characters dropped, scripts, styles, images and the page's own first heading left out."""
    from lxml import etree, html

    if isinstance(content, bytes) and not content.strip():
        return "", []
    try:
        root = html.document_fromstring(content, parser=html_parser())
    except (etree.ParserError, etree.XMLSyntaxError, ValueError):
        return "", []
    for element in root.xpath("//script|//style|//head|//rt|//rp"):
        element.drop_tree()
    heading_text = ""
    first = next(iter(root.xpath("//h1|//h2|//h3")), None)
    if first is not None:
        heading_text = clean_title(first.text_content())
        first.drop_tree()
    # text set back into the tree is cleaned first: lxml refuses control characters the HTML parser let in
    for element in root.iter("br"):
        element.tail = " " + clean_text(element.tail or "")
    for element in root.iter(*_BLOCK_TAGS):
        if budget is not None:
            budget.check()
        element.text = "\n\n" + clean_text(element.text or "")
        element.tail = "\n\n" + clean_text(element.tail or "")
    body = root.find("body")
    text = clean_text((body if body is not None else root).text_content())
    return heading_text, [p for p in (_collapse(part) for part in _BLANK_LINES.split(text)) if p]


# --- plain text and Markdown -------------------------------------------------------------------------------


def _read_txt(text: str, fallback_title: str, budget: Budget) -> Book:
    """Chapters start at heading lines ("Chapter 2", "CHAPTER II. The Road", "第二章 …"); before the first one,
    a single short line is the book's title and longer text becomes an opening chapter."""
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        budget.check()
        stripped = line.strip()
        if len(stripped) <= _MAX_HEADING_CHARS and _TXT_HEADING.fullmatch(stripped):
            sections.append((clean_title(stripped), []))
        else:
            sections[-1][1].append(line)
    title = fallback_title
    opening = _paragraphs_of_lines(sections[0][1], budget)
    chapters = []
    if len(sections) > 1 and len(opening) == 1 and len(opening[0]) <= _MAX_HEADING_CHARS:
        title = opening[0]
    elif opening:
        chapters.append(Chapter(title, "\n\n".join(opening)))
    for heading_text, lines in sections[1:]:
        chapters.append(Chapter(heading_text, "\n\n".join(_paragraphs_of_lines(lines, budget))))
    return Book(title, "", chapters)


def _read_markdown(text: str, fallback_title: str, budget: Budget) -> Book:
    """Chapters at `#` headings; when one `#` heading opens the file and `##` headings follow, the `#` is the
    book's title and the `##` are the chapters. Deeper headings stay in the text as paragraphs."""
    text = text.replace("\r\n", "\n")
    title, author, text = front_matter(text)
    title, author = clean_title(title), clean_title(author)
    lines = _without_code_blocks(text.split("\n"))
    headings = []
    for line in lines:
        budget.check()
        headings.append(heading(line))
    levels = [found[0] for found in headings if found]
    chapter_level = 1
    if levels.count(1) == 1 and levels[0] == 1 and 2 in levels:
        chapter_level = 2
    elif 1 not in levels and 2 in levels:
        chapter_level = 2
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line, found in zip(lines, headings):
        if found and found[0] < chapter_level:
            title = title or clean_title(plain_inline(found[1], budget))
        elif found and found[0] == chapter_level:
            sections.append((clean_title(plain_inline(found[1], budget)), []))
        else:
            sections[-1][1].append(found[1] if found else line)
    title = title or fallback_title
    chapters = []
    opening = _markdown_paragraphs(sections[0][1], budget)
    if opening:
        chapters.append(Chapter(title, "\n\n".join(opening)))
    for heading_text, body in sections[1:]:
        chapters.append(Chapter(heading_text or f"Chapter {len(chapters) + 1}",
                                "\n\n".join(_markdown_paragraphs(body, budget))))
    return Book(title, author, chapters)


def _without_code_blocks(lines: list[str]) -> list[str]:
    kept, fenced = [], False
    for line in lines:
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            kept.append("")
        elif not fenced:
            kept.append(line)
    return kept


def _markdown_paragraphs(lines: list[str], budget: Budget) -> list[str]:
    paragraphs = []
    for paragraph in _paragraphs_of_lines((strip_line_markup(line) for line in lines), budget):
        plain = plain_inline(paragraph, budget)
        if plain:
            paragraphs.append(plain)
    return paragraphs


def _paragraphs_of_lines(lines: Iterable[str], budget: Budget | None = None) -> list[str]:
    """Blank-line separated paragraphs; the lines of a hard-wrapped paragraph are joined (CJK without a space)."""
    paragraphs, current = [], []
    for line in itertools.chain(lines, [""]):
        if budget is not None:
            budget.check()
        if line.strip():
            current.append(line.strip())
        elif current:
            parts = [current[0]]
            for before, part in zip(current, current[1:]):
                parts.append(part if _is_wide(before[-1]) or _is_wide(part[0]) else " " + part)
            paragraphs.append(_collapse("".join(parts)))
            current = []
    return paragraphs


def _is_wide(ch: str) -> bool:
    return ord(ch) > 0x2E80


def _collapse(text: str) -> str:
    return collapse_spaces(text)


def _title_from_name(path: Path) -> str:
    return clean_title(re.sub(r"[_-]+", " ", path.stem)) or "Untitled"
