"""The two ONNX networks shipped with every CosyVoice folder: CAM++ (speaker x-vector) and the S3
speech tokenizer. Both run on onnxruntime; their tensor names are read from the files at load time
(upstream addresses them by position and the official names were never documented).

Not here: feature extraction (see `features.py`) or resampling.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ...errors import CheckpointError
from ..families import redownload_hint

log = logging.getLogger(__name__)

MAX_TOKENIZER_SECONDS = 30.0  # the S3 tokenizer was trained on at most 30 s (upstream asserts it)


def _session(path: Path, threads: int, use_cuda: bool):
    import onnxruntime as ort

    if not path.is_file():
        raise CheckpointError(f"{path.name} is missing from {path.parent.name}/ (an ONNX model every CosyVoice "
                              f"folder ships); {redownload_hint(path.parent)}")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = max(1, threads)
    options.inter_op_num_threads = 1
    providers = ["CPUExecutionProvider"]
    if use_cuda and "CUDAExecutionProvider" in ort.get_available_providers():
        providers.insert(0, "CUDAExecutionProvider")
    try:
        return ort.InferenceSession(str(path), sess_options=options, providers=providers)
    except Exception as exc:  # onnxruntime raises its own exception types for corrupt files
        log.warning("onnxruntime cannot load %s: %s: %s", path, type(exc).__name__, exc)  # its text names full paths
        raise CheckpointError(f"{path.name} in {path.parent.name}/ is damaged or truncated (onnxruntime cannot load "
                              f"it); {redownload_hint(path.parent)}") from exc


class SpeakerEncoder:
    """CAM++ x-vector: fbank features [1, T, 80] (mean-normalised) → embedding [1, 192]."""

    def __init__(self, path: str | Path, threads: int = 1, use_cuda: bool = False) -> None:
        self.session = _session(Path(path), threads, use_cuda)
        inputs = self.session.get_inputs()
        if len(inputs) != 1:
            raise CheckpointError(f"{Path(path).name}: expected one input (fbank features), found {len(inputs)}")
        self.input_name = inputs[0].name
        self.output_name = self.session.get_outputs()[0].name

    def embed(self, features: np.ndarray) -> np.ndarray:
        """features [1, T, 80] float32 → [1, 192] float32."""
        out = self.session.run([self.output_name], {self.input_name: features.astype(np.float32)})[0]
        return np.asarray(out, dtype=np.float32).reshape(1, -1)


class SpeechTokenizer:
    """S3 tokenizer: whisper log-mel [1, 128, F] (+ its length) → discrete speech tokens."""

    def __init__(self, path: str | Path, threads: int = 1, use_cuda: bool = False) -> None:
        self.session = _session(Path(path), threads, use_cuda)
        inputs = self.session.get_inputs()
        if len(inputs) != 2:
            raise CheckpointError(f"{Path(path).name}: expected two inputs (log-mel, length), found {len(inputs)}")
        self.feats_name, self.length_name = inputs[0].name, inputs[1].name
        self.output_name = self.session.get_outputs()[0].name

    def tokenize(self, log_mel: np.ndarray) -> np.ndarray:
        """log_mel [1, 128, F] float32 → tokens [L] int64."""
        length = np.array([log_mel.shape[2]], dtype=np.int32)
        out = self.session.run([self.output_name], {self.feats_name: log_mel.astype(np.float32),
                                                    self.length_name: length})[0]
        return np.asarray(out).reshape(-1).astype(np.int64)
