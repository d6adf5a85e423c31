"""Reading any audio or video file ffmpeg can open, within a door's `AudioLimits`: for doors that check files
rather than take voice samples (the watermark detector).

What soundfile reads (WAV, FLAC, MP3, OGG) goes through `audio_read.decode` as everywhere. Anything else (AAC,
M4A, Opus in Matroska, a video's sound track, ...) is decoded by ffmpeg to mono float32 at a fixed rate, read from
its pipe block by block under the same running cap: past the door's length it is stopped and refused, so a file
that hides its length costs one block more than the cap. ffmpeg gets a file (a container's index may sit at its
end), may use only the file protocol and the demuxers of ordinary media files (no playlists that name other files
or URLs), and has a time limit.
"""

from __future__ import annotations

import logging
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np

from .audio_read import AudioLimits, check_length, decode
from .errors import InvalidRequest
from .types import Audio

log = logging.getLogger(__name__)

FFMPEG_RATE = 48000  # what ffmpeg decodes to when soundfile cannot read the file
FFMPEG_TIMEOUT_S = 120.0
BLOCK_BYTES = 1 << 18  # 64 Ki float32 samples per read
# Demuxers of media files that hold their own sound (no HLS, DASH, concat or other lists of files and URLs).
DEMUXERS = ("mov", "matroska", "webm", "ogg", "mp3", "wav", "flac", "aac", "aiff", "caf", "avi", "asf", "mpegts",
            "amr", "w64", "wv", "ape", "au", "flv", "mpeg")


def read_media(source: str | Path | bytes, what: str, limits: AudioLimits, rate: int = FFMPEG_RATE) -> Audio:
    """A file path or file bytes → mono float32 `Audio`, reading no more than `limits` allow (soundfile's rate for
    what it reads, else `rate` through ffmpeg)."""
    try:
        samples, sample_rate = decode(source, what, limits)
        return Audio(samples=samples, sample_rate=sample_rate)
    except InvalidRequest as exc:
        if exc.code != "audio_unreadable":
            raise
        refused = exc
    from .audio import ffmpeg_path

    binary = ffmpeg_path()
    if binary is None:
        raise InvalidRequest("audio_unreadable", f"{refused.message} (other formats need ffmpeg, which is not "
                             "installed here)", what=what)
    if isinstance(source, (bytes, bytearray)):
        if not source:
            raise refused
        with tempfile.NamedTemporaryFile(prefix="cosyvoice-media-", suffix=".bin") as handle:
            handle.write(source)
            handle.flush()
            samples = _ffmpeg_decode(binary, Path(handle.name), what, limits, rate)
    else:
        path = Path(source)
        if not path.is_file():
            raise refused
        samples = _ffmpeg_decode(binary, path, what, limits, rate)
    return Audio(samples=samples, sample_rate=rate)


def _ffmpeg_decode(binary: str, path: Path, what: str, limits: AudioLimits, rate: int) -> np.ndarray:
    cap = limits.frames_cap(rate, 1)
    command = [binary, "-nostdin", "-hide_banner", "-loglevel", "error", "-protocol_whitelist", "file",
               "-format_whitelist", ",".join(DEMUXERS), "-i", f"file:{path.resolve()}", "-map", "0:a:0", "-vn",
               "-sn", "-dn", "-ac", "1", "-ar", str(rate), "-f", "f32le", "pipe:1"]
    out = np.empty(0, np.float32)
    done = 0
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL)
    watchdog = threading.Timer(FFMPEG_TIMEOUT_S, process.kill)  # a decoder that stalls is stopped
    watchdog.start()
    try:
        pending = b""
        while block := process.stdout.read(BLOCK_BYTES):
            pending += block
            usable = len(pending) - len(pending) % 4
            values = np.frombuffer(pending[:usable], dtype="<f4")
            pending = pending[usable:]
            end = done + len(values)
            if end > cap:
                check_length(end, 1, rate, what, limits, more=True)  # raises: past a limit the cap stands for
            if end > len(out):
                grown = np.empty(min(cap, max(end, 2 * len(out))), np.float32)
                grown[:done] = out[:done]
                out = grown
            out[done:end] = values
            done = end
        code = process.wait()
    finally:
        watchdog.cancel()
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
    if code != 0 or done == 0:
        log.info("ffmpeg could not read a %s (exit %s, %d samples)", what, code, done)
        raise InvalidRequest("audio_unreadable", f"the {what} could not be read as audio or video (not a media "
                             "file, damaged, without a sound track, or too slow to decode); send an audio file "
                             "(WAV, FLAC, MP3, OGG, M4A, ...) or a video with sound", what=what)
    return out[:done]
