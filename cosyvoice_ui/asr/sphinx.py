"""pocketsphinx: the offline English recogniser that needs no download (its wheel carries the en-us acoustic
model, language model and dictionary). Rough, but enough to fill a transcript box for a user to correct.

The decoder runs in a child process (`sphinx_worker.py`): pocketsphinx holds Python's GIL while it decodes, which
stalled the whole server for as long as the speech lasted."""

from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np

from ..errors import RecognizerFailed
from .signal import ASR_RATE

LANGUAGE = "en"
WORKER = Path(__file__).with_name("sphinx_worker.py")
HEADER_SIZE = 5  # sphinx_worker.HEADER: a status byte and a 4-byte length
log = logging.getLogger(__name__)


def sphinx_installed() -> bool:
    """True when the pocketsphinx package can be imported (checked without importing it)."""
    return importlib.util.find_spec("pocketsphinx") is not None


class SphinxRecognizer:
    """One pocketsphinx decoder with the bundled US English model, in a worker process; `transcribe` is
    serialised. A worker that dies is started again for the next recording."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._worker: subprocess.Popen | None = None
        with self._lock:
            self._start()

    def transcribe(self, samples: np.ndarray) -> str:
        """The words heard in 16 kHz mono float `samples` as a sentence (the model writes lower-case words
        without punctuation: the first letter and the pronoun "I" are capitalised and a full stop added)."""
        pcm = (np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0) * 32767).astype("<i2").tobytes()
        with self._lock:
            if self._worker is None or self._worker.poll() is not None:
                self._start()
            worker = self._worker
            try:
                worker.stdin.write(b"\0" + len(pcm).to_bytes(4, "little") + pcm)
                worker.stdin.flush()
                ok, answer = self._answer(worker)
            except (OSError, ValueError):  # the pipe broke: the worker died while decoding
                ok, answer = False, "the worker process ended"
            if not ok:  # a fresh worker for the next recording, whatever state this one is in
                self._stop()
        if not ok:
            log.warning("pocketsphinx failed: %s", answer)
            raise RecognizerFailed("the offline recogniser (pocketsphinx) failed on this recording; try again, or "
                                   "type the transcript")
        words = answer.split()
        if not words:
            return ""
        words = ["I" + w[1:] if w == "i" or w.startswith("i'") else w for w in words]
        text = " ".join(words)
        return text[0].upper() + text[1:] + "."

    def close(self) -> None:
        with self._lock:
            self._stop()

    # --- the worker ---------------------------------------------------------------------------------

    def _start(self) -> None:
        self._worker = subprocess.Popen([sys.executable, str(WORKER), str(ASR_RATE)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        ok, answer = self._answer(self._worker)
        if not ok:
            self._stop()
            log.warning("pocketsphinx did not start: %s", answer)
            raise RecognizerFailed("the offline recogniser (pocketsphinx) could not start; reinstall it with: "
                                   "pip install pocketsphinx==5.1.1")

    @staticmethod
    def _answer(worker: subprocess.Popen) -> tuple[bool, str]:
        """The worker's next frame: (ok, text); (False, why) where its output ends first."""
        header = _read(worker.stdout, HEADER_SIZE)
        if header is None:
            return False, "the worker process ended"
        data = _read(worker.stdout, int.from_bytes(header[1:], "little"))
        if data is None:
            return False, "the worker process ended"
        return header[0] == 0, data.decode("utf-8", "replace")

    def _stop(self) -> None:
        worker, self._worker = self._worker, None
        if worker is None:
            return
        for pipe in (worker.stdin, worker.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        try:
            worker.wait(5)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def _read(stream, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
