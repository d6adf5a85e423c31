"""A Qwen2 backbone's (and v1's LLM encoder's) decoding steps as recorded graphs: the same ops, without Python
between them.

Why: a v2/v3 decode step is ~1,000 small ops around 121 linears. In eager mode the module calls and Python
between those ops cost about a quarter of a fast step on a 2-core CPU (issue 26: 30-36 ms eager against 21-25 ms
recorded, v3 int8). `torch.jit.trace` records the step once per loaded model, and TorchScript's executor then runs
the same ops, in the same order, on the same tensors: the numbers are the eager step's, bit for bit
(tests/models/test_step_graph.py checks equality in every precision).

What is recorded is the model's own `Qwen2Model.step_rows`, for one row (`forward_step` of one position) and, with
a batch width, for 2..width rows (`forward_rows`, continuous batching): one graph per row count. It takes tensors
and lists only: the new positions' inputs, their rotary tables, and per layer and row the keys and values of the
cached positions plus the new slot (`KVCache.views_with_next`), which it fills. `Qwen2Model.forward_rows` prepares
those and advances the caches, with or without a graph. Only the key lengths vary between calls; the row count
and the activation dtype are fixed at recording.

v1's LLM (`transformer.Encoder`, relative positions, ~400 small ops a step) records its `step_rows` the same way,
for one row only (v1 never batches): the input layer, per layer its projected relative positions
(`RelPositionProjections.get`) and its key/value views with the new slot, and the output norm.

Not here: prefills (many positions a call, where Python is a small share; they run eagerly), CUDA
(benchmarks/gpu_v3.py has a static cache and CUDA graphs there). A graph holds the layers as they were when it was
recorded, so whatever re-lays the weights drops it first (`SpeechTokenLM`'s layout methods do) and records again
after.
"""

from __future__ import annotations

import logging
import warnings

import torch
from torch import nn

from .qwen2 import Qwen2Encoder, Qwen2Model
from .transformer import Encoder

log = logging.getLogger(__name__)

# TorchScript's executor profiles a graph's first two calls and then optimises it (~1 s for a v3 step, once).
WARM_UP_CALLS = 2


class _StepRows(nn.Module):
    """`Qwen2Model.step_rows` as a module's forward, which is what `torch.jit.trace` records."""

    def __init__(self, model: Qwen2Model) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: list[torch.Tensor],
                values: list[torch.Tensor]) -> torch.Tensor:
        return self.model.step_rows(x, cos, sin, keys, values)


class _EncoderStep(nn.Module):
    """A v1 `Encoder.step_rows` as a module's forward."""

    def __init__(self, encoder: Encoder) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, x: torch.Tensor, pos: list[torch.Tensor], keys: list[torch.Tensor],
                values: list[torch.Tensor]) -> torch.Tensor:
        return self.encoder.step_rows(x, pos, keys, values)


