"""Cues from the source itself, when no subtitles are given: the speech is found by its loudness and each stretch of
it is transcribed (`serving.transcription.Transcriber`: a downloaded Whisper model, else pocketsphinx for English).

The recognisers give text without times, so the times are the speech's own: 20 ms frames louder than the file's
loudest stretch minus `RANGE_DB` (and than `FLOOR_DBFS`) are speech; pauses under `JOIN_GAP_S` are bridged,
stretches under `MIN_SPEECH_S` dropped, and a stretch longer than `MAX_CUE_S` is split at its quietest frame.
The speakers are told apart by voice when a `SpeakerSeparation` is given (`serving.transcription`: each stretch's
voice embedded, the stretches clustered): "Speaker 1", "Speaker 2", ... in the order they first speak, or
`script.NARRATOR` for every cue when one voice is heard (or no separation is given). The words are the source's
and the labels the clustering's, for the user to translate or correct in the written SRT (`cues.srt` in the
project, labelled "Speaker 1: ..." when there are several) and to give back with `--cues`.

The sound is read a minute at a time: the frames' loudness is all that is kept of the whole file.

Nothing here imports torch.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import InvalidRequest
from ..types import Audio, ProgressCallback
from .dub_cues import DubCue
from .dub_media import probe, read_clip
from .script import NARRATOR

if TYPE_CHECKING:
    from ..serving.transcription import SpeakerSeparation

log = logging.getLogger(__name__)

RATE = 16000  # what the recognisers read
FRAME_S = 0.02
READ_S = 60.0
RANGE_DB = 35.0
FLOOR_DBFS = -50.0
JOIN_GAP_S = 0.4
MIN_SPEECH_S = 0.3
MAX_CUE_S = 15.0
PAD_S = 0.1


def speech_stretches(path: Path, duration: float) -> list[tuple[float, float]]:
    """(start, end) seconds of the stretches of speech in the sound of `path` (see the module)."""
    hop = int(FRAME_S * RATE)
    levels = []
    position = 0.0
    while position < duration:
        clip = read_clip(path, position, min(READ_S, duration - position), RATE)
        frames = len(clip) // hop
        if frames == 0:
            break
        rms = np.sqrt(np.mean(clip[:frames * hop].astype(np.float64).reshape(frames, hop) ** 2, axis=1))
        levels.append(20 * np.log10(np.maximum(rms, 1e-9)))
        position += frames * FRAME_S
    if not levels:
        return []
    level = np.concatenate(levels)
    loud = level > max(FLOOR_DBFS, float(level.max()) - RANGE_DB)
    runs, start = [], None
    for index, on in enumerate(np.append(loud, False)):
        if on and start is None:
            start = index
        elif not on and start is not None:
            runs.append([start, index])
            start = None
    joined: list[list[int]] = []
    for run in runs:
        if joined and (run[0] - joined[-1][1]) * FRAME_S < JOIN_GAP_S:
            joined[-1][1] = run[1]
        else:
            joined.append(run)
    stretches = []
    for first, last in joined:
        if (last - first) * FRAME_S < MIN_SPEECH_S:
            continue
        for a, b in _split(level, first, last):
            stretches.append((a * FRAME_S, b * FRAME_S))
    padded = []
    for number, (a, b) in enumerate(stretches):
        before = padded[-1][1] if padded else 0.0
        after = stretches[number + 1][0] if number + 1 < len(stretches) else duration
        padded.append((round(max(before, a - PAD_S), 3), round(min(after, b + PAD_S, duration), 3)))
    return padded


def _split(level: np.ndarray, first: int, last: int) -> list[tuple[int, int]]:
    """[first, last) in frames, split at the quietest frame of each part's second half while over `MAX_CUE_S`."""
    longest = int(MAX_CUE_S / FRAME_S)
    parts = []
    while last - first > longest:
        middle = first + longest // 2
        cut = middle + int(np.argmin(level[middle:first + longest]))
        parts.append((first, cut))
        first = cut
    parts.append((first, last))
    return parts


def transcribed_cues(path: Path, transcriber, language: str | None = None, backend: str | None = None,
                     progress: ProgressCallback | None = None,
                     speakers: SpeakerSeparation | None = None) -> tuple[list[DubCue], str]:
    """Cues of the speech in `path`, each with the words heard (as `text` and `source_text`) and its speaker (told
    apart by `speakers`, see the module), and the language the recogniser heard ("" when it did not say). Refused
    when no speech is found."""
    from ..engine import report

    info = probe(path)
    stretches = speech_stretches(path, info.duration)
    cues, voices, heard = [], [], ""
    for number, (start, end) in enumerate(stretches, start=1):
        report(progress, "transcribe", (number - 1) / len(stretches), f"transcribing stretch {number}/"
               f"{len(stretches)}", "dub_transcribe", stretch=number, stretches=len(stretches))
        clip = read_clip(path, start, end - start, RATE)
        try:
            transcript = transcriber.transcribe(Audio(clip, RATE), language, None, backend)
        except InvalidRequest as exc:
            if exc.code in ("asr_no_speech", "asr_audio_too_short"):
                continue  # a noise, not words
            raise
        heard = heard or transcript.language
        cues.append(DubCue(f"c{len(cues) + 1:04d}", start, end, transcript.text, NARRATOR,
                           source_text=transcript.text))
        if speakers is not None:
            voices.append(speakers.embed(Audio(clip, RATE)))
    if not cues:
        raise InvalidRequest("dub_no_speech", f"no speech was found in {Path(path).name!r} to transcribe into cues; "
                             "give the subtitles with --cues", file=Path(path).name)
    if speakers is not None:
        labels = speakers.labels(voices, [cue.seconds for cue in cues])
        if len(set(labels)) > 1:  # one voice stays the narrator's: its cues.srt needs no labels to read back
            for cue, label in zip(cues, labels):
                cue.speaker = speaker_name(label)
    return cues, heard


def speaker_name(label: int) -> str:
    """The name of speaker `label` (0-based): "Speaker 1", ... (a script name: two words, no punctuation)."""
    return f"Speaker {label + 1}"
