"""A studio project: a script, the voice of each name, and the takes of every line, kept as one folder.

    project.json    version, name, script text, lines (id, speaker, text, takes, chosen take, locked),
                    voice map, settings (gap seconds, retries, format, speed, seed)
    takes/          one FLAC per take: "<line id>_<take no>.flac"
    voices/         the sample recordings of names that speak in a recorded voice
    exports/        mixes, stems and subtitles written by `mixdown.export`

`project.json` is replaced atomically on every `save()`, so a crash leaves the last saved state, which is
how rendering resumes. Reopening a folder gives back exactly what was saved. Take files are never deleted.

Nothing here imports torch.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace
from difflib import SequenceMatcher
from pathlib import Path

from ..audio import OWN_AUDIO_LIMITS, audio_hash, check_format, encode, read_audio
from ..errors import InvalidRequest
from ..files import sweep_stale_temp, write_atomic
from ..types import Audio
from ..validation import check_seed, check_speed
from .script import ScriptLine, parse_script, replace_line, speakers
from ..serving.subtitles import Cue
from .voice_map import VoiceChoice, VoiceMemory

PROJECT_FILE = "project.json"
VERSION = 1
TAKE_FORMAT = "flac"
MAX_GAP_S = 10.0
MAX_RETRIES = 5
_MAX_MATCH_CELLS = 4_000_000  # old x new changed lines difflib may compare (about half a second)


@dataclass
class Settings:
    """How a project renders and mixes: silence between lines, retries of bad takes, export format."""

    gap_s: float = 0.4
    retries: int | None = None  # the most retries of a bad take; None: as many as the server's policy says
    format: str = "wav"
    speed: float = 1.0
    seed: int = 1  # the first take of each line derives its seed from this and the line's id

    def __post_init__(self) -> None:
        if not 0.0 <= float(self.gap_s) <= MAX_GAP_S:
            raise InvalidRequest("gap_out_of_range", f"the gap between lines is {self.gap_s} s; pick 0-{MAX_GAP_S:g} s",
                                 gap=self.gap_s, max=MAX_GAP_S)
        if self.retries is not None and not 0 <= int(self.retries) <= MAX_RETRIES:
            raise InvalidRequest("retries_out_of_range", f"retries is {self.retries}; pick 0 (check only) to "
                                 f"{MAX_RETRIES}", retries=self.retries, max=MAX_RETRIES)
        self.format = check_format(self.format)
        check_speed(float(self.speed))
        check_seed(int(self.seed))

    @classmethod
    def from_dict(cls, data: dict) -> Settings:
        known = {k: data[k] for k in ("gap_s", "retries", "format", "speed", "seed") if k in data}
        return cls(**known)


@dataclass
class Take:
    """One rendering of a line: `text` is what was said (the line may have been edited since), `cues` are
    relative to the take's start, `check` is the bad-take check's verdict, `voice` the choice it used."""

    number: int
    seed: int
    text: str
    file: str
    seconds: float
    cues: list[Cue] = field(default_factory=list)
    check: dict = field(default_factory=dict)
    attempts: int = 1
    voice: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["cues"] = [asdict(cue) for cue in self.cues]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Take:
        return cls(number=int(data["number"]), seed=int(data["seed"]), text=str(data["text"]), file=str(data["file"]),
                   seconds=float(data["seconds"]), cues=[Cue(**cue) for cue in data.get("cues", [])],
                   check=dict(data.get("check", {})), attempts=int(data.get("attempts", 1)),
                   voice=dict(data.get("voice", {})))


@dataclass
class Line:
    """A line of the project: stable `id`, its speaker and text, its takes, the chosen one, and the lock."""

    id: str
    speaker: str
    text: str
    source: int = -1
    takes: list[Take] = field(default_factory=list)
    chosen: int | None = None  # a take number
    locked: bool = False

    @property
    def take(self) -> Take | None:
        """The chosen take (None before the first render)."""
        return next((t for t in self.takes if t.number == self.chosen), None)

    def to_dict(self) -> dict:
        return {"id": self.id, "speaker": self.speaker, "text": self.text, "source": self.source,
                "takes": [t.to_dict() for t in self.takes], "chosen": self.chosen, "locked": self.locked}

    @classmethod
    def from_dict(cls, data: dict) -> Line:
        chosen = data.get("chosen")
        return cls(id=str(data["id"]), speaker=str(data["speaker"]), text=str(data["text"]),
                   source=int(data.get("source", -1)), takes=[Take.from_dict(t) for t in data.get("takes", [])],
                   chosen=None if chosen is None else int(chosen), locked=bool(data.get("locked", False)))


class Project:
    """A project folder in memory; every change is kept only after `save()` (the render saves per line)."""

    def __init__(self, folder: Path, name: str, script: str, lines: list[Line], voices: dict[str, VoiceChoice],
                 settings: Settings, next_id: int = 1) -> None:
        self.folder = Path(folder)
        self.name = name
        self.script = script
        self.lines = lines
        self.voices = voices
        self.settings = settings
        self.next_id = next_id

    # --- folders -----------------------------------------------------------------------------------

    @property
    def takes_dir(self) -> Path:
        return self.folder / "takes"

    @property
    def voices_dir(self) -> Path:
        return self.folder / "voices"

    @property
    def exports_dir(self) -> Path:
        return self.folder / "exports"

    # --- create, open, save ------------------------------------------------------------------------

    @classmethod
    def create(cls, folder: Path, name: str, script: str, settings: Settings | None = None,
               memory: VoiceMemory | None = None) -> Project:
        """A new project in `folder` (empty or missing), saved at once. Names the memory knows get their
        remembered voice (samples copied in)."""
        folder = Path(folder)
        if (folder / PROJECT_FILE).exists():
            raise InvalidRequest("project_exists", "this folder already holds a project; open it, or pick an empty "
                                 "folder for a new one")
        name = " ".join(str(name or "").split()) or "Untitled"
        project = cls(folder, name, "", [], {}, settings or Settings())
        project.set_script(script)
        if memory is not None:
            for speaker in project.speakers():
                remembered = memory.get(speaker)
                sample = memory.sample(speaker)
                if remembered is not None and (remembered.kind != "sample" or sample is not None):
                    project.set_voice(speaker, remembered, sample)
        project.save()
        return project

    @classmethod
    def open(cls, folder: Path) -> Project:
        """The project saved in `folder`, exactly as it was saved."""
        folder = Path(folder)
        path = folder / PROJECT_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InvalidRequest("project_missing", "there is no project in this folder; create one, or pick the "
                                 "folder that holds its project.json") from None
        except (OSError, ValueError):
            raise InvalidRequest("project_unreadable", "the project file is damaged or unreadable; restore it from "
                                 "a backup or create the project again") from None
        version = data.get("version") if isinstance(data, dict) else None
        if not isinstance(version, int) or version > VERSION:
            raise InvalidRequest("project_version", "this project was saved by a newer version (or is not a "
                                 "project); update the program to open it", version=str(version))
        try:
            return cls(folder, str(data["name"]), str(data["script"]), [Line.from_dict(x) for x in data["lines"]],
                       {k: VoiceChoice.from_dict(v) for k, v in data.get("voices", {}).items()},
                       Settings.from_dict(data.get("settings", {})), int(data.get("next_id", 1)))
        except (KeyError, TypeError, ValueError):
            raise InvalidRequest("project_unreadable", "the project file is damaged (a field is missing or wrong); "
                                 "restore it from a backup or create the project again") from None

    def to_dict(self) -> dict:
        return {"version": VERSION, "name": self.name, "script": self.script, "next_id": self.next_id,
                "lines": [line.to_dict() for line in self.lines],
                "voices": {k: v.to_dict() for k, v in self.voices.items()}, "settings": asdict(self.settings)}

    def save(self) -> None:
        """Write `project.json` atomically (readers and a crash see the old file or the new one)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        sweep_stale_temp(self.folder)
        text = json.dumps(self.to_dict(), ensure_ascii=False, indent=1)
        write_atomic(self.folder / PROJECT_FILE, text.encode("utf-8"))

    # --- script ------------------------------------------------------------------------------------

    def set_script(self, text: str) -> None:
        """Replace the script. Lines whose speaker and text are unchanged keep their id and takes (matched in
        order); a locked line whose text changed keeps its takes and lock (its chosen take is the locked
        one); other changed lines start without takes. Raises `InvalidRequest` for an empty script."""
        parsed = parse_script(text)
        old = self.lines
        kept = _continued(old, [(x.speaker, x.text) for x in parsed])
        lines = []
        for j, item in enumerate(parsed):
            line = kept.get(j)
            if line is None:
                line = Line(self._new_id(), item.speaker, item.text)
            lines.append(replace(line, speaker=item.speaker, text=item.text, source=item.source))
        self.lines = lines
        self.script = str(text)

    def speakers(self) -> list[str]:
        return speakers(ScriptLine(i, x.speaker, x.text) for i, x in enumerate(self.lines))

    def line(self, line_id: str) -> Line:
        """The line with `line_id`, else `InvalidRequest("line_unknown")`."""
        for line in self.lines:
            if line.id == line_id:
                return line
        raise InvalidRequest("line_unknown", f"there is no line {line_id!r} in this project; pick one of its lines "
                             "(the script may have changed since)", line=str(line_id))

    def edit_line(self, line_id: str, text: str) -> Line:
        """Change what a line says (the script is updated in place); its old takes stay, and the next render
        makes a take of the new text. A locked line refuses: unlock it first."""
        line = self._unlocked(line_id, "edit")
        words = " ".join(str(text or "").split())
        if not words:
            raise InvalidRequest("text_empty", "the new text of the line is empty; type what the line should say")
        self.script = replace_line(self.script, line.source, line.speaker, words)
        line.text = words
        parsed = parse_script(self.script)
        if len(parsed) == len(self.lines):  # keep each line's place in the script text current
            for item, other in zip(parsed, self.lines):
                other.source = item.source
        return line

    def lock(self, line_id: str, on: bool = True) -> Line:
        """Lock a line's chosen take (rendering and edits leave it alone) or unlock it."""
        line = self.line(line_id)
        if on and line.take is None:
            raise InvalidRequest("nothing_to_lock", f"line {line_id} has no take yet; render it before locking it",
                                 line=line_id)
        line.locked = bool(on)
        return line

    def choose(self, line_id: str, take: int) -> Line:
        """Make take number `take` the line's chosen take (used by the mix)."""
        line = self._unlocked(line_id, "choose another take of")
        if not any(t.number == take for t in line.takes):
            numbers = ", ".join(str(t.number) for t in line.takes) or "none yet"
            raise InvalidRequest("take_unknown", f"line {line_id} has no take {take}; its takes: {numbers}",
                                 line=line_id, take=take)
        line.chosen = int(take)
        return line

    def needs_render(self, line: Line) -> bool:
        """Whether `line` lacks an up-to-date take: none chosen, or the chosen one says other words, was made in
        another voice or lost its file. Locked lines never need one."""
        take = line.take
        if line.locked:
            return False
        if take is None or take.text != line.text or not self.take_path(take).is_file():
            return True
        return bool(take.voice) and take.voice != self.voice_for(line.speaker).identity()

    # --- voices ------------------------------------------------------------------------------------

    def voice_for(self, speaker: str) -> VoiceChoice:
        return self.voices.get(speaker, VoiceChoice())

    def set_voice(self, name: str, choice: VoiceChoice, sample_audio: Audio | None = None,
                  memory: VoiceMemory | None = None) -> VoiceChoice:
        """Give `name` a voice; a sample recording is stored in `voices/`. `memory` also remembers it for later
        projects. Raises `InvalidRequest` for a name no line speaks or a sample without its recording."""
        if name not in self.speakers():
            raise InvalidRequest("speaker_unknown", f"no line of the script is spoken by {name!r}; speakers: "
                                 f"{', '.join(self.speakers())}", speaker=name)
        if choice.kind == "sample":
            if sample_audio is not None:
                file = f"{_slug(name)}_{audio_hash(sample_audio)[:10]}.flac"  # a new recording, a new name
                self.voices_dir.mkdir(parents=True, exist_ok=True)
                write_atomic(self.voices_dir / file, encode(sample_audio.samples, sample_audio.sample_rate, "flac"))
                choice = replace(choice, value=file)
            elif not choice.value or not (self.voices_dir / Path(choice.value).name).is_file():
                raise InvalidRequest("voice_sample_missing", f"give a sample recording of {name}'s voice (upload or "
                                     "record one)", speaker=name)
        self.voices[name] = choice
        if memory is not None:
            memory.remember(name, choice, sample_audio if choice.kind == "sample" else None)
        return choice

    def sample_audio(self, speaker: str) -> Audio | None:
        """The stored sample recording of `speaker` (None unless its voice is a sample that exists)."""
        choice = self.voice_for(speaker)
        if choice.kind != "sample" or not choice.value:
            return None
        path = self.voices_dir / Path(choice.value).name
        return read_audio(path, what="sample recording") if path.is_file() else None

    # --- takes -------------------------------------------------------------------------------------

    def take_path(self, take: Take) -> Path:
        return self.takes_dir / Path(take.file).name

    def take_audio(self, take: Take) -> Audio:
        path = self.take_path(take)
        if not path.is_file():
            raise InvalidRequest("take_missing", f"the audio of take {take.number} ({take.file}) is missing from the "
                                 "project's takes folder; render the line again", take=take.number)
        return read_audio(path, what="take", limits=OWN_AUDIO_LIMITS)  # the app's own file: hours allowed

    def add_take(self, line: Line, samples, rate: int, seed: int, cues: list[Cue], check: dict,
                 attempts: int) -> Take:
        """Store new audio as the line's next take (written atomically) and choose it."""
        number = max((t.number for t in line.takes), default=0) + 1
        file = f"{line.id}_{number:03d}.{TAKE_FORMAT}"
        self.takes_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(self.takes_dir / file, encode(samples, rate, TAKE_FORMAT))
        take = Take(number, int(seed), line.text, file, len(samples) / rate if rate else 0.0, list(cues), check,
                    attempts, self.voice_for(line.speaker).identity())
        line.takes.append(take)
        line.chosen = number
        return take

    # --- helpers -----------------------------------------------------------------------------------

    def _unlocked(self, line_id: str, action: str) -> Line:
        line = self.line(line_id)
        if line.locked:
            raise InvalidRequest("line_locked", f"line {line_id} is locked; unlock it to {action} it", line=line_id)
        return line

    def _new_id(self) -> str:
        line_id = f"L{self.next_id:04d}"
        self.next_id += 1
        return line_id


