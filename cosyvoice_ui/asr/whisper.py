"""Whisper through `transformers`: a Hugging Face Whisper folder → text, in the language given or detected.

Recordings up to 30 s (every prompt) are one window; longer ones go through the library's sequential long-form
decoding. The language is detected first when not given, so the caller learns which one was heard.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np

from ..errors import CheckpointError, InvalidRequest
from ..openmp import release_threads
from .signal import ASR_RATE

log = logging.getLogger(__name__)

WINDOW_FRAMES = 3000  # one 30 s Whisper window of 10 ms feature frames
MAX_NEW_TOKENS = 440  # the decoder holds 448 positions, four of them the prompt (sot, language, task, notimestamps)


def _token_budget(seconds: float) -> int:
    """New tokens allowed for `seconds` of speech: generous (byte-level BPE spends up to 3 tokens on a CJK
    character), but bounded so a model stuck repeating itself stops early on a short prompt."""
    return int(min(MAX_NEW_TOKENS, 32 + 20 * seconds))


class WhisperRecognizer:
    """A loaded Whisper checkpoint. `transcribe` is serialised (one decode at a time per model)."""

    def __init__(self, folder: Path, device: str | None = None) -> None:
        import torch
        from transformers import WhisperForConditionalGeneration, WhisperProcessor
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()  # no deprecation chatter or progress bars from the library
        hf_logging.disable_progress_bar()
        self.folder = Path(folder)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.dtype = torch.float16 if self.device.startswith("cuda") else torch.float32
        try:
            self.processor = WhisperProcessor.from_pretrained(str(self.folder))
            model = WhisperForConditionalGeneration.from_pretrained(str(self.folder), dtype=self.dtype,
                                                                    use_safetensors=True)
        except (OSError, ValueError, KeyError) as exc:
            raise CheckpointError(f"the speech recogniser {self.folder.name} cannot be read ({type(exc).__name__}); "
                                  "download it again") from exc
        self.model = model.to(self.device).eval()
        generation = self.model.generation_config
        self.languages: dict[str, int] = {tag.strip("<|>"): i for tag, i in
                                          (getattr(generation, "lang_to_id", None) or {}).items()}
        self.multilingual = bool(getattr(generation, "is_multilingual", False)) and bool(self.languages)
        self._lock = threading.Lock()

    def _features(self, samples: np.ndarray):
        """Log-mel features: one padded 30 s window, or every frame of a longer recording (with its mask)."""
        if len(samples) <= ASR_RATE * 30:
            batch = self.processor.feature_extractor(samples, sampling_rate=ASR_RATE, return_tensors="pt")
            return batch.input_features, None
        batch = self.processor.feature_extractor(samples, sampling_rate=ASR_RATE, return_tensors="pt",
                                                 truncation=False, padding="longest", return_attention_mask=True)
        return batch.input_features, batch.attention_mask

    def detect_language(self, features) -> str:
        """The language code Whisper hears in the first window (e.g. "en", "zh")."""
        import torch

        with torch.inference_mode():
            token = int(self.model.detect_language(features[..., :WINDOW_FRAMES].to(self.device, self.dtype))[0])
        by_id = {i: code for code, i in self.languages.items()}
        return by_id.get(token, "en")

    def transcribe(self, samples: np.ndarray, language: str | None = None) -> tuple[str, str]:
        """(text, language code) of 16 kHz mono `samples`; `language` None detects it."""
        import torch

        if language is not None and self.multilingual and language not in self.languages:
            raise InvalidRequest("asr_language_unknown", f"{self.folder.name} does not know the language "
                                 f"{language!r}; leave the language empty to detect it", language=language)
        if language not in (None, "en") and not self.multilingual:
            raise InvalidRequest("asr_language_unsupported", f"{self.folder.name} understands only English; "
                                 "download a multilingual Whisper: python -m cosyvoice_ui download whisper-small",
                                 language=language)
        with self._lock:
            features, mask = self._features(samples)
            if not self.multilingual:
                language = "en"
            elif language is None:
                language = self.detect_language(features)
            kwargs: dict[str, object] = {"max_new_tokens": _token_budget(len(samples) / ASR_RATE)}
            if self.multilingual:
                kwargs.update(language=language, task="transcribe")
            if mask is not None:  # long-form: the library walks the windows on predicted timestamps
                kwargs.update(attention_mask=mask.to(self.device), return_timestamps=True,
                              condition_on_prev_tokens=False, max_new_tokens=MAX_NEW_TOKENS)
            try:
                with torch.inference_mode():
                    out = self.model.generate(features.to(self.device, self.dtype), **kwargs)
            finally:
                release_threads()  # this worker thread's OpenMP team would throttle the next job's (openmp.py)
            sequences = out["sequences"] if isinstance(out, dict) else out
            text = self.processor.tokenizer.batch_decode(sequences, skip_special_tokens=True)[0]
        return " ".join(text.split()), language

    def close(self) -> None:
        """Drop the weights (the caller gives the memory back to the OS)."""
        self.model = None  # type: ignore[assignment]
