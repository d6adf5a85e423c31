"""Reading a book into chapters of plain text: EPUB (ebooklib, spine order), Markdown (`#`/`##` headings) and
plain text ("Chapter 1", "CHAPTER IV", "第三章" headings).

A chapter's `text` is its body as paragraphs separated by blank lines, without its heading (the job speaks the
title on its own). Every failure is an `InvalidRequest` that says what is wrong with the file and what to do.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InvalidRequest

BOOK_EXTENSIONS = (".epub", ".txt", ".md", ".markdown")
MAX_BOOK_BYTES = 200 * 1024 * 1024  # a text book is far smaller; bigger files are refused before reading

# EPUB's font obfuscation (IDPF and Adobe) also lists files in META-INF/encryption.xml; that is not DRM.
_FONT_OBFUSCATION = ("http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC")
_BLOCK_TAGS = ("p", "div", "h1", "h2", "h3", "h4", "h5", "h6", "li", "blockquote", "pre", "tr", "dt", "dd",
               "section", "article", "figcaption", "table", "ul", "ol", "header", "footer", "aside")
_HEADING_TAGS = ("h1", "h2", "h3")
_CJK_NUMERAL = "0-9０-９一二三四五六七八九十百千零〇两"
_NUMBER_WORD = (r"(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|"
                r"sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|"
                r"hundred)")
_TXT_HEADING = re.compile(
    rf"^\s*(?:chapter\s+(?:\d+|[IVXLCDM]+\b|{_NUMBER_WORD}(?:[- ]{_NUMBER_WORD})*\b)(?:[.:]|\s|$).*"
    r"|(?:prologue|epilogue)(?:[.:]\s*.{0,60})?"
    rf"|第[{_CJK_NUMERAL}]+[章回节卷].*)\s*$", re.IGNORECASE)
_MAX_HEADING_CHARS = 80


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


def read_book(path: str | Path) -> Book:
    """The book in `path` (by its extension: .epub, .txt, .md/.markdown), with at least one chapter of text."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in BOOK_EXTENSIONS:
        raise InvalidRequest("unsupported_book", f"cannot read {suffix or 'a file without an extension'!s} as a "
                             "book; use an EPUB (.epub), plain text (.txt) or Markdown (.md) file",
                             extension=suffix)
    if not path.is_file():
        raise InvalidRequest("bad_book", "the book file was not found; upload it again", name=path.name)
    if path.stat().st_size > MAX_BOOK_BYTES:
        raise InvalidRequest("bad_book", f"the book file is over {MAX_BOOK_BYTES // 2**20} MB; split it or "
                             "remove its images", name=path.name)
    if suffix == ".epub":
        book = _read_epub(path)
    else:
        text = _decode_text(path.read_bytes())
        fallback = _title_from_name(path)
        book = _read_markdown(text, fallback) if suffix in (".md", ".markdown") else _read_txt(text, fallback)
    chapters = [c for c in book.chapters if any(ch.isalnum() for ch in c.text)]  # "* * *" alone is no text
    if not chapters:
        raise InvalidRequest("empty_book", "the book has no text to read (only images or empty pages?); "
                             "use a book with text in it", name=path.name)
    return Book(book.title, book.author, chapters)


# --- EPUB ------------------------------------------------------------------------------------------------


def _read_epub(path: Path) -> Book:
    if not zipfile.is_zipfile(path):
        raise InvalidRequest("bad_book", "this .epub file is not an EPUB book (it is not a zip archive); "
                             "export the book again as EPUB", name=path.name)
    _refuse_drm(path)
    import warnings

    import ebooklib
    from ebooklib import epub

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ebooklib warns about its own future defaults
            document = epub.read_epub(str(path), {"ignore_ncx": True})
    except Exception:  # ebooklib raises many kinds (KeyError, lxml errors, EpubException) for broken books
        raise InvalidRequest("bad_book", "this EPUB book is damaged or incomplete (its package file could not be "
                             "read); export it again or convert it with Calibre", name=path.name) from None
    titles = _toc_titles(document)
    chapters = []
    for idref, linear in document.spine:
        item = document.get_item_with_id(idref)
        if item is None or item.get_type() != ebooklib.ITEM_DOCUMENT or str(linear).lower() == "no":
            continue
        if isinstance(item, epub.EpubNav):
            continue
        heading, paragraphs = html_to_paragraphs(item.get_content())
        if not paragraphs:
            continue
        listed = titles.get(item.get_name().split("#")[0], "")
        if not heading and not listed and titles and chapters:
            # a file the table of contents does not list, without a heading: the rest of the previous chapter
            # (converters split long chapters into several files)
            previous = chapters.pop()
            chapters.append(Chapter(previous.title, "\n\n".join([previous.text, *paragraphs])))
            continue
        chapters.append(Chapter(heading or listed or f"Chapter {len(chapters) + 1}", "\n\n".join(paragraphs)))
    title = _metadata(document, "title") or _title_from_name(path)
    return Book(title, _metadata(document, "creator"), chapters)


