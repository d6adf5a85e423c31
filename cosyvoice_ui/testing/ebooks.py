"""Small books for the audiobook tests: a real EPUB 3 (written with ebooklib, with a nav and an NCX), one with
DRM (an `encryption.xml` that encrypts its text), and the same chapters as plain text and Markdown."""

from __future__ import annotations

import zipfile
from html import escape
from pathlib import Path

# Three short chapters: (title, paragraphs). The second has a long paragraph (split at sentences by the job).
SAMPLE_CHAPTERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("The Harbour", ("The boat came in at dawn.", "Nobody was waiting on the pier.")),
    ("The Road", (("She walked all day. The road was long and dusty. Birds sang in the hedges. A cart passed her "
                   "twice. By evening her shoes were grey with dust, and the town was still far away."),
                  "At night she slept in a barn.")),
    ("The Town", ("The town had one street.", "She found the house at the end of it.", "The door was open.")),
)
SAMPLE_TITLE = "A Short Journey"
SAMPLE_AUTHOR = "Test Author"


def write_epub(path: Path, chapters=SAMPLE_CHAPTERS, title: str = SAMPLE_TITLE, author: str = SAMPLE_AUTHOR,
               cover_page: bool = True, language: str = "en") -> Path:
    """An EPUB with a text-less cover page first (skipped by the reader), then one XHTML file per chapter with an
    `<h1>` heading and `<p>` paragraphs (one with inline markup and a line break)."""
    import warnings

    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("test-book-0001")
    book.set_title(title)
    book.set_language(language)
    if author:
        book.add_author(author)
    pages = []
    if cover_page:
        cover = epub.EpubHtml(title="Cover", file_name="cover.xhtml", lang=language)
        cover.content = "<html><body><div><img src='cover.png' alt=''/></div></body></html>"
        book.add_item(cover)
        pages.append(cover)
    for number, (heading, paragraphs) in enumerate(chapters, start=1):
        page = epub.EpubHtml(title=heading, file_name=f"chapter{number}.xhtml", lang=language)
        body = "".join(f"<p>{_inline(p)}</p>" for p in paragraphs)
        page.content = f"<html><head><style>p {{margin: 0}}</style></head><body><h1>{escape(heading)}</h1>{body}" \
                       "</body></html>"
        book.add_item(page)
        pages.append(page)
    book.toc = [p for p in pages if p.title != "Cover"]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *pages]
    path = Path(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        epub.write_epub(str(path), book, {})
    return path


def write_drm_epub(path: Path) -> Path:
    """The sample EPUB with a META-INF/encryption.xml that lists its chapters as AES-encrypted (as Adobe ADEPT
    books do); the files themselves are left readable, the reader must refuse by the manifest alone."""
    path = write_epub(Path(path))
    entries = "".join(
        "<enc:EncryptedData><enc:EncryptionMethod Algorithm='http://www.w3.org/2001/04/xmlenc#aes128-cbc'/>"
        f"<enc:CipherData><enc:CipherReference URI='EPUB/chapter{n}.xhtml'/></enc:CipherData></enc:EncryptedData>"
        for n in range(1, len(SAMPLE_CHAPTERS) + 1))
    xml = ("<?xml version='1.0'?><encryption xmlns='urn:oasis:names:tc:opendocument:xmlns:container' "
           f"xmlns:enc='http://www.w3.org/2001/04/xmlenc#'>{entries}</encryption>")
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("META-INF/encryption.xml", xml)
    return path


def write_font_obfuscated_epub(path: Path) -> Path:
    """The sample EPUB with an encryption.xml that only obfuscates a font (IDPF): not DRM, still readable."""
    path = write_epub(Path(path))
    xml = ("<?xml version='1.0'?><encryption xmlns='urn:oasis:names:tc:opendocument:xmlns:container' "
           "xmlns:enc='http://www.w3.org/2001/04/xmlenc#'><enc:EncryptedData>"
           "<enc:EncryptionMethod Algorithm='http://www.idpf.org/2008/embedding'/>"
           "<enc:CipherData><enc:CipherReference URI='EPUB/fonts/serif.otf'/></enc:CipherData>"
           "</enc:EncryptedData></encryption>")
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("META-INF/encryption.xml", xml)
    return path


def sample_text(chapters=SAMPLE_CHAPTERS, title: str = SAMPLE_TITLE) -> str:
    """The chapters as a plain-text book: a title line, then "Chapter N: Title" headings, paragraphs hard-wrapped."""
    parts = [title, ""]
    for number, (heading, paragraphs) in enumerate(chapters, start=1):
        parts += [f"Chapter {number}: {heading}", ""]
        for paragraph in paragraphs:
            parts += [*_wrap(paragraph, 40), ""]
    return "\n".join(parts)


def sample_markdown(chapters=SAMPLE_CHAPTERS, title: str = SAMPLE_TITLE, author: str = SAMPLE_AUTHOR) -> str:
    """The chapters as Markdown: front matter, a `#` title, `##` chapters, with emphasis, a link and a list."""
    parts = ["---", f"title: {title}", f"author: {author}", "---", "", f"# {title}", ""]
    for heading, paragraphs in chapters:
        parts += [f"## {heading}", ""]
        for paragraph in paragraphs:
            words = paragraph.split(" ")
            if len(words) > 3:
                words[1] = f"**{words[1]}**"
                words[2] = f"[{words[2]}](https://example.org)"
            parts += [" ".join(words), ""]
    return "\n".join(parts)


def write_text_book(path: Path, text: str) -> Path:
    path = Path(path)
    path.write_text(text, encoding="utf-8")
    return path


def _inline(paragraph: str) -> str:
    words = [escape(w) for w in paragraph.split(" ")]
    if len(words) > 4:
        words[1] = f"<em>{words[1]}</em>"
        words[3] = f"{words[3]}<br/>"
    return " ".join(words)


def _wrap(text: str, width: int) -> list[str]:
    lines, current = [], ""
    for word in text.split():
        if current and len(current) + 1 + len(word) > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}".strip()
    return [*lines, current] if current else lines