def _slug(name: str) -> str:
    """A file-name-safe form of a speaker's name (letters of any script kept)."""
    slug = re.sub(r"[^\w-]+", "_", name.strip(), flags=re.UNICODE).strip("_")
    return slug[:40] or "voice"


def _continued(old: list[Line], new_keys: list[tuple[str, str]]) -> dict[int, Line]:
    """New line index -> the old line it continues: equal lines in order, and a locked line replaced in place.

    The common head and tail are matched directly (an edit usually touches a few lines); difflib's matcher,
    quadratic on long runs of equal lines, only sees the changed middle, and a middle too big for it is
    matched line by line in place."""
    old_keys = [(x.speaker, x.text) for x in old]
    head = 0
    while head < min(len(old_keys), len(new_keys)) and old_keys[head] == new_keys[head]:
        head += 1
    tail = 0
    while tail < min(len(old_keys), len(new_keys)) - head and old_keys[-1 - tail] == new_keys[-1 - tail]:
        tail += 1
    kept = {k: old[k] for k in range(head)}
    kept.update({len(new_keys) - 1 - k: old[len(old) - 1 - k] for k in range(tail)})
    old_middle, new_middle = old_keys[head:len(old_keys) - tail], new_keys[head:len(new_keys) - tail]
    if len(old_middle) * len(new_middle) > _MAX_MATCH_CELLS:
        opcodes = [("replace", 0, len(old_middle), 0, len(new_middle))]
    else:
        opcodes = SequenceMatcher(None, old_middle, new_middle, autojunk=False).get_opcodes()
    for tag, i1, i2, j1, j2 in opcodes:
        for k in range(min(i2 - i1, j2 - j1) if tag in ("equal", "replace") else 0):
            line = old[head + i1 + k]
            if tag == "equal" or line.locked or old_middle[i1 + k] == new_middle[j1 + k]:
                kept[head + j1 + k] = line
    return kept