def _refuse_drm(path: Path) -> None:
    """A book whose content files are encrypted (Adobe ADEPT, Apple FairPlay, ...) cannot be read."""
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
        if "META-INF/rights.xml" in names:
            raise _drm_error(path)
        if "META-INF/encryption.xml" not in names:
            return
        from lxml import etree

        try:
            root = etree.fromstring(archive.read("META-INF/encryption.xml"))
        except etree.XMLSyntaxError:
            raise _drm_error(path) from None
    for data in root.iter("{*}EncryptedData"):
        method = next(data.iter("{*}EncryptionMethod"), None)
        algorithm = method.get("Algorithm", "") if method is not None else ""
        if algorithm not in _FONT_OBFUSCATION:
            raise _drm_error(path)


def _drm_error(path: Path) -> InvalidRequest:
    return InvalidRequest("drm_book", "this EPUB book is DRM-protected (its text is encrypted), so it cannot be "
                          "read aloud; use a DRM-free copy of the book", name=path.name)


def _toc_titles(document) -> dict[str, str]:
    """File name → title from the book's table of contents (for chapters without a heading)."""
    from ebooklib import epub

    titles: dict[str, str] = {}

    def walk(entries) -> None:
        for entry in entries:
            if isinstance(entry, tuple) and len(entry) == 2:
                walk([entry[0]])
                walk(entry[1])
            elif isinstance(entry, (epub.Link, epub.Section)) and getattr(entry, "href", None):
                titles.setdefault(entry.href.split("#")[0], (entry.title or "").strip())

    walk(document.toc or [])
    return titles


def _metadata(document, name: str) -> str:
    values = document.get_metadata("DC", name)
    return " & ".join(str(value).strip() for value, _ in values if str(value).strip()) if values else ""


def html_to_paragraphs(content: bytes | str) -> tuple[str, list[str]]:
    """(first heading, body paragraphs) of an XHTML page: one paragraph per block element, whitespace collapsed,
    scripts, styles, images and the page's own first heading left out."""
    from lxml import etree, html

    if isinstance(content, bytes) and not content.strip():
        return "", []
    try:
        root = html.document_fromstring(content)
    except (etree.ParserError, ValueError):
        return "", []
    for element in root.xpath("//script|//style|//head|//rt|//rp"):
        element.drop_tree()
    heading = ""
    first = next(iter(root.xpath("//h1|//h2|//h3")), None)
    if first is not None:
        heading = _collapse(first.text_content())
        first.drop_tree()
    for element in root.iter("br"):
        element.tail = " " + (element.tail or "")
    for element in root.iter(*_BLOCK_TAGS):
        element.text = "\n\n" + (element.text or "")
        element.tail = "\n\n" + (element.tail or "")
    body = root.find("body")
    text = (body if body is not None else root).text_content()
    return heading, [p for p in (_collapse(part) for part in re.split(r"\n\s*\n", text)) if p]


# --- plain text and Markdown -------------------------------------------------------------------------------


