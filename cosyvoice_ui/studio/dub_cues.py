"""A dubbing project's cues: read from an SRT or WebVTT file, checked against the media, and fitted to their time.

Speaker labels are read as in scripts (`script.parse_script`: "Alice: text", "[Alice] text"; a WebVTT voice
"<v Alice>" too); cues without a label belong to `script.NARRATOR`.

The fit policy (`FitPolicy`, per project, optionally per cue) places a take on its cue in this order:

1. **speed** within [min_speed, max_speed] (default 0.85-1.2): the take is played faster when it is longer than
   its cue, slower when it is shorter, through ffmpeg's pitch-preserving `atempo` (`dub_media.stretch`);
2. **silence padding**: a take still shorter than its cue ends early (silence after it, up to the cue's end);
3. **overflow**: a take still longer runs on into the gap before the next cue (or to the end of the media);
4. **overrun**: a take that does not fit even then is flagged with how many seconds it runs past the next cue's
   start (or the media's end), to be regenerated, reworded or locked as it is; until then it is cut there (with a
   short fade), so two cues never speak at once and every later cue still starts on time.

Why atempo and not the model's own speed (`benchmarks/dub_stretch.py`, the offline voice, 5 English and Mandarin
sentences, December 2026): atempo gives the length asked for to the sample, where the model's speed missed it by
1.0 % (median) at 0.85 and 4.6 % (worst 5.7 %) at 1.2; atempo kept the median pitch (0 cents), the model's speed
moved it by 17.6 cents both ways; atempo took 2-4 ms per second of speech, the second synthesis 0.72-0.78 s. It
also needs no second synthesis at all (a take is rendered once and fitted afterwards, so a new fit policy costs
no model time), and works the same on every family (a CosyVoice LLM picks its own token count).

Every speech starts at its cue's start (the take's leading silence trimmed), so the adjusted subtitles are the
cue's start and the start plus the fitted length.

Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..errors import InvalidRequest
from ..serving.subtitles import Cue, parse
from .script import NARRATOR, parse_script

MAX_CUES = 5000  # a feature film has about 1,500
MIN_SPEED, MAX_SPEED = 0.5, 2.0  # what a policy may ask (atempo's range is wider; speech beyond is unusable)
SAME_SPEED = 0.02  # a factor this close to 1 is left as it is
TOLERANCE_S = 0.001  # times are compared to the millisecond the subtitle files keep


@dataclass(frozen=True)
class FitPolicy:
    """How a take is fitted to its cue (see the module)."""

    min_speed: float = 0.85
    max_speed: float = 1.2
    overflow: bool = True

    def __post_init__(self) -> None:
        low, high = float(self.min_speed), float(self.max_speed)
        if not (MIN_SPEED <= low <= 1.0 <= high <= MAX_SPEED):
            raise InvalidRequest("dub_speed_range", f"the speed range {low:g}-{high:g} is not allowed; pick a "
                                 f"lowest speed from {MIN_SPEED:g} to 1 and a highest from 1 to {MAX_SPEED:g} "
                                 "(e.g. 0.85-1.2)", min=low, max=high)

    @classmethod
    def from_dict(cls, data: dict | None) -> FitPolicy:
        data = data if isinstance(data, dict) else {}
        base = cls()
        return cls(float(data.get("min_speed", base.min_speed)), float(data.get("max_speed", base.max_speed)),
                   bool(data.get("overflow", base.overflow)))


FIT_FIELDS = ("min_speed", "max_speed", "overflow")


def cue_policy(project: FitPolicy, own: dict | None) -> FitPolicy:
    """The policy a cue is fitted with: the project's, with the fields of the cue's own fit (`DubCue.fit`) over it."""
    return FitPolicy.from_dict({**asdict(project), **(own or {})})


def own_fit(project: FitPolicy, current: dict | None, changes: dict | None, cue: int = 0) -> dict | None:
    """A cue's own fit after `changes` (some of min_speed, max_speed, overflow; None clears it, so the cue follows
    the project's again). Only the fields the cue sets are kept: the project's others still apply to it, and a
    later change of the project's reaches them. Checked as the cue will be fitted (`cue`: its number, for the
    message)."""
    if changes is None:
        return None
    if not isinstance(changes, dict):
        raise InvalidRequest("dub_fit_invalid", f"cue {cue}'s fit must be an object of min_speed, max_speed and "
                             "overflow (or null for the project's fit)", cue=cue)
    unknown = sorted(str(key) for key in changes if key not in FIT_FIELDS)
    if unknown:
        raise InvalidRequest("dub_fit_invalid", f"cue {cue}'s fit has no setting {unknown[0][:40]!r}; set "
                             "min_speed, max_speed or overflow", cue=cue, field=unknown[0][:40])
    own = dict(current or {})
    for key, value in changes.items():
        if value is None:
            own.pop(key, None)
        elif key == "overflow":
            if not isinstance(value, bool):
                raise InvalidRequest("dub_fit_invalid", f"cue {cue}'s overflow must be true or false", cue=cue,
                                     field=key)
            own[key] = value
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidRequest("dub_fit_invalid", f"cue {cue}'s {key} must be a number such as 0.9", cue=cue,
                                 field=key)
        else:
            own[key] = float(value)
    try:
        cue_policy(project, own)  # refused now rather than at the export
    except InvalidRequest as exc:
        raise InvalidRequest(exc.code, f"cue {cue}: {exc.message}", **{**exc.params, "cue": cue}) from None
    return {key: own[key] for key in FIT_FIELDS if key in own} or None


@dataclass(frozen=True)
class Fit:
    """Where a take goes: played `speed` times as fast, starting at its cue's start; `seconds` is its length at
    that speed, `overflow` how far it runs past its cue's end (into the gap), `overrun` how far past the room it
    had (0 when it fits: then the take is cut there, and `placed` is what is heard)."""

    speed: float
    seconds: float
    overflow: float = 0.0
    overrun: float = 0.0

    @property
    def flagged(self) -> bool:
        return self.overrun > 0

    @property
    def placed(self) -> float:
        return self.seconds - self.overrun


def fit(take_seconds: float, cue_seconds: float, room_seconds: float, policy: FitPolicy) -> Fit:
    """The fit of a take of `take_seconds` to a cue of `cue_seconds` with `room_seconds` until the next cue's start
    (or the end of the media)."""
    if take_seconds <= 0 or cue_seconds <= 0:
        return Fit(1.0, max(0.0, take_seconds))
    wanted = take_seconds / cue_seconds
    speed = min(max(wanted, policy.min_speed), policy.max_speed)
    if abs(speed - 1.0) < SAME_SPEED:
        speed = 1.0
    seconds = take_seconds / speed
    if seconds <= cue_seconds + TOLERANCE_S:
        return Fit(speed, seconds)  # padded with silence to the cue's end
    room = max(cue_seconds, room_seconds) if policy.overflow else cue_seconds
    overflow = seconds - cue_seconds
    if seconds <= room + TOLERANCE_S:
        return Fit(speed, seconds, overflow)
    return Fit(speed, seconds, overflow, seconds - room)


@dataclass
class DubTake:
    """One rendering of a cue: `key` says what it was made from (text, voice, mode, model), `seconds` its length
    after its silent edges were trimmed."""

    number: int
    seed: int
    file: str
    seconds: float
    key: str
    text: str = ""
    check: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict) -> DubTake:
        return cls(int(data["number"]), int(data["seed"]), str(data["file"]), float(data["seconds"]),
                   str(data.get("key", "")), str(data.get("text", "")), dict(data.get("check") or {}))


@dataclass
class DubCue:
    """One cue of the table: its time (seconds), the words to speak (editable), who speaks them, and how.

    `mode`: "auto" (cross-lingual when the language changes, zero-shot with the cue's transcript when it does not),
    "cross_lingual", "zero_shot" or "instruct" (with `instruct`). `fit`: this cue's own policy (None: the
    project's). `source_text`: what the source says here, when known (a same-language dub's transcript)."""

    id: str
    start: float
    end: float
    text: str
    speaker: str = NARRATOR
    mode: str = "auto"
    instruct: str = ""
    fit: dict | None = None
    source_text: str = ""
    takes: list[DubTake] = field(default_factory=list)
    chosen: int | None = None
    locked: bool = False
    fit_result: dict | None = None  # the last export's fit: speed, seconds, overflow, overrun

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def take(self) -> DubTake | None:
        return next((t for t in self.takes if t.number == self.chosen), None)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> DubCue:
        takes = [DubTake.from_dict(t) for t in data.get("takes") or []]
        return cls(str(data["id"]), float(data["start"]), float(data["end"]), str(data["text"]),
                   str(data.get("speaker") or NARRATOR), check_mode(str(data.get("mode") or "auto")),
                   str(data.get("instruct") or ""), data.get("fit") if isinstance(data.get("fit"), dict) else None,
                   str(data.get("source_text") or ""), takes, data.get("chosen"), bool(data.get("locked")),
                   data.get("fit_result") if isinstance(data.get("fit_result"), dict) else None)


MODES = ("auto", "cross_lingual", "zero_shot", "instruct")


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise InvalidRequest("dub_mode_unknown", f"unknown cue mode {mode!r}; choose one of: {', '.join(MODES)}",
                             mode=mode, options=", ".join(MODES))
    return mode


def read_cues(text: str) -> list[DubCue]:
    """The cues of an SRT or WebVTT text, speakers read from their labels (see the module), in time order."""
    subtitles = [c for c in parse(text) if c.text.strip()]
    if not subtitles:
        raise InvalidRequest("dub_cues_empty", "the subtitle file has no cues; give an SRT or WebVTT file with "
                             "timed lines (00:00:01,000 --> 00:00:03,000 and the words)")
    if len(subtitles) > MAX_CUES:
        raise InvalidRequest("dub_too_many_cues", f"the subtitle file has {len(subtitles)} cues; at most {MAX_CUES} "
                             "are dubbed at once, so split the video", count=len(subtitles), max=MAX_CUES)
    subtitles.sort(key=lambda c: (c.start, c.end))
    return [DubCue(f"c{number:04d}", round(c.start, 3), round(c.end, 3), words, speaker)
            for number, (c, (speaker, words)) in enumerate(zip(subtitles, _speakers(subtitles)), start=1)]


def _speakers(subtitles: list[Cue]) -> list[tuple[str, str]]:
    """(speaker, words) of each cue: a WebVTT voice, else the script rule over all cues together."""
    rows = [" ".join(c.text.split()) for c in subtitles]
    try:
        lines = {line.source: line for line in parse_script("\n".join(rows))}
    except InvalidRequest:
        lines = {}
    found = []
    for number, (cue, row) in enumerate(zip(subtitles, rows)):
        line = lines.get(number)
        if cue.speaker:
            found.append((cue.speaker, row))
        elif line is not None:
            found.append((line.speaker, line.text))
        else:  # a "# ..." cue the script rule skips: spoken as written
            found.append((NARRATOR, row))
    return found


def check_cues(cues: list[DubCue], duration: float) -> None:
    """Refuse cues outside the media's length (`duration`, seconds), empty or reversed ones and overlapping ones,
    each naming the cue by its number and time."""
    previous = None
    for number, cue in enumerate(cues, start=1):
        if cue.end <= cue.start:
            raise InvalidRequest("dub_cue_empty", f"cue {number} ({_stamp(cue.start)}) ends before it starts; fix its "
                                 "times in the subtitle file", cue=number)
        if cue.start < 0 or cue.end > duration + TOLERANCE_S:
            raise InvalidRequest("dub_cue_outside", f"cue {number} ({_stamp(cue.start)} --> {_stamp(cue.end)}) is "
                                 f"outside the media, which is {duration:.2f} s long; is this the subtitle file of "
                                 "this video?", cue=number, start=cue.start, end=cue.end, duration=round(duration, 3))
        if previous is not None and cue.start < previous.end - TOLERANCE_S:
            raise InvalidRequest("dub_cues_overlap", f"cue {number} starts at {_stamp(cue.start)}, before cue "
                                 f"{number - 1} ends at {_stamp(previous.end)}; each cue is spoken on its own, so "
                                 "make them follow one another (merge them or move a time)", cue=number,
                                 start=cue.start, previous_end=previous.end)
        previous = cue


def _stamp(seconds: float) -> str:
    millis = int(round(seconds * 1000))
    minutes, rest = divmod(millis, 60_000)
    return f"{minutes // 60:02d}:{minutes % 60:02d}:{rest // 1000:02d},{rest % 1000:03d}"


def guess_language(texts: list[str]) -> str:
    """"zh" when most letters are CJK, "ja" with kana, else "en": the target's tag when none is given."""
    joined = "".join(texts)
    kana = sum(1 for ch in joined if "\u3040" <= ch <= "\u30ff")
    wide = sum(1 for ch in joined if ord(ch) > 0x2E80)
    letters = sum(1 for ch in joined if ch.isalpha()) or 1
    if kana > letters * 0.1:
        return "ja"
    return "zh" if wide > letters / 2 else "en"