# --- hand-made EPUBs (zipfile only), for the hostile-document tests ---------------------------------------------

CONTAINER_XML = ("<?xml version='1.0'?><container version='1.0' "
                 "xmlns='urn:oasis:names:tc:opendocument:xmlns:container'><rootfiles>"
                 "<rootfile full-path='OEBPS/content.opf' media-type='application/oebps-package+xml'/>"
                 "</rootfiles></container>")


def xhtml(heading: str, paragraphs=(), doctype: str = "") -> str:
    """One XHTML page: an optional `<h1>` and `<p>` paragraphs (escaped), after an optional DOCTYPE."""
    head = f"<h1>{escape(heading)}</h1>" if heading else ""
    body = "".join(f"<p>{escape(p)}</p>" for p in paragraphs)
    return (f"<?xml version='1.0' encoding='utf-8'?>{doctype}<html xmlns='http://www.w3.org/1999/xhtml'>"
            f"<head><title>t</title></head><body>{head}{body}</body></html>")


def package_opf(title: str, author: str, items: list[tuple[str, str, str]], spine: list[str],
                doctype: str = "", toc: str = "") -> str:
    """An OPF package file: `items` are (id, href, media type), `spine` the idrefs in reading order."""
    manifest = "".join(f"<item id='{i}' href='{h}' media-type='{m}'/>" for i, h, m in items)
    refs = "".join(f"<itemref idref='{ref}'/>" for ref in spine)
    toc_attr = f" toc='{toc}'" if toc else ""
    return (f"<?xml version='1.0' encoding='utf-8'?>{doctype}<package xmlns='http://www.idpf.org/2007/opf' "
            "version='3.0' unique-identifier='id'><metadata xmlns:dc='http://purl.org/dc/elements/1.1/'>"
            f"<dc:identifier id='id'>x</dc:identifier><dc:title>{title}</dc:title><dc:creator>{author}</dc:creator>"
            f"<dc:language>en</dc:language></metadata><manifest>{manifest}</manifest><spine{toc_attr}>{refs}</spine>"
            "</package>")


def write_handmade_epub(path: Path, opf: str, members: dict[str, bytes | str],
                        container: str = CONTAINER_XML) -> Path:
    """An EPUB written member by member: `mimetype` (stored), `META-INF/container.xml`, `OEBPS/content.opf`,
    then `members` (name -> content), deflated."""
    path = Path(path)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        archive.writestr("META-INF/container.xml", container)
        archive.writestr("OEBPS/content.opf", opf)
        for name, content in members.items():
            archive.writestr(name, content)
    return path


def simple_epub(path: Path, chapters=(("One", ("Some words.",)),), title: str = "Hand Made", author: str = "Someone",
                extra: dict[str, bytes | str] | None = None) -> Path:
    """A hand-made EPUB with one XHTML file per chapter in its spine (and `extra` members, not in the spine)."""
    items = [(f"c{n}", f"c{n}.xhtml", "application/xhtml+xml") for n in range(1, len(chapters) + 1)]
    members = {f"OEBPS/c{n}.xhtml": xhtml(h, ps) for n, (h, ps) in enumerate(chapters, start=1)}
    opf = package_opf(title, author, items, [i for i, _, _ in items])
    return write_handmade_epub(path, opf, {**members, **(extra or {})})


def write_zero_bomb_epub(path: Path, member_bytes: int = 2**30, chunk: int = 2**20,
                         compression: int = zipfile.ZIP_DEFLATED) -> Path:
    """An EPUB whose one chapter file unpacks to `member_bytes` of zeros (deflated: about 1 MB on disk for 1 GB;
    bzip2: a few hundred bytes), written from a generator so the writer never holds more than `chunk` bytes."""
    path = Path(path)
    opf = package_opf("Bomb", "Nobody", [("c1", "bomb.xhtml", "application/xhtml+xml")], ["c1"])
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        archive.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        archive.writestr("META-INF/container.xml", CONTAINER_XML)
        archive.writestr("OEBPS/content.opf", opf)
        zeros = bytes(chunk)
        info = zipfile.ZipInfo("OEBPS/bomb.xhtml")
        info.compress_type = compression  # a ZipInfo opened for writing is stored unless told
        with archive.open(info, "w", force_zip64=True) as member:
            for _ in range(member_bytes // chunk):
                member.write(zeros)
    return path


def declare_size(path: Path, member: str, declared: int) -> Path:
    """Patch the uncompressed size `member` declares (its local header and its central directory entry) to
    `declared`, leaving its data as it is: a member that is larger in fact than it says."""
    data = bytearray(Path(path).read_bytes())
    name = member.encode()
    # (signature, offset of the uncompressed size, of the name's length, of the name): local header, directory
    for signature, size_at, length_at, name_at in ((b"PK\x03\x04", 22, 26, 30), (b"PK\x01\x02", 24, 28, 46)):
        at = data.find(signature)
        while at >= 0:
            length = int.from_bytes(data[at + length_at:at + length_at + 2], "little")
            if bytes(data[at + name_at:at + name_at + length]) == name:
                data[at + size_at:at + size_at + 4] = declared.to_bytes(4, "little")
            at = data.find(signature, at + 4)
    Path(path).write_bytes(bytes(data))
    return Path(path)
