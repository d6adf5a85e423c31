"""A bounded EPUB reader: only what reading a book aloud needs, read once, within a budget.

`META-INF/container.xml` names the package (OPF) file; its manifest, spine and metadata give the reading order,
the title and the author; the table of contents (the EPUB 3 nav document, else the EPUB 2 NCX) names files that
have no heading. Spine documents are read on demand, each once, images and other media never.

Limits, checked before anything is decompressed and again while reading:
- the archive's central directory (its member count and size) is read from the end record first, so a zip of
  100,000 empty files is refused before Python builds 100,000 records;
- each member read must be stored or deflated (as EPUB requires; zipfile inflates those a bounded chunk at a
  time), declare at most `MAX_MEMBER_BYTES`, and the members read together at most `MAX_READ_BYTES`; the bytes
  are counted as they are decompressed in chunks, so a member whose header lies stops at its declared size
  (Python's zipfile then fails the CRC check, reported as a damaged book);
- XML is parsed without network access, DTD loading or entity expansion, with libxml2's own limits kept
  (`huge_tree=False`): entity bombs and external entities do nothing.
"""

from __future__ import annotations

import posixpath
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

from ..budget import Budget
from ..errors import InvalidRequest
from .textclean import clean_title

MAX_MEMBERS = 10_000  # a long illustrated book has a few thousand files
MAX_CENTRAL_DIRECTORY_BYTES = 4 * 2**20  # 10,000 entries with long names fit in 2 MB
MAX_MEMBER_BYTES = 16 * 2**20  # one chapter file; converters split far smaller (Calibre: 260 KB)
MAX_READ_BYTES = 64 * 2**20  # every document read for one book together (images are never read)
MAX_XML_BYTES = 4 * 2**20  # container.xml, encryption.xml, the package file, the nav and the NCX
_CHUNK = 64 * 1024
DOCUMENT_TYPES = ("application/xhtml+xml", "text/html")
# EPUB's font obfuscation (IDPF and Adobe) also lists files in META-INF/encryption.xml; that is not DRM.
_FONT_OBFUSCATION = ("http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC")
_END_RECORD = b"PK\x05\x06"
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_END_RECORD = b"PK\x06\x06"


@dataclass(frozen=True)
class EpubContents:
    """What the package says: title, author, the reading order (member names, each once) and TOC titles."""

    title: str
    author: str
    documents: list[str] = field(default_factory=list)
    toc: dict[str, str] = field(default_factory=dict)  # member name -> its title in the table of contents


def damaged(detail: str = "its package file could not be read") -> InvalidRequest:
    return InvalidRequest("bad_book", f"this EPUB book is damaged or incomplete ({detail}); export it again or "
                          "convert it with Calibre")


