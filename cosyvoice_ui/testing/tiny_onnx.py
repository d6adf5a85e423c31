"""Tiny ONNX stand-ins for `campplus.onnx` and the S3 speech tokenizers (v1: 50 Hz; v2/v3: 25 Hz), for test
model folders.

They keep the real interfaces (input/output ranks, dtypes, frame rates) so the engine's ONNX code
path runs unchanged, but compute something cheap and deterministic from the features:
- CAM++ stand-in: mean over time → linear → tanh, [1, T, 80] → [1, 192];
- tokenizer stand-in: stride-2 conv over the log-mel (50 Hz like v1) → argmax over a small codebook
  → lookup of a token id in [0, 4096), output int32 [1, 1, F/2] like v1.
Built with `onnx.helper` (no exporter, no onnxscript).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _save(graph, path: Path) -> None:
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="cosyvoice_ui.testing")
    model.ir_version = 8  # readable by every onnxruntime we support
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def write_campplus(path: str | Path, seed: int = 0, embed_dim: int = 192, n_mels: int = 80) -> None:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((n_mels, embed_dim)) / np.sqrt(n_mels)).astype(np.float32)
    nodes = [
        helper.make_node("ReduceMean", ["input"], ["pooled"], axes=[1], keepdims=0),
        helper.make_node("MatMul", ["pooled", "weight"], ["projected"]),
        helper.make_node("Tanh", ["projected"], ["embedding"]),
    ]
    graph = helper.make_graph(
        nodes,
        "campplus_standin",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, "T", n_mels])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, [1, embed_dim])],
        initializer=[numpy_helper.from_array(weight, "weight")],
    )
    _save(graph, Path(path))


def write_speech_tokenizer_v1(path: str | Path, seed: int = 0, vocab: int = 4096, codebook: int = 64,
                              n_mels: int = 128) -> None:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed + 1)
    conv_w = (rng.standard_normal((codebook, n_mels, 2)) / np.sqrt(2 * n_mels)).astype(np.float32)
    table = rng.integers(0, vocab, size=codebook).astype(np.int64)
    nodes = [
        helper.make_node("Conv", ["feats", "conv_w"], ["scores"], strides=[2], kernel_shape=[2]),
        helper.make_node("ArgMax", ["scores"], ["codes"], axis=1, keepdims=1),  # [1, 1, F/2] int64
        helper.make_node("Gather", ["table", "codes"], ["ids"], axis=0),
        helper.make_node("Cast", ["ids"], ["indices"], to=TensorProto.INT32),
    ]
    graph = helper.make_graph(
        nodes,
        "speech_tokenizer_v1_standin",
        [helper.make_tensor_value_info("feats", TensorProto.FLOAT, [1, n_mels, "F"]),
         helper.make_tensor_value_info("feats_length", TensorProto.INT32, [1])],
        [helper.make_tensor_value_info("indices", TensorProto.INT32, [1, 1, "L"])],
        initializer=[numpy_helper.from_array(conv_w, "conv_w"), numpy_helper.from_array(table, "table")],
    )
    _save(graph, Path(path))


def write_speech_tokenizer_v2(path: str | Path, seed: int = 0, vocab: int = 6561, codebook: int = 64,
                              n_mels: int = 128) -> None:
    """The v2/v3 tokenizer stand-in: 25 Hz (stride-4 conv over the 100 Hz log-mel), ids in [0, 6561),
    output int32 [1, L] (the same two inputs as v1's, addressed by position)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed + 2)
    conv_w = (rng.standard_normal((codebook, n_mels, 4)) / np.sqrt(4 * n_mels)).astype(np.float32)
    table = rng.integers(0, vocab, size=codebook).astype(np.int64)
    nodes = [
        helper.make_node("Conv", ["feats", "conv_w"], ["scores"], strides=[4], kernel_shape=[4]),
        helper.make_node("ArgMax", ["scores"], ["codes"], axis=1, keepdims=0),  # [1, F/4] int64
        helper.make_node("Gather", ["table", "codes"], ["ids"], axis=0),
        helper.make_node("Cast", ["ids"], ["indices"], to=TensorProto.INT32),
    ]
    graph = helper.make_graph(
        nodes,
        "speech_tokenizer_v2_standin",
        [helper.make_tensor_value_info("feats", TensorProto.FLOAT, [1, n_mels, "F"]),
         helper.make_tensor_value_info("feats_length", TensorProto.INT32, [1])],
        [helper.make_tensor_value_info("indices", TensorProto.INT32, [1, "L"])],
        initializer=[numpy_helper.from_array(conv_w, "conv_w"), numpy_helper.from_array(table, "table")],
    )
    _save(graph, Path(path))
