"""pocketsphinx: the offline English recogniser that needs no download (its wheel carries the en-us acoustic
model, language model and dictionary). Rough, but enough to fill a transcript box for a user to correct."""

from __future__ import annotations

import importlib.util
import threading

import numpy as np

from .signal import ASR_RATE

LANGUAGE = "en"


def sphinx_installed() -> bool:
    """True when the pocketsphinx package can be imported (checked without importing it)."""
    return importlib.util.find_spec("pocketsphinx") is not None


class SphinxRecognizer:
    """One pocketsphinx decoder with the bundled US English model; `transcribe` is serialised."""

    def __init__(self) -> None:
        import pocketsphinx

        self._decoder = pocketsphinx.Decoder(samprate=ASR_RATE, loglevel="FATAL")
        self._lock = threading.Lock()

    def transcribe(self, samples: np.ndarray) -> str:
        """The words heard in 16 kHz mono float `samples` as a sentence (the model writes lower-case words
        without punctuation: the first letter and the pronoun "I" are capitalised and a full stop added)."""
        pcm = (np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0) * 32767).astype(np.int16)
        with self._lock:
            self._decoder.start_utt()
            self._decoder.process_raw(pcm.tobytes(), full_utt=True)
            self._decoder.end_utt()
            hypothesis = self._decoder.hyp()
        words = (hypothesis.hypstr if hypothesis is not None else "").split()
        if not words:
            return ""
        words = ["I" + w[1:] if w == "i" or w.startswith("i'") else w for w in words]
        text = " ".join(words)
        return text[0].upper() + text[1:] + "."

    def close(self) -> None:
        self._decoder = None
