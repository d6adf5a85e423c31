"""A Qwen2 backbone's decoding steps as recorded graphs: the same ops, without Python between them.

Why: a v2/v3 decode step is ~1,000 small ops around 121 linears. In eager mode the module calls and Python
between those ops cost about a quarter of a fast step on a 2-core CPU (issue 26: 30-36 ms eager against 21-25 ms
recorded, v3 int8). `torch.jit.trace` records the step once per loaded model, and TorchScript's executor then runs
the same ops, in the same order, on the same tensors: the numbers are the eager step's, bit for bit
(tests/models/test_step_graph.py checks equality in every precision).

The one-row graph takes the new position's input [1, 1, D], its rotary tables cos/sin [1, Dh], and per layer the
keys and values of the cached positions plus the new one (`KVCache.views_with_next`). It writes the new key and
value into that last slot, as `KVCache.append` would, and attends over all of them. Only the key length varies
between calls; one row and one position are fixed, and so is the activation dtype it was recorded with. A graph of
B rows does the same for B decodes stepped together (`Qwen2Encoder.forward_rows`, continuous batching), each row
at its own position; one graph per row count.

Not here: prefills (many positions a call, where Python is a small share; they run eagerly), CUDA
(benchmarks/gpu_v3.py has a static cache and CUDA graphs there). A graph holds the layers as they were when it was
recorded, so whatever re-lays the weights drops it first (`SpeechTokenLM`'s layout methods do) and records again
after.
"""

from __future__ import annotations

import logging
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from .decode_cache import KVCache
from .qwen2 import Qwen2Encoder, Qwen2Model, apply_rotary

log = logging.getLogger(__name__)

# TorchScript's executor profiles a graph's first two calls and then optimises it (~1 s for a v3 step, once).
WARM_UP_CALLS = 2


class _OneRowStep(nn.Module):
    """What is recorded: every layer and the final norm for one new position, written out as
    `Qwen2DecoderLayer.forward` and `Qwen2Attention.forward` run it for one position with a cache."""

    def __init__(self, model: Qwen2Model) -> None:
        super().__init__()
        self.layers = model.layers
        self.norm = model.norm

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: list[torch.Tensor],
                values: list[torch.Tensor]) -> torch.Tensor:
        for layer, all_keys, all_values in zip(self.layers, keys, values):
            attn = layer.self_attn
            q, k, v = attn._project_qkv(layer.input_layernorm(x))
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
            all_keys[:, :, -1:] = k  # the new position's slot (what KVCache.append writes)
            all_values[:, :, -1:] = v
            out = F.scaled_dot_product_attention(q, all_keys, all_values, attn_mask=None, is_causal=False,
                                                 enable_gqa=attn.n_heads != attn.n_kv)
            x = x + attn.o_proj(out.transpose(1, 2).reshape(1, 1, attn.n_heads * attn.head_dim))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.norm(x)


class _RowsStep(nn.Module):
    """What is recorded for `rows` decodes stepped together: `Qwen2Model.forward_rows` written out (projections
    and MLPs on all rows, attention per row over its own keys and values). keys/values: per layer, then per row."""

    def __init__(self, model: Qwen2Model, rows: int) -> None:
        super().__init__()
        self.layers = model.layers
        self.norm = model.norm
        self.rows = rows

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: list[torch.Tensor],
                values: list[torch.Tensor]) -> torch.Tensor:
        cos, sin = cos[:, None], sin[:, None]
        for index, layer in enumerate(self.layers):
            attn = layer.self_attn
            q, k, v = attn._project_qkv(layer.input_layernorm(x))
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
            outs = []
            for row in range(self.rows):
                all_keys, all_values = keys[index * self.rows + row], values[index * self.rows + row]
                all_keys[:, :, -1:] = k[row : row + 1]
                all_values[:, :, -1:] = v[row : row + 1]
                outs.append(F.scaled_dot_product_attention(q[row : row + 1], all_keys, all_values,
                                                           enable_gqa=attn.n_heads != attn.n_kv))
            out = torch.cat(outs)
            x = x + attn.o_proj(out.transpose(1, 2).reshape(self.rows, 1, attn.n_heads * attn.head_dim))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.norm(x)


