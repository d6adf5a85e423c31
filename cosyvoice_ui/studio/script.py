"""A dialogue script: one spoken line per text line, each with its speaker.

The forms a line may take:

    Alice: Hello there.          a name, a colon (":" or the full-width "："), the words
    [Bob] Hi, Alice!              a name in square brackets, then the words
    It was a dark night.          plain text: the narrator (`NARRATOR`) says it
    # a comment                   skipped, as are blank lines

When is "Word: rest" a speaker? The part before the first colon must look like a name: 1-32 characters,
at most 4 words, at least one letter, no sentence punctuation (, ; ! ? … quotes, or a trailing "."), and the
rest must not be empty or start with "//" (a web address). A name-shaped label then counts as a speaker when
the script reads as a dialogue: the same label starts at least two lines, or the script has at least two
different labels (brackets included), or every line of the script is labelled. So in plain prose a lone
"Note: at 10:30 we leave." stays the narrator's text, while "Note:" in a script with other speakers is a name.
A bracketed "[Name]" is always a speaker.

Reading is linear in the script (plain string scans, no backtracking regex over the user's lines), control
characters and bidirectional overrides are dropped from every line, and a script is refused past
`MAX_SCRIPT_CHARS` characters or `MAX_SCRIPT_LINES` lines, or when reading it takes over `SCRIPT_SECONDS`.

Nothing here imports torch.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from ..budget import Budget, too_large
from ..errors import InvalidRequest
from .textclean import clean_text

NARRATOR = "Narrator"
MAX_NAME_CHARS = 32
MAX_NAME_WORDS = 4
MAX_SCRIPT_CHARS = 2_000_000  # about 2 MB of text: the Script tab's upload limit
MAX_SCRIPT_LINES = 20_000  # a feature-length radio play has about 2,000
SCRIPT_SECONDS = 20.0
_LABEL_CHARS = MAX_NAME_CHARS + 8  # the part before a colon that is looked at for a name

_SENTENCE_PUNCTUATION = re.compile(r"[,;!?…\"“”«»。，、；！？（）()]")


@dataclass(frozen=True)
class ScriptLine:
    """One spoken line: its position among the spoken lines (`index`, 0-based), who says it, and the words.
    `source` is the 0-based number of the text line it came from (to edit the script in place)."""

    index: int
    speaker: str
    text: str
    source: int = -1


@dataclass(frozen=True)
class _Candidate:
    source: int
    raw: str
    label: str  # "" when the line has no name-shaped label
    rest: str
    bracketed: bool


def parse_script(text: str) -> list[ScriptLine]:
    """The spoken lines of `text` in order (see the module's rules). Raises `InvalidRequest("script_empty")`
    when nothing is left to speak."""
    text = str(text or "")
    if len(text) > MAX_SCRIPT_CHARS:  # before splitting: a list of lines of a huge text is itself the cost
        raise too_large("script_too_long", "script", len(text), MAX_SCRIPT_CHARS, "characters",
                        "Split it into several projects.")
    rows = text.splitlines()
    if len(rows) > MAX_SCRIPT_LINES:
        raise too_large("script_too_many_lines", "script", len(rows), MAX_SCRIPT_LINES, "lines",
                        "Split it into several projects.")
    budget = Budget(SCRIPT_SECONDS, "script")
    candidates = []
    for number, raw in enumerate(rows):
        budget.check()
        candidate = _candidate(number, raw)
        if candidate is not None:
            candidates.append(candidate)
    labels = Counter(c.label for c in candidates if c.label)
    dialogue = len(labels) >= 2 or (bool(candidates) and all(c.label for c in candidates))
    lines: list[ScriptLine] = []
    for c in candidates:
        is_speaker = bool(c.label) and (c.bracketed or dialogue or labels[c.label] >= 2)
        speaker, words = (c.label, c.rest) if is_speaker else (NARRATOR, c.raw)
        if not words.strip():
            continue  # "[Bob]" alone: nothing to say
        lines.append(ScriptLine(len(lines), speaker, words.strip(), c.source))
    if not lines:
        raise InvalidRequest("script_empty", "the script has no lines to speak; write one line per sentence, e.g. "
                             "\"Alice: Hello!\" (plain lines are read by the narrator)")
    return lines


def speakers(lines: Iterable[ScriptLine]) -> list[str]:
    """The speakers of `lines` in the order they first speak."""
    seen: dict[str, None] = {}
    for line in lines:
        seen.setdefault(line.speaker, None)
    return list(seen)


def is_name(label: str) -> bool:
    """Whether `label` (the part before a colon) is shaped like a speaker's name (see the module's rules)."""
    label = label.strip()
    if not 1 <= len(label) <= MAX_NAME_CHARS or len(label.split()) > MAX_NAME_WORDS:
        return False
    if not any(ch.isalpha() for ch in label) or label.endswith(".") or label.startswith("#"):
        return False
    return not _SENTENCE_PUNCTUATION.search(label)


def format_line(speaker: str, text: str) -> str:
    """One script line for `speaker` saying `text`: "Name: text" when the name allows it, else "[Name] text"."""
    text = " ".join(str(text).split())
    if is_name(speaker) and "[" not in speaker:
        return f"{speaker}: {text}"
    return f"[{speaker}] {text}"


def replace_line(script: str, source: int, speaker: str, text: str) -> str:
    """`script` with text line `source` rewritten so it parses as `speaker` saying `text`, every other line
    kept as it is and still parsed as before (the narrator's line is written as plain text when that is safe;
    a label is added only when needed, in the form that leaves the other lines' speakers alone)."""
    rows = str(script).splitlines()
    try:
        before = {line.source: (line.speaker, line.text) for line in parse_script(script)}
    except InvalidRequest:
        before = {}
    if not 0 <= source < len(rows):
        source = len(rows)
        rows.append("")
    expected = {**before, source: (speaker, " ".join(str(text).split()))}
    words = expected[source][1]
    forms = ([words] if speaker == NARRATOR else []) + [format_line(speaker, words), f"[{speaker}] {words}"]
    for form in forms:
        trial = "\n".join(rows[:source] + [form] + rows[source + 1:])
        if {line.source: (line.speaker, line.text) for line in parse_script(trial)} == expected:
            break
    return trial + ("\n" if str(script).endswith("\n") else "")


def _candidate(number: int, raw: str) -> _Candidate | None:
    line = clean_text(raw).strip()
    if not line or line.startswith("#"):
        return None
    if line.startswith("["):  # "[Name] words": the name is up to the first "]", without brackets inside
        close = line.find("]", 1, MAX_NAME_CHARS + 2)
        label = line[1:close] if close > 1 else ""
        if label.strip() and "[" not in label:
            return _Candidate(number, line, " ".join(label.split()), line[close + 1:].lstrip(), True)
    colon = _first_colon(line)
    if colon > 0:  # "Name: words": the name is what comes before the first colon
        label, rest = line[:colon].rstrip(), line[colon + 1:].lstrip()
        if len(label) <= _LABEL_CHARS and is_name(label) and rest.strip() and not rest.startswith("//"):
            return _Candidate(number, line, " ".join(label.split()), rest, False)
    return _Candidate(number, line, "", line, False)


def _first_colon(text: str) -> int:
    found = [at for at in (text.find(":"), text.find("：")) if at >= 0]
    return min(found) if found else -1
