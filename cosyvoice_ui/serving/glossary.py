"""Pronunciation glossaries: word → how to read it, stored on disk and shared by the UI, the API and the CLI.

An entry carries a pinyin hint (`[x][ī][ān]`), CMU phones (`[R][EH1][D]`) or a plain respelling, and a hint
entry may also carry a respelling, so each backend gets what it reads: the hint kinds in
`EngineInfo.pronunciation` (Fun-CosyVoice3), else the respelling. `apply_glossary` rewrites a request's text
before the engine normalises it (longest word first; Latin words on word boundaries, CJK anywhere; existing
hints and tags are left alone). `preview` shows how a sentence will be read.

JSON shape (`to_json` / `from_json`, the CLI's files and the API's inline value):
    {"version": 1, "id": "names", "name": "Names", "case_sensitive": false,
     "entries": [{"word": "Xi'an", "pinyin": "[x][ī][ān]", "respell": "Shee-ahn"},
                 {"word": "GIF", "cmu": "[JH][IH1][F]"}, {"word": "Nguyen", "respell": "Win"}]}
Shorter forms are read too: the entries list alone, or a dict {"Xi'an": "[x][ī][ān]", "Nguyen": "Win"}.
Not here: where it is applied (each surface calls `with_glossary` / `apply_glossary` on the request before
it is checked and given to `Engine.synthesize`).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InvalidRequest
from ..files import write_atomic
from ..ids import is_id, normal_id, slug
from ..store_index import StoreIndex, check_room, entries_of
from ..types import EngineInfo, Mode, SynthesisRequest
from .glossary_hints import CMU, HINT_KINDS, PINYIN, HintError, canonical_hint, guess_kind, looks_like_hint

if TYPE_CHECKING:
    from ..engine import Engine

log = logging.getLogger(__name__)

RESPELL = "respell"
KINDS = (PINYIN, CMU, RESPELL)
FORMAT_VERSION = 1
MAX_ENTRIES = 500
MAX_WORD_CHARS = 64
MAX_PRONUNCIATION_CHARS = 200
MAX_NAME_CHARS = 80
MAX_SAME_NAME = 999  # ids made from one name: name, name-2, ... name-999
MAX_FILE_BYTES = 4 * 2**20  # a stored glossary is at most 500 short entries: far smaller
# Letters and digits that make a word boundary (Latin, Greek, Cyrillic); CJK, kana and hangul do not.
_WORDISH = r"0-9A-Za-z\u00C0-\u024F\u0370-\u03FF\u0400-\u04FF"
_EDGE = re.compile(f"[{_WORDISH}]")
# Spans a glossary never rewrites: pronunciation hints already written, `<|specials|>` and `<tags>`.
_PROTECTED = r"\[[^\[\]\n]*\]|<\|[^|\n]*\|>|<[^<>\n]*>"
_FORBIDDEN = ("[", "]", "<|", "|>", "\n", "\r")


@dataclass(frozen=True)
class GlossaryEntry:
    """One word and how to read it: `pronunciation` of `kind` ("pinyin", "cmu" or "respell"), and for a hint
    kind an optional plain `respell` that engines without hints read instead."""

    word: str
    pronunciation: str
    kind: str = RESPELL
    respell: str = ""

    def reading_for(self, hints: Iterable[str]) -> str | None:
        """What an engine reading `hints` gets for this word, or None when the entry has nothing it reads."""
        if self.kind == RESPELL or self.kind in tuple(hints):
            return self.pronunciation
        return self.respell or None

    def to_dict(self) -> dict:
        data = {"word": self.word, self.kind: self.pronunciation}
        if self.respell and self.kind != RESPELL:
            data[RESPELL] = self.respell
        return data


@dataclass(frozen=True)
class Glossary:
    """A named, saved list of entries (`id` empty until `GlossaryStore.save` gives it one, or inline)."""

    id: str
    name: str
    entries: tuple[GlossaryEntry, ...] = ()
    case_sensitive: bool = False

    def to_dict(self) -> dict:
        return {"version": FORMAT_VERSION, "id": self.id, "name": self.name, "case_sensitive": self.case_sensitive,
                "entries": [e.to_dict() for e in self.entries]}


@dataclass(frozen=True)
class Applied:
    """The result of applying a glossary: the new text, the entries used, and those that matched but have
    nothing this engine reads (with the reason, for the preview)."""

    text: str
    used: tuple[GlossaryEntry, ...] = ()
    skipped: tuple[tuple[GlossaryEntry, str], ...] = field(default_factory=tuple)


# --- building and checking entries ------------------------------------------------------------------------

def _bad(code: str, where: str, message: str, **params: object) -> InvalidRequest:
    return InvalidRequest(code, f"glossary {where}: {message}", **params)


def make_entry(word: object, pronunciation: object = "", kind: object = "", respell: object = "",
               where: str = "entry") -> GlossaryEntry:
    """One checked entry. `kind` empty: a bracketed pronunciation is a hint (pinyin or CMU by its letters),
    anything else a respelling. Hints come back in the bracketed form the model reads."""
    word_text = str(word if word is not None else "").strip()
    spoken = str(pronunciation if pronunciation is not None else "").strip()
    plain = str(respell if respell is not None else "").strip()
    kind_text = str(kind or "").strip().lower()
    label = f"{where} ({word_text!r})" if word_text else where
    if not word_text:
        raise _bad("glossary_empty_word", where, "the word is empty; write the word to replace, or delete the row")
    if len(word_text) > MAX_WORD_CHARS:
        raise _bad("glossary_value_too_long", label, f"the word is {len(word_text)} characters long; keep it to "
                   f"{MAX_WORD_CHARS}", limit=MAX_WORD_CHARS)
    if any(s in word_text for s in _FORBIDDEN):
        raise _bad("glossary_bad_word", label, "a word cannot contain brackets, '<|', '|>' or line breaks")
    if not spoken and plain and kind_text in ("", RESPELL):
        spoken, plain, kind_text = plain, "", RESPELL
    if not spoken:
        raise _bad("glossary_missing_pronunciation", label, "the pronunciation is empty; write a respelling "
                   "(e.g. Shee-ahn), pinyin ([x][ī][ān]) or CMU phones ([R][EH1][D])")
    if kind_text and kind_text not in KINDS:
        raise _bad("glossary_bad_kind", label, f"unknown kind {kind_text!r}; use one of: {', '.join(KINDS)}",
                   kinds=", ".join(KINDS))
    if not kind_text:
        bracketed = looks_like_hint(spoken) or "[" in spoken or "]" in spoken
        kind_text = guess_kind(spoken) if bracketed else RESPELL
    for value in (spoken, plain):
        if len(value) > MAX_PRONUNCIATION_CHARS:
            raise _bad("glossary_value_too_long", label, f"a pronunciation is {len(value)} characters long; keep "
                       f"it to {MAX_PRONUNCIATION_CHARS}", limit=MAX_PRONUNCIATION_CHARS)
    if kind_text in HINT_KINDS:
        try:
            spoken = canonical_hint(kind_text, spoken)
        except HintError as exc:
            raise _bad("glossary_bad_hint", label, str(exc), kind=kind_text) from None
    for value in ((spoken, plain) if kind_text == RESPELL else (plain,)):
        if any(s in value for s in _FORBIDDEN):
            raise _bad("glossary_bad_respelling", label, "a respelling is plain text: no brackets, '<|', '|>' or "
                       "line breaks (write hints in the pinyin or CMU column)")
    return GlossaryEntry(word_text, spoken, kind_text, plain if kind_text != RESPELL else "")


def _entry_from_mapping(row: Mapping, where: str, word: object = None) -> GlossaryEntry:
    """An entry from {"word", "pinyin"|"cmu"|"respell"} or {"word", "pronunciation", "kind", "respell"}."""
    known = {"word", "pronunciation", "kind", *KINDS}
    unknown = sorted(str(k) for k in row if k not in known)
    if unknown:
        raise _bad("glossary_invalid", where, f"unknown field(s) {', '.join(unknown)}; an entry has word, pinyin, "
                   "cmu, respell (or pronunciation and kind)")
    word = row.get("word", word)
    hints = [k for k in HINT_KINDS if str(row.get(k) or "").strip()]
    if len(hints) > 1:
        raise _bad("glossary_invalid", where, "give either pinyin or CMU phones for one word, not both")
    if hints:
        return make_entry(word, row[hints[0]], hints[0], row.get(RESPELL), where)
    if str(row.get("pronunciation") or "").strip():
        return make_entry(word, row["pronunciation"], row.get("kind"), row.get(RESPELL), where)
    return make_entry(word, row.get(RESPELL), RESPELL if row.get(RESPELL) else row.get("kind"), "", where)


def parse_entries(rows: object) -> tuple[GlossaryEntry, ...]:
    """Checked entries from a UI table (rows of [word, pronunciation(, respelling)]; blank rows skipped), a
    list of entry dicts, or a dict {"word": "pronunciation" or {entry fields}}. Raises `InvalidRequest`."""
    if rows is None:
        return ()
    if isinstance(rows, Mapping):
        items = [(f"entry {n}", v if isinstance(v, Mapping) else {"pronunciation": v}, k)
                 for n, (k, v) in enumerate(rows.items(), 1)]
    elif isinstance(rows, (list, tuple)):
        items = [(f"row {n}", row, None) for n, row in enumerate(rows, 1)]
    else:
        raise InvalidRequest("glossary_invalid", "a glossary is a list of entries or a {word: pronunciation} "
                             "object")
    entries: list[GlossaryEntry] = []
    for where, row, word in items:
        if isinstance(row, Mapping):
            entry = _entry_from_mapping(row, where, word)
        elif isinstance(row, (list, tuple)):
            cells = ["" if c is None else str(c).strip() for c in row]
            if not any(cells):
                continue
            if len(cells) > 3:
                raise _bad("glossary_invalid", where, "a row has the word, its pronunciation and an optional "
                           "respelling")
            cells += [""] * (3 - len(cells))
            entry = make_entry(cells[0], cells[1], "", cells[2], where)
        else:
            raise _bad("glossary_invalid", where, "an entry is an object with a word and its pronunciation")
        entries.append(entry)
        if len(entries) > MAX_ENTRIES:
            raise InvalidRequest("glossary_too_many", f"a glossary holds at most {MAX_ENTRIES} entries; split it "
                                 "into several glossaries", limit=MAX_ENTRIES)
    return tuple(entries)


def make_glossary(name: str, entries: object, case_sensitive: bool = False, glossary_id: str = "") -> Glossary:
    """A checked glossary: a name, entries in any `parse_entries` shape, no word twice."""
    name = str(name or "").strip()
    if len(name) > MAX_NAME_CHARS:
        raise InvalidRequest("glossary_value_too_long", f"the glossary name is {len(name)} characters long; keep "
                             f"it to {MAX_NAME_CHARS}", limit=MAX_NAME_CHARS)
    if isinstance(entries, (list, tuple)) and entries and all(isinstance(e, GlossaryEntry) for e in entries):
        entries = [e.to_dict() for e in entries]  # re-checked like any other input
    parsed = parse_entries(entries)
    seen: dict[str, str] = {}
    for entry in parsed:
        key = entry.word if case_sensitive else entry.word.casefold()
        if key in seen:
            raise InvalidRequest("glossary_duplicate", f"glossary: {entry.word!r} appears twice; keep one entry "
                                 "per word", word=entry.word)
        seen[key] = entry.word
    return Glossary(glossary_id, name or "Glossary", parsed, bool(case_sensitive))


# --- JSON ---------------------------------------------------------------------------------------------------

def to_json(glossary: Glossary) -> str:
    """The glossary as the JSON the CLI reads and the API returns."""
    return json.dumps(glossary.to_dict(), ensure_ascii=False, indent=2)


def from_json(data: str | bytes | Mapping | list) -> Glossary:
    """A checked glossary from `to_json`'s shape, an entries list or a {word: pronunciation} dict."""
    if isinstance(data, (str, bytes)):
        if len(data) > MAX_FILE_BYTES:
            raise InvalidRequest("glossary_file_too_large", f"the glossary is over {MAX_FILE_BYTES // 2**20} MB; a "
                                 f"glossary holds at most {MAX_ENTRIES} short entries",
                                 limit_mb=MAX_FILE_BYTES // 2**20)
        try:
            data = json.loads(data)
        except RecursionError:
            raise InvalidRequest("glossary_invalid_json", "the glossary nests arrays or objects too deeply to be a "
                                 "glossary; use the entries list or a {word: pronunciation} object") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidRequest("glossary_invalid_json", f"the glossary is not valid JSON ({exc.__class__.__name__}"
                                 f" at {getattr(exc, 'lineno', '?')}:{getattr(exc, 'colno', '?')}); check the "
                                 "file's syntax") from None
    if isinstance(data, Mapping) and "entries" in data:
        version = data.get("version", FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise InvalidRequest("glossary_invalid", f"glossary format version {version!r} is not supported (this "
                                 f"app reads version {FORMAT_VERSION})", version=str(version))
        glossary_id = str(data.get("id") or "")
        if glossary_id:
            glossary_id = normal_id(glossary_id) or ""
            if not glossary_id:
                raise InvalidRequest("glossary_invalid", "a glossary id is letters, digits, '_' and '-' (up to "
                                     "64), with no spaces or control characters")
        return make_glossary(str(data.get("name") or ""), data.get("entries") or [],
                             bool(data.get("case_sensitive", False)), glossary_id)
    return make_glossary("", data)


def read_glossary_file(path: str | Path) -> Glossary:
    """A glossary from a JSON file the user names (the CLI's `--glossary FILE`)."""
    try:
        if Path(path).stat().st_size > MAX_FILE_BYTES:
            raise InvalidRequest("glossary_file_too_large", f"the glossary file is over {MAX_FILE_BYTES // 2**20} MB; "
                                 f"a glossary holds at most {MAX_ENTRIES} short entries", limit_mb=MAX_FILE_BYTES // 2**20)
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else (exc.strerror or "unreadable")
        raise InvalidRequest("glossary_unreadable", f"cannot read the glossary file {Path(path).name!r} ({reason}); "
                             "pass a JSON file or a saved glossary id", file=Path(path).name) from None
    glossary = from_json(text)
    return glossary if glossary.name != "Glossary" else replace(glossary, name=Path(path).stem)


# --- applying ----------------------------------------------------------------------------------------------

def _entries_of(glossary: Glossary | Iterable[GlossaryEntry] | None) -> tuple[tuple[GlossaryEntry, ...], bool]:
    if glossary is None:
        return (), False
    if isinstance(glossary, Glossary):
        return glossary.entries, glossary.case_sensitive
    return tuple(glossary), False


def _pattern(entries: Iterable[GlossaryEntry], case_sensitive: bool) -> re.Pattern[str]:
    """One alternation: protected spans first, then the words longest first (Latin edges on word boundaries)."""
    alternatives = []
    for word in sorted({e.word for e in entries}, key=len, reverse=True):
        before = f"(?<![{_WORDISH}])" if _EDGE.match(word[0]) else ""
        after = f"(?![{_WORDISH}])" if _EDGE.match(word[-1]) else ""
        alternatives.append(before + re.escape(word) + after)
    words = "|".join(alternatives) or r"(?!x)x"
    return re.compile(f"(?P<keep>{_PROTECTED})|(?P<word>{words})", 0 if case_sensitive else re.IGNORECASE)


def applied(text: str, glossary: Glossary | Iterable[GlossaryEntry] | None, info: EngineInfo | None) -> Applied:
    """`text` with the glossary's words replaced by what this engine reads, and which entries took part."""
    entries, case_sensitive = _entries_of(glossary)
    if not entries or not text:
        return Applied(text)
    hints = tuple(info.pronunciation) if info is not None else ()
    key = (lambda w: w) if case_sensitive else str.casefold
    readings = {key(e.word): (e, e.reading_for(hints)) for e in entries}
    usable = [e for e, reading in readings.values() if reading is not None]
    used: dict[str, GlossaryEntry] = {}

    def replace_word(match: re.Match[str]) -> str:
        if match.group("keep") is not None:
            return match.group(0)
        entry, reading = readings[key(match.group("word"))]
        used.setdefault(key(entry.word), entry)
        return reading or match.group(0)

    new_text = _pattern(usable, case_sensitive).sub(replace_word, text)
    skipped = []
    unreadable = [e for e, reading in readings.values() if reading is None]
    if unreadable:
        finder = _pattern(unreadable, case_sensitive)
        found = {key(m.group("word")) for m in finder.finditer(text) if m.group("word") is not None}
        model = info.name if info is not None else "this model"
        skipped = [(e, f"{model} does not read {e.kind} hints and the entry has no respelling")
                   for e in unreadable if key(e.word) in found]
    return Applied(new_text, tuple(used.values()), tuple(skipped))


def apply_glossary(text: str, glossary: Glossary | Iterable[GlossaryEntry] | None, info: EngineInfo | None) -> str:
    """`text` with the glossary's words replaced by what the engine described by `info` reads."""
    return applied(text, glossary, info).text


def with_glossary(request: SynthesisRequest, glossary: Glossary | None, info: EngineInfo | None) -> SynthesisRequest:
    """`request` with the glossary applied to its text (vc requests have none). A changed request comes back
    as a plain `SynthesisRequest`, so the engine checks the new text (its length) again."""
    if glossary is None or not glossary.entries or request.mode is Mode.VC:
        return request
    text = apply_glossary(request.text, glossary, info)
    if text == request.text:
        return request
    values = {f.name: getattr(request, f.name) for f in fields(SynthesisRequest)}
    return SynthesisRequest(**{**values, "text": text})


def preview(engine: Engine | None, text: str, glossary: Glossary | Iterable[GlossaryEntry] | None,
            info: EngineInfo | None = None) -> list[str]:
    """How `text` will be read: the glossary applied, then the engine's own normalisation and split when a
    model is loaded (`Engine.reading`), else the glossary-applied text."""
    if info is None and engine is not None:
        info = engine.info
    rewritten = apply_glossary(text, glossary, info)
    if engine is None:
        return [rewritten.strip()] if rewritten.strip() else []
    return engine.reading(rewritten)


# --- the store ---------------------------------------------------------------------------------------------

class GlossaryStore:
    """The saved glossaries in one folder, one `<id>.json` each (written atomically), listed from an index
    (`store_index.py`), at most `limit` of them (0: no cap). Thread-safe."""

    def __init__(self, folder: str | Path, limit: int = 0) -> None:
        self.root = Path(folder)
        self.limit = limit
        self._lock = threading.Lock()
        self.index = StoreIndex(self.root, self._records, self._summary)

    def _records(self):
        for entry in entries_of(self.root):
            stem, dot, suffix = entry.name.rpartition(".")
            if dot and suffix == "json" and is_id(stem) and entry.is_file():
                yield stem, Path(entry.path)

    def _summary(self, glossary_id: str, path: Path) -> dict | None:
        glossary = self._read(glossary_id, path)
        return glossary.to_dict() if glossary is not None else None

    def ids(self) -> tuple[str, ...]:
        return tuple(sorted(self.index.summaries()))

    def list(self) -> list[Glossary]:
        """Every readable glossary, by name (from the index: only changed files are read)."""
        found = []
        for glossary_id, data in self.index.summaries().items():
            try:
                found.append(replace(from_json(data), id=glossary_id))
            except InvalidRequest:  # an index written by an older rule: read the file itself
                glossary = self.get(glossary_id)
                if glossary is not None:
                    found.append(glossary)
        return sorted(found, key=lambda g: (g.name.casefold(), g.id))

    def get(self, glossary_id: str) -> Glossary | None:
        """The glossary, or None when there is no such (readable) glossary."""
        canonical = normal_id(glossary_id)
        if canonical is None:
            return None
        return self._read(canonical, self.root / f"{canonical}.json")

    def _read(self, glossary_id: str, path: Path) -> Glossary | None:
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                log.warning("glossary %s is over %d bytes; skipped", glossary_id, MAX_FILE_BYTES)
                return None
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("glossary %s is unreadable (%s); skipped", glossary_id, exc)
            return None
        try:
            return replace(from_json(text), id=glossary_id)
        except InvalidRequest as exc:
            log.warning("glossary %s is invalid (%s); skipped", glossary_id, exc.message)
            return None

    def require(self, glossary_id: str) -> Glossary:
        """Like `get`, but raise `InvalidRequest` naming the saved glossaries when the id is unknown."""
        glossary = self.get(glossary_id)
        if glossary is None:
            raise InvalidRequest("glossary_unknown", f"there is no saved glossary {glossary_id!r}; saved "
                                 f"glossaries: {', '.join(self.ids()) or 'none'}", glossary=str(glossary_id))
        return glossary

    def save(self, glossary: Glossary) -> Glossary:
        """Store `glossary` (re-checked); without an id it gets a new one from its name. Returns it with its id.
        A new glossary past the store's cap is refused (`StoreFull`); so is a name whose ids are all taken."""
        checked = make_glossary(glossary.name, glossary.entries, glossary.case_sensitive)
        with self._lock:
            glossary_id = glossary.id
            if glossary_id:
                glossary_id = normal_id(glossary_id)
                if glossary_id is None:
                    raise InvalidRequest("glossary_invalid", "a glossary id is letters, digits, '_' and '-' (up to "
                                         "64), with no spaces or control characters")
            taken = set(self.ids())
            if not glossary_id:
                base = _slug(checked.name)
                glossary_id = next((c for c in (base, *(f"{base[:42]}-{n}" for n in range(2, MAX_SAME_NAME + 1)))
                                    if c not in taken), None)
                if glossary_id is None:
                    raise InvalidRequest("glossary_name_taken", f"{MAX_SAME_NAME} glossaries already have ids made "
                                         f"from the name {checked.name!r}; choose another name, or delete some",
                                         name=checked.name, limit=MAX_SAME_NAME)
            if glossary_id not in taken:
                check_room(len(taken), self.limit, "glossary", "--max-glossaries")
            stored = replace(checked, id=glossary_id)
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                write_atomic(self.root / f"{glossary_id}.json", to_json(stored).encode("utf-8"))
            except OSError as exc:
                raise InvalidRequest("glossary_store_unwritable", "the glossary folder cannot be written "
                                     f"({exc.strerror or 'error'}): check that it is writable and the disk has "
                                     "space") from None
        return stored

    def remove(self, glossary_id: str) -> bool:
        """Delete a saved glossary; False when there was none."""
        canonical = normal_id(glossary_id)
        if canonical is None:
            return False
        with self._lock:
            try:
                (self.root / f"{canonical}.json").unlink()
                return True
            except FileNotFoundError:
                return False


def _slug(name: str) -> str:
    """A readable id from a name: lower case, word characters and dashes ("Place names" → "place-names")."""
    return slug(name, "glossary")


def resolve_glossary(store: GlossaryStore | None, value: object) -> Glossary | None:
    """The glossary a request names: None/empty → None, a saved id (str), an inline dict or list (the JSON
    shapes `from_json` reads) or a `Glossary`. Raises `InvalidRequest` for an unknown id or bad entries."""
    if value is None or isinstance(value, Glossary):
        return value
    if isinstance(value, str):
        if not value.strip():
            return None
        if store is None:
            raise InvalidRequest("glossary_unknown", "saved glossaries are not available here; pass the glossary "
                                 "inline (a JSON object of word → pronunciation)", glossary=value.strip())
        return store.require(value.strip())
    if isinstance(value, (Mapping, list, tuple)):
        if not value:
            return None
        glossary = from_json(value if isinstance(value, Mapping) else list(value))
        return replace(glossary, name=glossary.name if glossary.name != "Glossary" else "inline")
    raise InvalidRequest("glossary_invalid", "a glossary is a saved glossary id or an inline object of word → "
                         "pronunciation")