class StepGraph:
    """A recorded one-row step of one `Qwen2Model` (see the module docstring). Not an `nn.Module` attribute of the
    backbone on purpose: it shares the layers' tensors and must not add to its modules or state dict. A copy of
    the backbone (`copy.deepcopy`) gets no graph: the copy's layers are other tensors."""

    def __init__(self, model: Qwen2Model, graph: torch.jit.ScriptModule, dtype: torch.dtype, rows: int) -> None:
        self.model = model
        self.graph = graph
        self.dtype = dtype
        self.rows = rows

    @classmethod
    def record(cls, model: Qwen2Model, rows: int = 1) -> StepGraph | None:
        """Trace `model`'s step of `rows` rows (one: `forward_step`'s numbers; more: `forward_rows`') on a CPU;
        None (the eager step stays) where tracing fails."""
        dtype = model.norm.weight.dtype
        attn = model.layers[0].self_attn if len(model.layers) else None
        if attn is None or model.norm.weight.device.type != "cpu":
            return None
        length = 4  # any: only the key length varies between calls, and the graph does not fix it
        x = torch.zeros(rows, 1, model.cfg.hidden_size, dtype=dtype)
        cos, sin = model.rotary_emb(length, 1, dtype)
        if rows > 1:  # one table per row: [rows, 1, Dh]
            cos, sin = cos.expand(rows, 1, -1).contiguous(), sin.expand(rows, 1, -1).contiguous()
        keys = [torch.zeros(1, layer.self_attn.n_kv, length + 1, layer.self_attn.head_dim, dtype=dtype)
                for layer in model.layers for _ in range(rows)]
        values = [torch.zeros_like(k) for k in keys]
        step = _OneRowStep(model) if rows == 1 else _RowsStep(model, rows)
        try:
            with warnings.catch_warnings(), torch.inference_mode():
                # TorchScript warns that it is in maintenance mode, and that a one-row layer's branch on its row
                # count is recorded as taken: that is what this graph is for.
                warnings.simplefilter("ignore")
                graph = torch.jit.trace(step, (x, cos, sin, keys, values), check_trace=False)
                for _ in range(WARM_UP_CALLS):  # the executor's profiling runs, here rather than in a first request
                    graph(x, cos, sin, keys, values)
        except (RuntimeError, TypeError, ValueError) as exc:  # an exotic layer: decode eagerly
            log.warning("the decode step could not be recorded (%s); decoding eagerly", exc)
            return None
        return cls(model, graph, dtype, rows)

    def usable(self, xs: torch.Tensor) -> bool:
        """Whether a step with `xs` [B, T, D] can take the graph: its row count, one position, the recorded dtype,
        no autograd."""
        return (xs.size(0) == self.rows and xs.size(1) == 1 and xs.dtype == self.dtype
                and not torch.is_grad_enabled())

    def step(self, xs: torch.Tensor, layers: list[KVCache]) -> torch.Tensor | None:
        """xs [1, 1, D] after the positions in `layers` → [1, 1, D], each layer's cache advanced by one; None
        (nothing written) where a cache cannot take the position in place yet, and the eager step must run."""
        views = [cache.views_with_next() for cache in layers]
        if any(view is None for view in views):
            return None
        cos, sin = self.model.rotary_emb(layers[0].length, 1, xs.dtype)
        out = self.graph(xs, cos, sin, [k for k, _ in views], [v for _, v in views])  # type: ignore[misc]
        for cache in layers:
            cache.advance()
        return out

    def step_rows(self, xs: torch.Tensor, caches: list[list[KVCache]]) -> torch.Tensor | None:
        """xs [B, 1, D], row i after the positions in caches[i] (its layers' caches) → [B, 1, D], each advanced
        by one; None (nothing written) where a cache cannot take the position in place yet."""
        views = [[cache.views_with_next() for cache in layers] for layers in caches]
        if any(view is None for row in views for view in row):
            return None
        tables = [self.model.rotary_emb(layers[0].length, 1, xs.dtype) for layers in caches]
        cos, sin = torch.stack([c for c, _ in tables]), torch.stack([s for _, s in tables])
        keys = [views[row][layer][0] for layer in range(len(caches[0])) for row in range(len(caches))]
        values = [views[row][layer][1] for layer in range(len(caches[0])) for row in range(len(caches))]
        out = self.graph(xs, cos, sin, keys, values)
        for layers in caches:
            for cache in layers:
                cache.advance()
        return out

    def __deepcopy__(self, memo: dict) -> None:
        return None

    def __reduce__(self):  # pickled with its model: dropped, as by a copy
        return (type(None), ())


def record_step(encoder: object) -> bool:
    """Record `encoder`'s one-row decoding step where it is a Qwen2 backbone on a CPU (`Qwen2Encoder.forward_step`
    then takes it); True when it now does. Call it after the weights' last re-layout."""
    if not isinstance(encoder, Qwen2Encoder):
        return False
    encoder.step_graph = StepGraph.record(encoder.model.model)
    return encoder.step_graph is not None


def record_rows(encoder: object, width: int) -> int:
    """Record `encoder`'s steps of 2 .. `width` rows (`Qwen2Encoder.forward_rows` takes them), as `record_step`
    does for one; returns how many row counts now take a graph. Each costs a trace (~2.5 s for v3 on 2 cores)."""
    if not isinstance(encoder, Qwen2Encoder):
        return 0
    graphs = encoder.rows_graphs  # a re-layout meanwhile (`drop_step`) starts a new table: this one is dropped
    for rows in range(2, width + 1):
        if rows not in graphs:
            graph = StepGraph.record(encoder.model.model, rows)
            if graph is None:
                break
            graphs[rows] = graph
    return len(graphs) if graphs is encoder.rows_graphs else 0
