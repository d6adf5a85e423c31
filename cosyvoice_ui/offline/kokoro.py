"""Runs the Kokoro-82M int8 ONNX graph: phoneme ids + a voice style + speed -> 24 kHz audio.

Shapes:
    ids    [L] int, 1 <= L <= MAX_PHONEMES, phoneme ids without the boundary tokens
    pack   [510, 256] float32, a voice's style for every phoneme count (row L-1 is used for L ids)
    audio  [N] float32 at SAMPLE_RATE
"""

from __future__ import annotations

import logging
import os

import numpy as np

log = logging.getLogger(__name__)

SAMPLE_RATE = 24000
STYLE_DIM = 256
# The text encoder has 512 positions; two are taken by the boundary token (id 0) at each end.
MAX_PHONEMES = 510
BOUNDARY_ID = 0


class KokoroModel:
    """A loaded Kokoro-82M ONNX session.

    Does: one forward pass per call (`render`), choosing the style row that matches the input length
    as Kokoro does. Does not: text processing, chunking long inputs, trimming or joining audio
    (see `frontend` and `engine`). The graph contains no random ops, so equal inputs give equal audio.
    """

    def __init__(self, model: bytes, threads: int | None = None) -> None:
        import onnxruntime as ort  # deferred: importing onnxruntime costs time and memory

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads if threads else max(1, os.cpu_count() or 1)
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3  # onnxruntime warns about unused initializers of this export
        # Idle worker threads must not spin: voice matching runs torch (the speaker encoder) right after
        # each render, and spinning threads would take its cores (measured: LSTM 10-50x slower).
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(model, sess_options=opts, providers=["CPUExecutionProvider"])

    def render(self, ids: list[int] | np.ndarray, pack: np.ndarray, speed: float = 1.0) -> np.ndarray:
        """Synthesise one chunk.

        Args:
            ids: [L] phoneme ids (no boundary tokens), 1 <= L <= MAX_PHONEMES.
            pack: [510, 256] style pack, or a single [256] style used as is.
            speed: tempo factor (>1 is faster); the model scales its predicted durations by 1/speed.
        Returns:
            [N] float32 audio at 24 kHz.
        """
        n = len(ids)
        assert 1 <= n <= MAX_PHONEMES, f"chunk of {n} phoneme ids; the model takes 1..{MAX_PHONEMES}"
        style = pack if pack.ndim == 1 else pack[n - 1]
        tokens = np.asarray([[BOUNDARY_ID, *ids, BOUNDARY_ID]], dtype=np.int64)
        feeds = {
            "tokens": tokens,
            "style": np.asarray(style, dtype=np.float32).reshape(1, STYLE_DIM),
            "speed": np.asarray([speed], dtype=np.float32),
        }
        audio = self.session.run(None, feeds)[0]
        log.debug("kokoro: %d ids -> %d samples", n, audio.size)
        return np.asarray(audio, dtype=np.float32).reshape(-1)
