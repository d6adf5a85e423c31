"""GE2E speaker d-vectors from Resemblyzer's pretrained weights, without librosa, scipy or webrtcvad.

The `resemblyzer` wheel carries a 17 MB `pretrained.pt` (3-layer LSTM over 40 mel bands at 16 kHz,
256-d L2-normed output). Its own loader imports librosa and webrtcvad at import time; we only need
the weights, so this module reads them and re-implements the (small) inference pipeline:

    audio [N] @ any rate -> 16 kHz -> loudness up to -30 dBFS -> long pauses removed
        -> mel power spectrogram [T, 40] (25 ms window, 10 ms hop)
        -> 1.6 s partial windows (160 frames) at 1.3 per second -> LSTM -> mean of partial embeddings -> L2 norm

The pause removal is an energy gate, not WebRTC's VAD, so embeddings differ slightly from
`resemblyzer.VoiceEncoder.embed_utterance(preprocess_wav(...))`: measured against resemblyzer 0.1.4
with librosa 0.11.0 on ten 8-9 s Kokoro clips, cosine 0.995-0.999 (the mel filters and STFT agree to
1e-9 and 2e-7 relative).
"""

from __future__ import annotations

import importlib.util
import logging
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .dsp import drop_long_pauses, mel_filterbank, normalize_rms, power_spectrogram, resample

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
N_MELS = 40
N_FFT = 400  # 25 ms
HOP = 160  # 10 ms
PARTIAL_FRAMES = 160  # 1.6 s per partial utterance
PARTIALS_PER_SECOND = 1.3
MIN_COVERAGE = 0.75
TARGET_DBFS = -30.0
EMBED_DIM = 256


_THREADS_LOCK = threading.Lock()


@contextmanager
def single_torch_thread() -> Iterator[None]:
    """Run the enclosed torch ops on one thread, then restore the previous thread count.

    The encoder's LSTM steps through 160 frames of a few windows: OpenMP synchronisation costs more
    than a second thread saves, and on a busy machine it is ruinous (measured on 2 cores with other
    processes running: 5-7 s per embedding with 2 threads, 0.05 s with 1). torch's thread count is
    process-wide, so it is changed only for the duration of one forward pass.
    """
    with _THREADS_LOCK:
        previous = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(previous)


def resemblyzer_weights_path() -> Path:
    """Where the installed `resemblyzer` wheel keeps `pretrained.pt` (found without importing the package)."""
    spec = importlib.util.find_spec("resemblyzer")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("resemblyzer is not installed (pip install --no-deps resemblyzer==0.1.4)")
    return Path(next(iter(spec.submodule_search_locations))) / "pretrained.pt"


def drop_training_only_keys(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Remove GE2E's loss parameters (`similarity_weight`, `similarity_bias`).

    They scale the cosine-similarity matrix during training and play no part in inference, so the
    encoder has no such attributes; dropping them by name lets the rest load with strict=True.
    """
    return {k: v for k, v in state.items() if k not in ("similarity_weight", "similarity_bias")}


class SpeakerEncoder(nn.Module):
    """Turns a recording into a 256-d unit-norm speaker embedding (GE2E d-vector).

    Does: preprocessing (resample, loudness, pause removal), mel features, partial-window averaging.
    Does not: speaker verification thresholds or anything speaker-specific; it has no state besides
    the frozen weights. Keeps upstream attribute names (`lstm`, `linear`) so the checkpoint loads
    with strict=True.
    """

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(N_MELS, 256, 3, batch_first=True)
        self.linear = nn.Linear(256, EMBED_DIM)
        self.relu = nn.ReLU()
        self.register_buffer("mel_basis", torch.from_numpy(mel_filterbank(SAMPLE_RATE, N_FFT, N_MELS)), persistent=False)

    @classmethod
    def from_resemblyzer(cls, path: Path | None = None) -> SpeakerEncoder:
        """Build the encoder and load Resemblyzer's weights (the installed wheel's unless `path`)."""
        path = path if path is not None else resemblyzer_weights_path()
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        encoder = cls()
        encoder.load_state_dict(drop_training_only_keys(checkpoint["model_state"]), strict=True)
        encoder.eval()
        log.debug("loaded speaker encoder weights from %s", path.name)
        return encoder

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        """Embed a batch of partial utterances.

        Args:
            mels: [B, PARTIAL_FRAMES, N_MELS] mel power spectrogram windows.
        Returns:
            [B, EMBED_DIM] unit-norm embeddings (non-negative, as upstream's ReLU makes them).
        """
        _, (hidden, _) = self.lstm(mels)
        raw = self.relu(self.linear(hidden[-1]))
        return raw / torch.linalg.vector_norm(raw, dim=1, keepdim=True).clamp_min(1e-8)

    def preprocess(self, samples: np.ndarray, sample_rate: int) -> np.ndarray:
        """[N] audio at `sample_rate` -> [M] 16 kHz audio, loudness raised, long pauses removed."""
        wav = resample(samples, sample_rate, SAMPLE_RATE)
        wav = normalize_rms(wav, TARGET_DBFS, increase_only=True)
        return drop_long_pauses(wav, SAMPLE_RATE)

    def partial_mels(self, wav: np.ndarray) -> torch.Tensor:
        """Cut preprocessed 16 kHz audio into overlapping 1.6 s mel windows.

        Returns:
            [P, PARTIAL_FRAMES, N_MELS] float32.
        """
        n_frames = int(math.ceil((wav.size + 1) / HOP))
        step = int(round(SAMPLE_RATE / PARTIALS_PER_SECOND / HOP))
        starts = list(range(0, max(1, n_frames - PARTIAL_FRAMES + step + 1), step))
        # The last window may run past the audio; keep it only if the audio covers most of it.
        last = starts[-1]
        coverage = (wav.size - last * HOP) / (PARTIAL_FRAMES * HOP)
        if coverage < MIN_COVERAGE and len(starts) > 1:
            starts = starts[:-1]
        need = (starts[-1] + PARTIAL_FRAMES) * HOP
        if need > wav.size:
            wav = np.pad(wav, (0, need - wav.size))
        spec = torch.from_numpy(power_spectrogram(wav, N_FFT, HOP))  # [T, N_FFT//2+1]
        mel = spec @ self.mel_basis.T  # [T, N_MELS]
        return torch.stack([mel[s : s + PARTIAL_FRAMES] for s in starts])

    @torch.inference_mode()
    def embed(self, samples: np.ndarray, sample_rate: int) -> np.ndarray:
        """One recording -> [EMBED_DIM] float32 unit vector (mean of its partial embeddings, renormed)."""
        wav = self.preprocess(samples, sample_rate)
        if wav.size < HOP:
            raise ValueError("the recording is too short or silent to embed a voice")
        with single_torch_thread():
            partials = self(self.partial_mels(wav))
        mean = partials.mean(dim=0)
        return (mean / torch.linalg.vector_norm(mean).clamp_min(1e-8)).numpy().astype(np.float32)

    def embed_many(self, clips: list[tuple[np.ndarray, int]]) -> np.ndarray:
        """Several recordings of one voice -> [EMBED_DIM] unit vector (mean of per-clip embeddings)."""
        mean = np.mean([self.embed(x, sr) for x, sr in clips], axis=0)
        return (mean / max(float(np.linalg.norm(mean)), 1e-8)).astype(np.float32)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two vectors."""
    return float(np.dot(a, b) / max(float(np.linalg.norm(a) * np.linalg.norm(b)), 1e-12))
