"""Prompt-audio features: speech tokens, speaker x-vector and prompt mel, cached by audio hash.

A voice used twice (a saved voice, an IVR prompt repeated, the same upload re-run) skips the ONNX
networks and feature extraction the second time.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

from ..config import MelConfig
from ...audio import audio_hash
from ...errors import InvalidRequest
from ...types import Audio
from . import features
from .onnx_models import MAX_TOKENIZER_SECONDS, SpeakerEncoder, SpeechTokenizer

TOKENIZER_RATE = 16000


@dataclass(frozen=True)
class PromptFeatures:
    """What the models need from a voice recording (CPU tensors, batch 1)."""

    speech_tokens: torch.Tensor  # [1, L] int64, 50 Hz for v1
    mel: torch.Tensor  # [1, T, 80] float32, time-major, at the model's mel rate
    embedding: torch.Tensor  # [1, 192] float32 CAM++ x-vector (raw; consumers L2-normalise)


class PromptEncoder:
    """Computes `PromptFeatures` for recordings; keeps the most recent ones in an LRU cache."""

    def __init__(self, speaker_encoder: SpeakerEncoder, speech_tokenizer: SpeechTokenizer, mel: MelConfig,
                 cache_entries: int = 32) -> None:
        self.speaker_encoder = speaker_encoder
        self.speech_tokenizer = speech_tokenizer
        self.mel = mel
        self._cache: OrderedDict[str, PromptFeatures] = OrderedDict()
        self._cache_entries = cache_entries
        self._lock = threading.Lock()

    @staticmethod
    def to_16k(audio: Audio) -> torch.Tensor:
        """[N'] float32 at the 16 kHz rate of the speech tokenizer and CAM++."""
        return features.resample(torch.from_numpy(audio.samples).float(), audio.sample_rate, TOKENIZER_RATE)

    def speech_tokens(self, wave: torch.Tensor) -> torch.Tensor:
        """[1, L] tokens of a 16 kHz recording; over 30 s it is tokenised in 30 s pieces (the tokenizer's limit)."""
        piece = int(MAX_TOKENIZER_SECONDS * TOKENIZER_RATE)
        tokens = []
        for start in range(0, wave.numel(), piece):
            part = wave[start : start + piece]
            if part.numel() < TOKENIZER_RATE // 10:  # a scrap under 0.1 s yields no token
                continue
            log_mel = features.whisper_log_mel(part.unsqueeze(0))
            tokens.append(self.speech_tokenizer.tokenize(log_mel.numpy()))
        if not tokens or sum(len(t) for t in tokens) == 0:
            raise InvalidRequest("audio_too_short", "the recording is too short to extract speech tokens from")
        return torch.from_numpy(np.concatenate(tokens)).long().unsqueeze(0)

    def speaker_embedding(self, wave_16k: torch.Tensor) -> torch.Tensor:
        feats = features.campplus_features(wave_16k)
        return torch.from_numpy(self.speaker_encoder.embed(feats.numpy()))

    def prompt_mel(self, audio: Audio) -> torch.Tensor:
        wave = features.resample(torch.from_numpy(audio.samples).float(), audio.sample_rate, self.mel.sampling_rate)
        return features.matcha_mel(wave.unsqueeze(0), self.mel).transpose(1, 2).contiguous()

    def encode(self, audio: Audio) -> PromptFeatures:
        key = audio_hash(audio)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        wave_16k = self.to_16k(audio)
        result = PromptFeatures(
            speech_tokens=self.speech_tokens(wave_16k),
            mel=self.prompt_mel(audio),
            embedding=self.speaker_embedding(wave_16k),
        )
        with self._lock:
            self._cache[key] = result
            while len(self._cache) > self._cache_entries:
                self._cache.popitem(last=False)
        return result