class EpubArchive:
    """An open EPUB (`with EpubArchive(path, budget) as book:`): `contents()` once, then `read(name)`."""

    def __init__(self, path: Path, budget: Budget | None = None) -> None:
        self.path = Path(path)
        self.budget = budget
        self.read_bytes = 0
        self._seen: set[str] = set()
        _check_central_directory(self.path)
        try:
            self._zip = zipfile.ZipFile(self.path)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError):
            raise damaged("its zip directory could not be read") from None
        count = len(self._zip.infolist())
        if count > MAX_MEMBERS:  # the end record understated its count
            self._zip.close()
            raise _too_many_files(count)

    def __enter__(self) -> EpubArchive:
        return self

    def __exit__(self, *exc) -> None:
        self._zip.close()

    # --- reading members --------------------------------------------------------------------------------

    def read(self, name: str, limit: int = MAX_MEMBER_BYTES) -> bytes:
        """A member's bytes: its declared size checked first, the actual bytes counted while decompressing."""
        try:
            info = self._zip.getinfo(name)
        except KeyError:
            raise damaged("a file its package lists is missing") from None
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            # EPUB allows only these two; zipfile decompresses bzip2 and LZMA a whole input chunk at a time,
            # so 200 bytes of bzip2 could unpack to 200 MB in one call before any count could stop it
            raise damaged("a file inside it uses a compression EPUB does not allow")
        if info.file_size > limit:
            raise _member_too_large(info.file_size, limit)
        if self.read_bytes + info.file_size > MAX_READ_BYTES:
            raise _book_too_large()
        chunks, size = [], 0
        try:
            with self._zip.open(info) as member:
                while chunk := member.read(_CHUNK):
                    size += len(chunk)
                    if size > info.file_size or size > limit:  # zipfile stops at the declared size; be sure
                        raise _member_too_large(size, limit)
                    chunks.append(chunk)
                    if self.budget is not None:
                        self.budget.check()
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError, RuntimeError):
            # a CRC mismatch (a member larger or other than declared), an unknown compression, encryption
            raise damaged("a file inside it is not what its zip directory declares") from None
        self.read_bytes += size
        return b"".join(chunks)

    def read_once(self, name: str) -> bytes | None:
        """`read(name)`, or None when this member was already read (a file the spine lists twice)."""
        if name in self._seen:
            return None
        self._seen.add(name)
        return self.read(name)

    def has(self, name: str) -> bool:
        return name in self._zip.NameToInfo

    # --- the package --------------------------------------------------------------------------------------

    def refuse_drm(self) -> None:
        """A book whose content files are encrypted (Adobe ADEPT, Apple FairPlay, ...) cannot be read."""
        if self.has("META-INF/rights.xml"):
            raise drm_error()
        if not self.has("META-INF/encryption.xml"):
            return
        try:
            root = parse_xml(self.read("META-INF/encryption.xml", MAX_XML_BYTES))
        except InvalidRequest as exc:
            if exc.code == "bad_book":
                raise drm_error() from None
            raise
        for data in root.iter("{*}EncryptedData"):
            method = next(data.iter("{*}EncryptionMethod"), None)
            algorithm = method.get("Algorithm", "") if method is not None else ""
            if algorithm not in _FONT_OBFUSCATION:
                raise drm_error()

    def contents(self) -> EpubContents:
        opf_name = self._package_name()
        package = parse_xml(self.read(opf_name, MAX_XML_BYTES))
        base = posixpath.dirname(opf_name)
        manifest: dict[str, tuple[str, str, str]] = {}  # id -> (member name, media type, properties)
        for item in package.iterfind("{*}manifest/{*}item"):
            if self.budget is not None:
                self.budget.check()
            href = item.get("href")
            if item.get("id") and href:
                manifest.setdefault(item.get("id"), (_member(base, href), (item.get("media-type") or "").strip(),
                                                     item.get("properties") or ""))
        spine = package.find("{*}spine")
        if spine is None:
            raise damaged("its package file has no reading order")
        nav = next((name for name, kind, props in manifest.values()
                    if kind in DOCUMENT_TYPES and "nav" in props.split()), None)
        documents, listed = [], set()
        for itemref in spine.iterfind("{*}itemref"):
            if self.budget is not None:
                self.budget.check()
            entry = manifest.get(itemref.get("idref") or "")
            if entry is None or entry[1] not in DOCUMENT_TYPES or entry[0] == nav:
                continue
            if (itemref.get("linear") or "yes").strip().lower() == "no" or entry[0] in listed:
                continue
            listed.add(entry[0])
            documents.append(entry[0])
        ncx = manifest.get(spine.get("toc") or "") or next(
            (entry for entry in manifest.values() if entry[1] == "application/x-dtbncx+xml"), None)
        toc = self._nav_titles(nav) if nav else {}
        if not toc and ncx is not None:
            toc = self._ncx_titles(ncx[0])
        return EpubContents(_metadata(package, "title"), _metadata(package, "creator"), documents, toc)

    def _package_name(self) -> str:
        if not self.has("META-INF/container.xml"):
            raise damaged("it has no META-INF/container.xml")
        container = parse_xml(self.read("META-INF/container.xml", MAX_XML_BYTES))
        rootfiles = list(container.iter("{*}rootfile"))
        chosen = next((r for r in rootfiles if r.get("media-type") == "application/oebps-package+xml"),
                      rootfiles[0] if rootfiles else None)
        name = _member("", chosen.get("full-path") or "") if chosen is not None else ""
        if not name or not self.has(name):
            raise damaged("its package file is missing")
        return name

    def _nav_titles(self, name: str) -> dict[str, str]:
        """Member name -> title from the EPUB 3 navigation document's table of contents."""
        if not self.has(name):
            return {}
        root = parse_markup(self.read(name, MAX_XML_BYTES))
        if root is None:
            return {}
        navs = [element for element in root.iter() if _local(element.tag) == "nav"]
        chosen = next((nav for nav in navs if any(_local(key) == "type" and "toc" in str(value).split()
                                                  for key, value in nav.attrib.items())), navs[0] if navs else root)
        base = posixpath.dirname(name)
        titles: dict[str, str] = {}
        for anchor in chosen.iter():
            if _local(anchor.tag) == "a" and anchor.get("href"):
                if self.budget is not None:
                    self.budget.check()
                titles.setdefault(_member(base, anchor.get("href")), clean_title(anchor.xpath("string()")))
        return titles

    def _ncx_titles(self, name: str) -> dict[str, str]:
        """Member name -> title from the EPUB 2 NCX's navigation points."""
        if not self.has(name):
            return {}
        root = parse_xml(self.read(name, MAX_XML_BYTES))
        base = posixpath.dirname(name)
        titles: dict[str, str] = {}
        for point in root.iter("{*}navPoint"):
            if self.budget is not None:
                self.budget.check()
            content, label = point.find("{*}content"), point.find("{*}navLabel")
            if content is not None and content.get("src"):
                text = label.xpath("string()") if label is not None else ""
                titles.setdefault(_member(base, content.get("src")), clean_title(text))
        return titles


# --- XML ------------------------------------------------------------------------------------------------------


def xml_parser():
    from lxml import etree

    return etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False, load_dtd=False,
                           dtd_validation=False, remove_comments=True, remove_pis=True)


