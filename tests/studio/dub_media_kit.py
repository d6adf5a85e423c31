"""What the dubbing tests share: a test video made with ffmpeg (a test pattern over a given sound track), a
target-language SRT of 5 cues with two speakers, ffprobe's view of a file, and speech onsets found by energy."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import soundfile as sf

from cosyvoice_ui.studio.dub_media import tool

VIDEO_SECONDS = 20.0
# (start, end, speaker, the source's words (English), the target's words (Chinese))
LINES = (
    (1.0, 4.6, "Alice", "Good morning, did you sleep well last night?", "早上好，你昨晚睡得好吗？"),
    (5.2, 8.8, "Bob", "Not really, the neighbours were very loud again.", "不太好，邻居们又很吵。"),
    (9.4, 12.4, "Alice", "Then let us get some coffee first.", "那我们先去喝杯咖啡吧。"),
    (13.0, 16.2, "Bob", "Good idea, I really need one now.", "好主意，我现在真的需要。"),
    (16.8, 19.4, "Alice", "Come on, the shop opens at eight.", "走吧，店八点开门。"),
)


def srt_of(lines=LINES, target: bool = True, labels: str = "colon") -> str:
    """An SRT of `lines` in the target language (or the source's), speakers labelled "Name: " or "[Name] "."""
    blocks = []
    for number, (start, end, speaker, source, translated) in enumerate(lines, start=1):
        words = translated if target else source
        label = f"{speaker}: " if labels == "colon" else f"[{speaker}] "
        blocks.append(f"{number}\n{_stamp(start)} --> {_stamp(end)}\n{label}{words}\n")
    return "\n".join(blocks)


def _stamp(seconds: float) -> str:
    millis = int(round(seconds * 1000))
    return f"00:{millis // 60000:02d}:{millis // 1000 % 60:02d},{millis % 1000:03d}"


def make_video(path: Path, samples: np.ndarray, rate: int, seconds: float = VIDEO_SECONDS, video: bool = True,
               audio: bool = True) -> Path:
    """An MP4 of `seconds`: a 160x120 test pattern (H.264) and `samples` as its AAC sound track."""
    path = Path(path)
    wav = path.with_suffix(".source.wav")
    track = np.zeros(int(seconds * rate), np.float32)
    track[:min(len(track), len(samples))] = samples[:len(track)]
    sf.write(wav, track, rate)
    inputs = ["-f", "lavfi", "-i", f"testsrc=size=160x120:rate=10:duration={seconds}"] if video else []
    if audio:
        inputs += ["-i", str(wav)]
    codecs = (["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"] if video else []) + \
        (["-c:a", "aac", "-b:a", "96k"] if audio else [])
    subprocess.run([tool("ffmpeg"), "-hide_banner", "-loglevel", "error", "-y", *inputs, *codecs, "-t",
                    str(seconds), str(path)], check=True, capture_output=True)
    return path


def streams(path: Path) -> list[dict]:
    """ffprobe's streams of `path` (codec, size, language tag)."""
    done = subprocess.run([tool("ffprobe"), "-v", "error", "-show_entries",
                           "stream=index,codec_type,codec_name,width,height:stream_tags=language", "-of", "json",
                           str(path)], check=True, capture_output=True)
    return json.loads(done.stdout)["streams"]


def audio_track(path: Path, index: int, rate: int = 24000) -> np.ndarray:
    """Audio track `index` of `path`, mono at `rate`."""
    done = subprocess.run([tool("ffmpeg"), "-hide_banner", "-loglevel", "error", "-i", str(path), "-map",
                           f"0:a:{index}", "-ac", "1", "-ar", str(rate), "-f", "f32le", "pipe:1"], check=True,
                          capture_output=True)
    return np.frombuffer(done.stdout, dtype="<f4")


def onset(samples: np.ndarray, rate: int, after: float, until: float, floor_db: float = -40.0) -> float | None:
    """The first time in [after, until) where a 5 ms window's RMS rises above `floor_db` (re full scale)."""
    hop = int(0.005 * rate)
    begin, end = int(max(0.0, after) * rate), min(len(samples), int(until * rate))
    window = samples[begin:end]
    frames = len(window) // hop
    if frames == 0:
        return None
    rms = np.sqrt(np.mean(window[:frames * hop].astype(np.float64).reshape(frames, hop) ** 2, axis=1))
    loud = np.nonzero(20 * np.log10(np.maximum(rms, 1e-12)) > floor_db)[0]
    return None if not len(loud) else (begin + loud[0] * hop) / rate


def offset(samples: np.ndarray, rate: int, start: float, end: float, floor_db: float = -50.0) -> float | None:
    """The last time in [start, end) the 5 ms RMS is above `floor_db`: where the speech stops."""
    reversed_onset = onset(samples[::-1].copy(), rate, len(samples) / rate - end, len(samples) / rate - start,
                           floor_db)
    return None if reversed_onset is None else len(samples) / rate - reversed_onset


def check_dubbed(out: Path, source: Path, srt: Path, stems_dir: Path, lines=LINES, tolerance: float = 0.05) -> list:
    """The checks of issue 28 on a dub the CLI wrote: the video stream copied, two tagged audio tracks, every cue's
    speech starting within `tolerance` of its cue (measured on its speaker's stem, so an overrun into the next cue
    does not hide it) and ending when the adjusted SRT says. Returns the measured (onset error, end error) per cue."""
    from cosyvoice_ui.serving.subtitles import parse

    before, after = streams(source), streams(out)
    assert [s["codec_type"] for s in after] == ["video", "audio", "audio"]
    assert (after[0]["codec_name"], after[0]["width"], after[0]["height"]) == (
        before[0]["codec_name"], before[0]["width"], before[0]["height"])
    assert all(s.get("tags", {}).get("language", "und") != "und" for s in after[1:])
    spoken = parse(Path(srt).read_text(encoding="utf-8"))
    assert len(spoken) == len(lines)
    stems = {p.stem: sf.read(p, dtype="float32") for p in Path(stems_dir).iterdir()}
    errors = []
    for (start, _, speaker, *_), cue in zip(lines, spoken):
        samples, rate = stems[speaker]
        heard = onset(samples, rate, start - 0.5, start + 1.0)
        stopped = offset(samples, rate, start, cue.end + 1.0)
        assert heard is not None and stopped is not None
        errors.append((heard - start, stopped - cue.end))
        assert abs(heard - start) <= tolerance and abs(cue.start - start) <= tolerance
        assert abs(stopped - cue.end) <= tolerance, (cue, stopped, heard)
    return errors