class StepGraph:
    """A recorded `step_rows` of one `Qwen2Model` (or v1 `Encoder`) for a fixed row count (see the module
    docstring), called as `step_rows` is. Not an `nn.Module` attribute of the backbone on purpose: it shares the
    layers' tensors and must not add to its modules or state dict. A copy of the backbone (`copy.deepcopy`,
    pickling) gets no graph: the copy's layers are other tensors."""

    def __init__(self, graph: torch.jit.ScriptModule, dtype: torch.dtype, rows: int) -> None:
        self.graph = graph
        self.dtype = dtype
        self.rows = rows

    @classmethod
    def record(cls, model: Qwen2Model, rows: int = 1) -> StepGraph | None:
        """Trace `model.step_rows` for `rows` rows on a CPU; None (the eager step stays) where tracing fails."""
        dtype = model.norm.weight.dtype
        if not len(model.layers) or model.norm.weight.device.type != "cpu":
            return None
        length = 4  # any: only the key length varies between calls, and the graph does not fix it
        x = torch.zeros(rows, 1, model.cfg.hidden_size, dtype=dtype)
        cos, sin = (table.expand(rows, 1, -1).contiguous() for table in model.rotary_emb(length, 1, dtype))
        kept = model.cache_dtype or dtype  # the caches' dtype (`Qwen2Encoder.keep_cache_in`)
        keys = [torch.zeros(1, layer.self_attn.n_kv, length + 1, layer.self_attn.head_dim, dtype=kept)
                for layer in model.layers for _ in range(rows)]
        values = [torch.zeros_like(k) for k in keys]
        return cls._trace(_StepRows(model), (x, cos, sin, keys, values), dtype, rows)

    @classmethod
    def record_encoder(cls, encoder: Encoder) -> StepGraph | None:
        """Trace a v1 encoder's `step_rows` (one position of one decode, relative positions) on a CPU; None where
        tracing fails or there is nothing to record."""
        dtype = encoder.after_norm.weight.dtype
        if not len(encoder.encoders) or encoder.after_norm.weight.device.type != "cpu":
            return None
        length = 4  # any: only the key length varies between calls
        x = torch.zeros(1, 1, encoder.cfg.input_size, dtype=dtype)
        heads = [(layer.self_attn.h, layer.self_attn.d_k) for layer in encoder.encoders]
        kept = encoder.cache_dtype or dtype  # the caches' dtype (`Encoder.keep_cache_in`)
        pos = [torch.zeros(h, length + 1, d, dtype=kept) for h, d in heads]
        keys = [torch.zeros(1, h, length + 1, d, dtype=kept) for h, d in heads]
        values = [torch.zeros_like(k) for k in keys]
        return cls._trace(_EncoderStep(encoder), (x, pos, keys, values), dtype, 1)

    @classmethod
    def _trace(cls, step: nn.Module, example: tuple, dtype: torch.dtype, rows: int) -> StepGraph | None:
        try:
            with warnings.catch_warnings(), torch.inference_mode():
                # TorchScript warns that it is in maintenance mode, and that a one-row layer's branch on its row
                # count is recorded as taken: that is what a graph per row count is for.
                warnings.simplefilter("ignore")
                graph = torch.jit.trace(step, example, check_trace=False)
                for _ in range(WARM_UP_CALLS):  # the executor's profiling runs, here rather than in a first request
                    graph(*example)
        except (RuntimeError, TypeError, ValueError) as exc:  # an exotic layer: decode eagerly
            log.warning("the decode step could not be recorded (%s); decoding eagerly", exc)
            return None
        return cls(graph, dtype, rows)

    def usable(self, xs: torch.Tensor) -> bool:
        """Whether a step with `xs` [B, T, D] can take the graph: its row count, one position, the recorded dtype,
        no autograd."""
        return (xs.size(0) == self.rows and xs.size(1) == 1 and xs.dtype == self.dtype
                and not torch.is_grad_enabled())

    def __call__(self, *args: torch.Tensor | list[torch.Tensor]) -> torch.Tensor:
        return self.graph(*args)

    def __deepcopy__(self, memo: dict) -> None:
        return None

    def __reduce__(self):  # pickled with its model: dropped, as by a copy
        return (type(None), ())


def record_step(encoder: object) -> bool:
    """Record `encoder`'s one-row decoding step where it is a Qwen2 backbone or a v1 `Encoder` on a CPU (its
    `forward_step` then takes it); True when it now does. Call it after the weights' last re-layout."""
    if isinstance(encoder, Encoder):
        graph = StepGraph.record_encoder(encoder)
    elif isinstance(encoder, Qwen2Encoder):
        graph = StepGraph.record(encoder.model.model)
    else:
        return False
    if graph is None:
        encoder.step_graphs.pop(1, None)
        return False
    encoder.step_graphs[1] = graph
    return True


def record_rows(encoder: object, width: int) -> int:
    """Record `encoder`'s steps of 2 .. `width` rows (`Qwen2Encoder.forward_rows` takes them), as `record_step`
    does for one; returns how many of those row counts now take a graph. Each costs a trace (~2.5 s for v3 on 2
    cores)."""
    if not isinstance(encoder, Qwen2Encoder):
        return 0
    graphs = encoder.step_graphs  # a re-layout meanwhile (`drop_step`) starts a new table: this one is dropped
    for rows in range(2, width + 1):
        if rows not in graphs:
            graph = StepGraph.record(encoder.model.model, rows)
            if graph is None:
                break
            graphs[rows] = graph
    return sum(rows > 1 for rows in graphs) if graphs is encoder.step_graphs else 0
