"""The finished piece: the chosen takes in script order with silence between them, one stem per speaker,
and subtitles whose times come from the same sample counts as the mix (so they match it exactly).

Each take is scaled to one loudness first, so speakers sit at the same level. Stems are the full length of
the mix, silent where others speak: added together they give the mix.

Nothing here imports torch.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..audio import DEFAULT_LUFS, check_format, encode, normalize_loudness
from ..errors import InvalidRequest
from ..files import write_atomic
from .project import Project
from ..serving.subtitles import Cue, check_subtitle_format, render, shift


@dataclass(frozen=True)
class Placed:
    """One chosen take placed in the mix: its speaker, its samples and where they start (in samples)."""

    line_id: str
    speaker: str
    samples: np.ndarray
    start: int
    cues: list[Cue]


def layout(project: Project, loudness: float | None = DEFAULT_LUFS) -> tuple[list[Placed], int, int]:
    """The chosen takes with their start sample, the mix's rate and its length in samples.

    Raises `InvalidRequest("lines_missing")` when some line has no take yet. Takes made at another rate (the
    model changed) are resampled to the rate most takes have.
    """
    missing = [line.id for line in project.lines if line.take is None]
    if missing:
        raise InvalidRequest("lines_missing", f"{len(missing)} line(s) have no take yet (first: {missing[0]}); render "
                             "the project before mixing it", count=len(missing), line=missing[0])
    audios = [project.take_audio(line.take) for line in project.lines]
    rate = Counter(a.sample_rate for a in audios).most_common(1)[0][0]
    gap = int(round(max(0.0, float(project.settings.gap_s)) * rate))
    placed, position = [], 0
    for index, (line, audio) in enumerate(zip(project.lines, audios)):
        samples = _resampled(audio.samples, audio.sample_rate, rate)
        if loudness is not None:
            samples = normalize_loudness(samples, rate, loudness)
        if index:
            position += gap
        # The take's cues keep their seconds; a resampled take's last cue ends at its new length.
        length_s = len(samples) / rate
        cues = [Cue(c.start, min(c.end, length_s), c.text, c.speaker or line.speaker) for c in line.take.cues]
        placed.append(Placed(line.id, line.speaker, samples, position, shift(cues, position / rate)))
        position += len(samples)
    return placed, rate, position


def mix(project: Project, loudness: float | None = DEFAULT_LUFS) -> tuple[np.ndarray, int, list[Cue]]:
    """The whole piece: (samples, rate, cues with speaker labels at their exact offsets)."""
    placed, rate, length = layout(project, loudness)
    out = np.zeros(length, np.float32)
    for piece in placed:
        out[piece.start:piece.start + len(piece.samples)] += piece.samples
    return out, rate, [cue for piece in placed for cue in piece.cues]


def stems(project: Project, loudness: float | None = DEFAULT_LUFS) -> dict[str, np.ndarray]:
    """One full-length track per speaker (in order of first appearance), silent where others speak."""
    placed, _, length = layout(project, loudness)
    tracks: dict[str, np.ndarray] = {}
    for piece in placed:
        track = tracks.setdefault(piece.speaker, np.zeros(length, np.float32))
        track[piece.start:piece.start + len(piece.samples)] += piece.samples
    return tracks


def export(project: Project, folder: Path | None = None, fmt: str | None = None, subtitles: tuple[str, ...] = ("srt",),
           include_stems: bool = True, loudness: float | None = DEFAULT_LUFS) -> list[Path]:
    """Write the mix, a stem per speaker (when `include_stems`) and the subtitle files to `folder` (default: the
    project's `exports/`); returns the paths written. `fmt` defaults to the project's format setting."""
    fmt = check_format(fmt or project.settings.format)
    formats = [check_subtitle_format(f) for f in subtitles]
    folder = Path(folder) if folder is not None else project.exports_dir
    samples, rate, cues = mix(project, loudness)
    folder.mkdir(parents=True, exist_ok=True)
    base = _file_name(project.name)
    written = [_write(folder / f"{base}.{fmt}", encode(samples, rate, fmt))]
    if include_stems:
        tracks = stems(project, loudness)
        for speaker, stem in stem_names(list(tracks)).items():
            written.append(_write(folder / f"{base}.{stem}.{fmt}", encode(tracks[speaker], rate, fmt)))
    for sub in formats:
        written.append(_write(folder / f"{base}.{sub}", render(cues, sub, speakers=True).encode("utf-8")))
    return written


def stem_names(speakers: list[str]) -> dict[str, str]:
    """Speaker → the file name of their stem: safe characters only, and one per speaker ("Bob!" and "Bob?" must
    not share a file). The export's and the CLI's `--stems`."""
    names: dict[str, str] = {}
    used: set[str] = set()
    for speaker in speakers:
        name = _file_name(speaker, "speaker")
        while name.casefold() in used:
            name += "_"
        used.add(name.casefold())
        names[speaker] = name
    return names


def _write(path: Path, data: bytes) -> Path:
    write_atomic(path, data)
    return path


def _file_name(name: str, fallback: str = "project") -> str:
    return re.sub(r"[^\w-]+", "_", str(name).strip(), flags=re.UNICODE).strip("_")[:60] or fallback


def _resampled(samples: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    if rate_in == rate_out or not len(samples):
        return np.asarray(samples, np.float32)
    from math import gcd

    from scipy.signal import resample_poly

    g = gcd(int(rate_in), int(rate_out))
    return resample_poly(samples, rate_out // g, rate_in // g).astype(np.float32)