def html_parser():
    from lxml import html

    return html.HTMLParser(no_network=True, huge_tree=False, remove_comments=True, remove_pis=True)


def parse_xml(data: bytes):
    """The root element of an XML file of the package, parsed safely; a damaged book when it is not XML."""
    from lxml import etree

    try:
        root = etree.fromstring(data, xml_parser())
    except (etree.XMLSyntaxError, ValueError):
        raise damaged("an XML file of its package is not valid XML") from None
    if root is None:
        raise damaged("an XML file of its package is empty")
    return root


def parse_markup(data: bytes):
    """An XHTML page as XML, else (broken XHTML, HTML entities) with the forgiving HTML parser; None if neither."""
    from lxml import etree, html

    try:
        return etree.fromstring(data, xml_parser())
    except (etree.XMLSyntaxError, ValueError):
        pass
    try:
        return html.document_fromstring(data, parser=html_parser())
    except (etree.ParserError, etree.XMLSyntaxError, ValueError):
        return None


def _metadata(package, name: str) -> str:
    values = [clean_title(element.xpath("string()")) for element in package.iterfind(f"{{*}}metadata/{{*}}{name}")]
    return " & ".join(value for value in values if value)


def _local(tag) -> str:
    return tag.rsplit("}", 1)[-1].rsplit(":", 1)[-1] if isinstance(tag, str) else ""


def _member(base: str, href: str) -> str:
    """The zip member an href points at (relative to `base`, fragment dropped, %-escapes decoded)."""
    path = unquote(str(href).split("#", 1)[0].strip())
    joined = posixpath.normpath(posixpath.join(base, path)) if path else ""
    return joined.lstrip("/") if joined not in (".", "..") and not joined.startswith("../") else ""


# --- refusals -------------------------------------------------------------------------------------------------


def drm_error() -> InvalidRequest:
    return InvalidRequest("drm_book", "this EPUB book is DRM-protected (its text is encrypted), so it cannot be "
                          "read aloud; use a DRM-free copy of the book")


def _too_many_files(count: int) -> InvalidRequest:
    return InvalidRequest("epub_too_many_files", f"this EPUB holds {count:,} files; at most {MAX_MEMBERS:,} can be "
                          "read (it may be damaged or built to overload the server); convert it with Calibre and "
                          "upload it again", files=count, limit=MAX_MEMBERS)


def _member_too_large(size: int, limit: int) -> InvalidRequest:
    mb, limit_mb = -(-size // 2**20), limit // 2**20
    return InvalidRequest("epub_member_too_large", f"a file inside this EPUB is {mb:,} MB when unpacked; at most "
                          f"{limit_mb} MB can be read per file; convert the book with Calibre (it splits long "
                          "chapters into smaller files) and upload it again", size_mb=mb, limit_mb=limit_mb)


def _book_too_large() -> InvalidRequest:
    limit_mb = MAX_READ_BYTES // 2**20
    return InvalidRequest("epub_too_large", f"the chapters of this EPUB add up to more than {limit_mb} MB when "
                          "unpacked, more than can be read at once; split the book into parts (Calibre can) and "
                          "upload each part", limit_mb=limit_mb)


# --- the zip's end record -----------------------------------------------------------------------------------


def _check_central_directory(path: Path) -> None:
    """Refuse an archive whose central directory lists too many members, or is too big, before zipfile reads it
    (it builds one record per member). The end record is the last 22 bytes, plus a comment of up to 64 KB."""
    try:
        with open(path, "rb") as file:
            file.seek(0, 2)
            size = file.tell()
            start = max(0, size - (22 + 65535))
            file.seek(start)
            tail = file.read()
            at = tail.rfind(_END_RECORD)
            if at < 0 or len(tail) - at < 22:
                raise damaged("its zip directory is missing")
            entries, directory_bytes = struct.unpack("<HL", tail[at + 10:at + 16])
            if entries == 0xFFFF or directory_bytes == 0xFFFFFFFF:
                entries, directory_bytes = _zip64_counts(file, start + at)
    except (OSError, struct.error):
        raise damaged("its zip directory could not be read") from None
    if entries > MAX_MEMBERS:
        raise _too_many_files(entries)
    if directory_bytes > MAX_CENTRAL_DIRECTORY_BYTES:
        raise _too_many_files(directory_bytes // 46)  # 46 bytes: the smallest directory entry


def _zip64_counts(file, end_record_at: int) -> tuple[int, int]:
    if end_record_at < 20:
        raise damaged("its zip directory is missing")
    file.seek(end_record_at - 20)
    locator = file.read(20)
    if locator[:4] != _ZIP64_LOCATOR:
        raise damaged("its zip directory is missing")
    (offset,) = struct.unpack("<Q", locator[8:16])
    file.seek(offset)
    record = file.read(56)
    if record[:4] != _ZIP64_END_RECORD:
        raise damaged("its zip directory is missing")
    entries, directory_bytes = struct.unpack("<QQ", record[32:48])
    return entries, directory_bytes