def _decode_text(data: bytes) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16")
    if b"\x00" in data[:4096]:
        raise InvalidRequest("bad_book", "this file is not a text book (it holds binary data); use an EPUB, "
                             "plain text or Markdown file")
    for encoding in ("utf-8-sig", "gb18030"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    return data.decode("cp1252", errors="replace")


def _read_txt(text: str, fallback_title: str) -> Book:
    """Chapters start at heading lines ("Chapter 2", "CHAPTER II. The Road", "第二章 …"); before the first one,
    a single short line is the book's title and longer text becomes an opening chapter."""
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if len(line.strip()) <= _MAX_HEADING_CHARS and _TXT_HEADING.match(line):
            sections.append((_collapse(line), []))
        else:
            sections[-1][1].append(line)
    title = fallback_title
    opening = _paragraphs_of_lines(sections[0][1])
    chapters = []
    if len(sections) > 1 and len(opening) == 1 and len(opening[0]) <= _MAX_HEADING_CHARS:
        title = opening[0]
    elif opening:
        chapters.append(Chapter(title, "\n\n".join(opening)))
    for heading, lines in sections[1:]:
        chapters.append(Chapter(heading, "\n\n".join(_paragraphs_of_lines(lines))))
    return Book(title, "", chapters)


_MD_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _read_markdown(text: str, fallback_title: str) -> Book:
    """Chapters at `#` headings; when one `#` heading opens the file and `##` headings follow, the `#` is the
    book's title and the `##` are the chapters. Deeper headings stay in the text as paragraphs."""
    text = text.replace("\r\n", "\n")
    title, author, text = _front_matter(text)
    lines = _without_code_blocks(text.split("\n"))
    levels = [len(m.group(1)) for m in map(_MD_HEADING.match, lines) if m]
    chapter_level = 1
    if levels.count(1) == 1 and levels[0] == 1 and 2 in levels:
        chapter_level = 2
    elif 1 not in levels and 2 in levels:
        chapter_level = 2
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line in lines:
        match = _MD_HEADING.match(line)
        if match and len(match.group(1)) < chapter_level:
            title = title or _plain_markdown(match.group(2))
        elif match and len(match.group(1)) == chapter_level:
            sections.append((_plain_markdown(match.group(2)), []))
        else:
            sections[-1][1].append(match.group(2) if match else line)
    title = title or fallback_title
    chapters = []
    opening = _markdown_paragraphs(sections[0][1])
    if opening:
        chapters.append(Chapter(title, "\n\n".join(opening)))
    for heading, body in sections[1:]:
        chapters.append(Chapter(heading or f"Chapter {len(chapters) + 1}", "\n\n".join(_markdown_paragraphs(body))))
    return Book(title, author, chapters)


def _front_matter(text: str) -> tuple[str, str, str]:
    """YAML-style front matter's `title:` and `author:` (the rest of it is dropped)."""
    match = re.match(r"---\n(.*?)\n---\n", text, re.S)
    if not match:
        return "", "", text
    fields = dict(re.findall(r"^(\w+):\s*(.*?)\s*$", match.group(1), re.M))
    clean = {k.lower(): v.strip("\"'") for k, v in fields.items()}
    return clean.get("title", ""), clean.get("author", ""), text[match.end():]


def _without_code_blocks(lines: list[str]) -> list[str]:
    kept, fenced = [], False
    for line in lines:
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            kept.append("")
        elif not fenced:
            kept.append(line)
    return kept


def _markdown_paragraphs(lines: list[str]) -> list[str]:
    paragraphs = []
    for paragraph in _paragraphs_of_lines([_strip_line_markup(line) for line in lines]):
        plain = _plain_markdown(paragraph)
        if plain:
            paragraphs.append(plain)
    return paragraphs


def _strip_line_markup(line: str) -> str:
    if re.match(r"^\s*([-*_])(\s*\1){2,}\s*$", line) or re.match(r"^\s*\|?[\s:-]+\|[\s|:-]*$", line):
        return ""  # a horizontal rule, or a table's separator row
    line = re.sub(r"^\s{0,3}>\s?", "", line)  # block quote
    return re.sub(r"^\s*(?:[-*+]|\d+[.)])\s+", "", line)  # list item marker


def _plain_markdown(text: str) -> str:
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", text)  # images
    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", text)  # links keep their words
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = re.sub(r"`([^`]*)`", r"\1", text)
    text = re.sub(r"(\*\*|__|\*|_|~~)(?=\S)(.+?)(?<=\S)\1", r"\2", text)
    return _collapse(text.replace("|", " "))


def _paragraphs_of_lines(lines: list[str]) -> list[str]:
    """Blank-line separated paragraphs; the lines of a hard-wrapped paragraph are joined (CJK without a space)."""
    paragraphs, current = [], []
    for line in [*lines, ""]:
        if line.strip():
            current.append(line.strip())
        elif current:
            joined = current[0]
            for part in current[1:]:
                joined += part if _is_wide(joined[-1]) or _is_wide(part[0]) else " " + part
            paragraphs.append(_collapse(joined))
            current = []
    return paragraphs


def _is_wide(ch: str) -> bool:
    return ord(ch) > 0x2E80


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _title_from_name(path: Path) -> str:
    return _collapse(re.sub(r"[_-]+", " ", path.stem)) or "Untitled"
