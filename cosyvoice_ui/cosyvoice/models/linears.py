"""CPU inference layouts for `nn.Linear`s, applied in place after loading (a model's own methods pick
which of its linears; `precision.py` decides when).

* `PackedLinear`: the weight pre-packed for oneDNN's inner product. Batch-1 decoding is a matrix-vector
  product per linear, bound by how fast the weights stream from memory; torch's default (MKL) GEMV runs
  on one thread, oneDNN's packed kernel uses every intra-op thread and streams the weights ~1.4-1.8x
  faster on a 2-core x86 (and runs the prefill GEMMs faster too). Only the summation order changes.
  The stock flow's estimator takes it too: its GEMMs of hundreds of rows ran 1.35-1.55x faster packed than
  through torch's plain product on an AMD Zen 4 (issue 26, eighth pass).
* `RowBlocksLinear`: the weight row-major in the process's own memory, seen as 8 blocks of rows, so that a
  one-row product is torch's batched product, one GEMV per block spread over every intra-op thread. On an AMD
  Zen 4 MKL's plain GEMV runs on one thread whatever the thread count, and oneDNN's packed kernel streams a
  single row slower than four: blocks took 0.66-0.85x packed's time for a decoding step's linears (issue 26,
  tenth pass). Calls with more rows (a prefill) go to oneDNN on the same plain weight.
* column-major weights (Wᵀ contiguous), which MKL's GEMV streams ~1.3x faster than row-major, where
  oneDNN is unavailable; same values, shapes and state-dict keys.
* int8 dynamic quantisation (per-channel int8 weights, activations quantised per call): a quarter of
  the bytes per decoded token, different numbers.
* `Int4Linear`: 4-bit weights in groups of 32 along the input (a scale and an offset per group) on
  torch's int4 CPU kernel, bf16 activations: an eighth of the bytes, ~6 % error per layer (int8: ~1 %);
  the extra-fast precision only. That kernel is slow for many rows (a prefill: ~3x fbgemm's int8), so
  calls with more than one row go to an int8 dynamic copy of the same layer (+50 % of the int4 bytes).
* `KernelInt8Linear` (in `int8_kernel_linear.py`): the same int8 weights on this project's own AVX-512 VNNI
  kernel (`kernels/`), whose one-row products stream the weights faster than fbgemm's.
* `Int8RowsOnOneDNN`: an int8 dynamic linear whose calls with many rows (a prefill) run oneDNN's int8 GEMM
  on the same int8 weights, where the CPU has int8 matrix units (AMX): 0.43x fbgemm's time at 200 rows.
  fbgemm stays for few rows (decoding), where it is faster. Costs a second, oneDNN-packed copy of the int8
  weights.
"""

from __future__ import annotations

import copy
import functools
import os
import warnings

import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantLinear


def _linears(module: nn.Module, skip: tuple[str, ...]) -> list[tuple[str, nn.Linear]]:
    """The `nn.Linear`s under `module` with their names, except those under the child names in `skip`."""
    return [(name, m) for name, m in module.named_modules()
            if isinstance(m, nn.Linear) and not any(name == s or name.startswith(s + ".") for s in skip)]


class PackedLinear(nn.Module):
    """An `nn.Linear` for CPU inference whose weight is pre-packed in oneDNN's layout.

    Does not: train, move between devices, or keep a float copy of the weight (the packed one replaces
    it), so it is not part of any state dict: pack after loading, never before saving.
    """

    # Activations oneDNN can apply to the product's output inside the same call ("post-ops"): a separate element-wise
    # pass over a DiT feed-forward's [B, T, 4D] output cost more than the product itself in bf16 (tanh GELU: 5.6
    # against ~1.7 ms fused, issue 26, seventeenth pass). name → (oneDNN's attr, its algorithm).
    ACTIVATIONS = {"gelu": ("gelu", "none"), "gelu_tanh": ("gelu", "tanh")}

    def __init__(self, linear: nn.Linear, activation: str | None = None) -> None:
        super().__init__()
        if activation is not None and activation not in self.ACTIVATIONS:
            raise ValueError(f"unknown fused activation {activation!r}; choose one of {sorted(self.ACTIVATIONS)}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.activation = activation
        self.attr, self.algorithm = self.ACTIVATIONS[activation] if activation else ("none", "")
        weight = linear.weight.detach().contiguous()
        # No batch-size hint: oneDNN's general layout. The batch-1 hint this used to give was slower at every
        # row count measured (issue 26, 2 threads, a v3 decode step's 120 linears): 1 row 57 against 64 ms,
        # 4 rows (a batched decode step) 60 against 85 ms, 150 rows (a prefill) 340 against 425 ms.
        # Non-persistent buffers (not in a state dict), so that a recorded decoding step (step_graph.py) can hold
        # them: a traced graph takes a module's buffers, but not an opaque oneDNN tensor as a constant.
        self.register_buffer("weight_packed", torch.ops.mkldnn._reorder_linear_weight(weight), persistent=False)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., in_features] in the weight's dtype → [..., out_features]."""
        # A recorded step (step_graph.py) traces a typed call; fused layers sit only in flow estimators, never traced.
        if torch.jit.is_tracing() and self.activation is None:
            return _traceable_packed_linear()(x.contiguous(), self.weight_packed, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self.weight_packed, self.bias, self.attr, [],
                                                  self.algorithm)

    def to_linear(self) -> nn.Linear:
        """The plain `nn.Linear` this was packed from (oneDNN reorders the weight back exactly), in its dtype; a
        fused activation is not part of it (`unpack_linears` puts it back beside the layer)."""
        linear = nn.utils.skip_init(nn.Linear, self.in_features, self.out_features, bias=self.bias is not None,
                                    dtype=self.weight_packed.dtype)
        with torch.no_grad():
            linear.weight.copy_(self.weight_packed.to_dense())
            if self.bias is not None:
                linear.bias.copy_(self.bias)
        return linear.requires_grad_(False)

    def __deepcopy__(self, memo: dict) -> PackedLinear:
        # An opaque oneDNN tensor has no storage to copy: pack the copy again from the plain weight.
        return PackedLinear(self.to_linear(), self.activation)

    def extra_repr(self) -> str:
        fused = f", then {self.activation}" if self.activation else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}{fused}"


ROW_BLOCKS = 8  # 4, 8 and 16 blocks streamed alike at 2 threads (issue 26, tenth pass)


class RowBlocksLinear(nn.Module):
    """An `nn.Linear` for CPU inference whose one-row products (decoding steps) run as torch's batched product
    over blocks of the weight's rows, which spreads one GEMV over every intra-op thread where MKL's own GEMV does
    not (an AMD CPU). The weight is a private row-major copy (padded with zero rows to a whole number of
    blocks), so it does not keep a file's memory map alive. Calls with several rows (a prefill) run oneDNN's
    inner product on the same weight where oneDNN works (0.6x torch's plain product at 150 rows on the AMD
    machine), else torch's plain product.

    Does not: train, move between devices, or take part in a state dict (non-persistent buffers): apply after
    loading, never before saving; `to_linear` gives the plain layer back.
    """

    def __init__(self, linear: nn.Linear, blocks: int = ROW_BLOCKS) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        padded = -(-self.out_features // blocks) * blocks
        weight = linear.weight.detach().new_zeros(padded, self.in_features)
        weight[:self.out_features].copy_(linear.weight.detach())
        self.register_buffer("weight_blocks", weight.view(blocks, padded // blocks, self.in_features),
                             persistent=False)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone(), persistent=False)

    def plain_weight(self) -> torch.Tensor:
        """The plain [out_features, in_features] weight, a view of the blocks (no copy)."""
        return self.weight_blocks.view(-1, self.in_features)[:self.out_features]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., in_features] float32 → [..., out_features]."""
        if x.shape[:-1].numel() != 1:  # several rows: a GEMM, where blocks would not help (static under a trace)
            if not onednn_linear_works():  # probed once per process
                return nn.functional.linear(x, self.plain_weight(), self.bias)
            if torch.jit.is_tracing():  # a recorded step of several rows (step_graph.py): the same op, typed
                return _traceable_packed_linear()(x.contiguous(), self.plain_weight(), self.bias)
            return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self.plain_weight(), self.bias, "none", [], "")
        blocks = self.weight_blocks.shape[0]
        # The column as a transposed row (strides (0, 1, in)): with strides (0, 1, 1) torch's batched product
        # takes a slow path, 4-5x the time (issue 26, tenth pass).
        column = x.reshape(1, 1, self.in_features).transpose(1, 2).expand(blocks, self.in_features, 1)
        y = torch.bmm(self.weight_blocks, column).reshape(x.shape[:-1] + (-1,))[..., :self.out_features]
        return y if self.bias is None else y + self.bias

    def to_linear(self) -> nn.Linear:
        """A plain `nn.Linear` with these values, its weight a view of this layer's memory (no copy)."""
        linear = nn.utils.skip_init(nn.Linear, self.in_features, self.out_features, bias=self.bias is not None)
        linear.weight = nn.Parameter(self.plain_weight(), requires_grad=False)
        if self.bias is not None:
            linear.bias = nn.Parameter(self.bias, requires_grad=False)
        return linear.requires_grad_(False)

    def __deepcopy__(self, memo: dict) -> RowBlocksLinear:
        return RowBlocksLinear(self.to_linear(), self.weight_blocks.shape[0])

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"blocks={self.weight_blocks.shape[0]}")


_PACKED_LINEAR_SOURCE = """
def packed_linear(x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    scalars = torch.jit.annotate(List[Optional[number]], [])
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", scalars, "")
"""
_packed_linear_script = None


def _traceable_packed_linear():
    """`PackedLinear`'s op as a TorchScript function: a trace cannot record its empty `Scalar?[]` argument from
    Python, a scripted call types it. Compiled at the first trace only."""
    global _packed_linear_script
    if _packed_linear_script is None:
        _packed_linear_script = torch.jit.CompilationUnit(_PACKED_LINEAR_SOURCE).packed_linear
    return _packed_linear_script


@functools.cache  # a property of this machine and torch build: probed once per process
def onednn_linear_works() -> bool:
    """True when oneDNN's packed inner product is available and agrees with F.linear on this machine."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")):
        return False
    try:
        generator = torch.Generator().manual_seed(0)  # a private RNG: the global one stays untouched
        probe = nn.utils.skip_init(nn.Linear, 64, 48)
        with torch.no_grad():
            probe.weight.copy_(torch.randn(48, 64, generator=generator))
            probe.bias.copy_(torch.randn(48, generator=generator))
        x = torch.randn(3, 64, generator=generator)
        with torch.inference_mode():
            return bool(torch.allclose(PackedLinear(probe)(x), probe(x), atol=1e-4, rtol=1e-4))
    except (RuntimeError, TypeError):
        return False


ONE_ROW_LAYOUT_ENV = "COSYVOICE_STOCK_ONE_ROW_LAYOUT"  # "row-blocks", "packed" or "row-major": not by vendor
ONE_ROW_LAYOUTS = ("row-blocks", "packed", "row-major")


def cpu_vendor() -> str:
    """The CPU's vendor id as Linux reports it ("GenuineIntel", "AuthenticAMD", ...), or "" where unknown."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""


def one_row_layout() -> str:
    """Which layout streams float32 one-row products (a stock decoding step) fastest on this CPU, one of
    `ONE_ROW_LAYOUTS`, or what COSYVOICE_STOCK_ONE_ROW_LAYOUT says (a packed layout needs oneDNN: without it,
    row-major). Measured on stock decode steps' linears (issue 26, 2 threads): on an Intel CPU with AMX, torch's
    plain product on row-major weights (MKL's GEMV) took 0.81-0.85x oneDNN packed's time (sixth pass); on an AMD
    Zen 4, where MKL's GEMV runs on one thread, packed took 0.65-0.79x row-major's (eighth pass) and row blocks
    0.66-0.85x packed's (tenth pass: v3's 1.46 GB of linears 53 against 67 ms, v1's 0.72 GB 24 against 36 ms,
    medians of 12 alternating passes). Row blocks were not measured on an Intel CPU, so Intel keeps row-major. A load-time
    timing probe was tried in the eighth pass: on the shared AMD machine it picked the slower layout in about
    half of its runs."""
    forced = os.environ.get(ONE_ROW_LAYOUT_ENV, "").strip().lower()
    if forced in ONE_ROW_LAYOUTS:
        return "row-major" if forced == "packed" and not onednn_linear_works() else forced
    return "row-major" if cpu_vendor() == "GenuineIntel" else "row-blocks"


def _replace_linears(module: nn.Module, skip: tuple[str, ...], layout) -> int:
    """Replace the `nn.Linear`s under `module` (except the child names in `skip`) by `layout(linear)`, in place;
    returns how many."""
    targets = _linears(module, skip)
    for name, linear in targets:
        parent_name, _, child = name.rpartition(".")
        setattr(module.get_submodule(parent_name) if parent_name else module, child, layout(linear))
    return len(targets)


def row_blocks_linears(module: nn.Module, skip: tuple[str, ...] = ()) -> int:
    """Replace the `nn.Linear`s under `module` (except the child names in `skip`) by `RowBlocksLinear`s, in
    place. Returns how many were replaced."""
    return _replace_linears(module, skip, RowBlocksLinear)


def pack_linears(module: nn.Module, skip: tuple[str, ...] = ()) -> int:
    """Replace the `nn.Linear`s under `module` (except the child names in `skip`) by `PackedLinear`s,
    in place, `RowBlocksLinear`s too (one layer at a time: its blocks are freed as its packed copy is made).
    Returns how many were replaced."""
    unpack_linears(module, (RowBlocksLinear,))
    return _replace_linears(module, skip, PackedLinear)


def unpack_linears(module: nn.Module, layouts: tuple[type, ...] = ()) -> int:
    """Replace every `PackedLinear` and `RowBlocksLinear` under `module` (or only those of `layouts`) by the plain
    `nn.Linear` it was made from, in place (for a copy that is to be converted further: int8, bf16); returns how
    many."""
    layouts = layouts or (PackedLinear, RowBlocksLinear)
    targets = [(name, m) for name, m in module.named_modules() if isinstance(m, layouts)]
    for name, packed in targets:
        parent_name, _, child = name.rpartition(".")
        plain = packed.to_linear()
        if getattr(packed, "activation", None):  # the fused activation back as a module after the layer
            approximate = "tanh" if packed.activation == "gelu_tanh" else "none"
            plain = nn.Sequential(plain, nn.GELU(approximate=approximate))
        setattr(module.get_submodule(parent_name) if parent_name else module, child, plain)
    return len(targets)


def own_linear_weights(module: nn.Module, skip: tuple[str, ...] = ()) -> int:
    """Give every `nn.Linear` under `module` (except the child names in `skip`) a private, contiguous, row-major
    copy of its weight (same values, shapes and state-dict keys), in place; returns how many. A loaded weight is
    a view of the file's memory map, whose pages the loader lets go and a replaced file could change: the copy
    sits in the process's own memory. Row-major is the layout torch's plain one-row product (MKL's GEMV) reads
    fastest."""
    targets = _linears(module, skip)
    for _, linear in targets:
        linear.weight = nn.Parameter(linear.weight.detach().contiguous().clone(), requires_grad=False)
    return len(targets)


def column_major_linears(module: nn.Module) -> int:
    """Store every `nn.Linear` weight under `module` as a transposed-contiguous tensor (same values,
    same shape, strides (1, out)). Returns how many were changed. State-dict keys and shapes stay,
    so the module still saves and loads as before."""
    changed = 0
    for linear in module.modules():
        if isinstance(linear, nn.Linear) and linear.weight.is_contiguous():
            weight = linear.weight.detach()
            linear.weight = nn.Parameter(weight.t().contiguous().t(), requires_grad=False)
            changed += 1
    return changed


def quantize_linears_int8(module: nn.Module, skip: tuple[str, ...] = ()) -> int:
    """Replace the `nn.Linear`s under `module` (except the child names in `skip`) by int8 dynamic
    quantised ones, in place (CPU only): weights int8 per output channel (one scale a row: a row's error does not
    grow with another row's range, which matters once q/k/v or gate/up share one matrix; fbgemm runs it as fast
    as one scale a matrix), activations quantised per call. Returns how many were replaced."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    linears = _linears(module, skip)
    if any(linear.weight.is_meta for _, linear in linears):  # a layout to fill from a prepared copy
        for name, linear in linears:
            parent_name, _, child = name.rpartition(".")
            setattr(module.get_submodule(parent_name) if parent_name else module, child, int8_slot(linear))
        return len(linears)
    names = {name for name, _ in linears}
    with warnings.catch_warnings():
        # torch.ao.quantization is deprecated in favour of torchao, which is not a dependency here;
        # the eager dynamic path still works and is what this CPU-only mode needs.
        warnings.simplefilter("ignore")
        quantize_dynamic(module, dict.fromkeys(names, per_channel_dynamic_qconfig), dtype=torch.qint8, inplace=True)
    return len(names)


def int8_slot(linear: nn.Linear) -> nn.Module:
    """An int8 dynamic linear of `linear`'s shape whose values come later (`prepared.fill` sets its weight):
    built from a 1x1 weight, so a meta-built model's layout costs no memory."""
    with torch.device("cpu"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch deprecates creating quantized tensors; the layer still needs one
        slot = DynamicQuantLinear(1, 1, bias_=linear.bias is not None, dtype=torch.qint8)
    slot.in_features, slot.out_features = linear.in_features, linear.out_features
    return slot


INT4_GROUP = 32  # inputs per scale/offset pair: error ~6 % per layer at 32, ~7 % at 128 (Gaussian weights)


def int4_kernels_available() -> bool:
    return hasattr(torch, "_convert_weight_to_int4pack_for_cpu") and hasattr(torch.ops.aten,
                                                                              "_weight_int4pack_mm_for_cpu")


class Int4Linear(nn.Module):
    """An `nn.Linear` for CPU inference with asymmetric 4-bit weights, one (scale, offset) per group of
    `group` inputs, on torch's packed int4 kernel; activations run in bf16 and the output returns as
    float32. Batch-1 calls (decoding) use the int4 weights; calls with more rows (a prefill) use an int8
    dynamic copy (`rows`), whose GEMM is ~3x faster there. Inference only; built after loading, never
    saved. Needs out_features % 16 == 0 and in_features % group == 0 (`fits`)."""

    def __init__(self, linear: nn.Linear, group: int = INT4_GROUP) -> None:
        super().__init__()
        self.in_features, self.out_features, self.group = linear.in_features, linear.out_features, group
        w = linear.weight.detach().float()
        groups = w.reshape(self.out_features, self.in_features // group, group)
        low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
        scale = ((high - low) / 15).clamp(min=1e-8)
        levels = torch.clamp(torch.round((groups - low) / scale), 0, 15).to(torch.int32)
        self.weight_packed = torch._convert_weight_to_int4pack_for_cpu(levels.reshape_as(w), 1)
        # The kernel computes w = (level - 8) · scale + zero per group, so zero = low + 8 · scale.
        self.scales_and_zeros = torch.stack([scale.squeeze(-1).t(), (low + 8 * scale).squeeze(-1).t()],
                                            dim=-1).contiguous().to(torch.bfloat16)
        self.bias = None if linear.bias is None else linear.bias.detach().float().clone()
        self.rows = nn.Sequential(nn.Linear(self.in_features, self.out_features, bias=linear.bias is not None))
        with torch.no_grad():
            self.rows[0].weight.copy_(linear.weight)
            if linear.bias is not None:
                self.rows[0].bias.copy_(linear.bias)
        quantize_linears_int8(self.rows)
        self.int8_for_rows = True  # False: several rows run the int4 weights too (deviation measurements)

    @staticmethod
    def fits(linear: nn.Linear, group: int = INT4_GROUP) -> bool:
        return linear.out_features % 16 == 0 and linear.in_features % group == 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() != self.in_features and self.int8_for_rows:
            return self.rows(x.float())
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.weight_packed, self.group, self.scales_and_zeros)
        y = y.float().reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, group={self.group}"


def quantize_linears_int4(module: nn.Module, skip: tuple[str, ...] = (), group: int = INT4_GROUP) -> tuple[int, int]:
    """Replace the `nn.Linear`s under `module` (except the child names in `skip`) by `Int4Linear`s where
    their shape fits the kernel, and the others by int8 dynamic ones, in place (CPU only). Returns
    (int4 count, int8 count)."""
    int4 = [(name, lin) for name, lin in _linears(module, skip) if Int4Linear.fits(lin, group)]
    for name, linear in int4:
        parent_name, _, child = name.rpartition(".")
        parent = module.get_submodule(parent_name) if parent_name else module
        setattr(parent, child, Int4Linear(linear, group))
    return len(int4), quantize_linears_int8(module, skip)


INT8_ONEDNN_MIN_ROWS = 16  # fbgemm wins below (v3 LLM, 24 layers: 16 rows 19.2 against 16.0 ms; 4 rows 12.9 / 14.0)


def symmetric_int8_weights(dynamic: DynamicQuantLinear) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """An int8 dynamic linear's weights as (int8 levels [N, K], float64 scales [N], float bias or None): one scale a
    row (a per-matrix scale repeated). ValueError when they have zero points (the int8 kernels that read them take
    symmetric weights; this project's quantisation makes none)."""
    weight, bias = dynamic._packed_params._weight_bias()
    levels = weight.int_repr().contiguous()
    if weight.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
        scales, zeros = weight.q_per_channel_scales(), weight.q_per_channel_zero_points()
    else:
        scales = torch.full((levels.size(0),), weight.q_scale(), dtype=torch.float64)
        zeros = torch.full((levels.size(0),), weight.q_zero_point(), dtype=torch.long)
    if bool((zeros != 0).any()):
        raise ValueError("these int8 weights have zero points; the int8 kernels take symmetric weights")
    return levels, scales, None if bias is None else bias.detach()


class Int8RowsOnOneDNN(DynamicQuantLinear):
    """An int8 dynamic linear (torch.ao, fbgemm) that sends calls of at least `min_rows` rows to oneDNN's int8
    inner product, which runs on AMX tiles: the same per-channel (or per-tensor) int8 weights, activations
    quantised per call to uint8 over their own range (fbgemm takes a 7-bit range, so these rows are a little
    closer to float32, not the same numbers). Inference only, made after loading (and after any prepared copy is
    written) by `adopt`, which turns the loaded layer itself into one: a decoding call then costs what the plain
    layer's did (a wrapping module's extra call was ~1 ms per decode step over 121 linears), and the state-dict
    keys stay the layer's."""

    @classmethod
    def adopt(cls, dynamic: DynamicQuantLinear, min_rows: int = INT8_ONEDNN_MIN_ROWS) -> Int8RowsOnOneDNN:
        """`dynamic`, in place, now also holding its weights packed for oneDNN (a second int8 copy)."""
        levels, scales, bias = symmetric_int8_weights(dynamic)
        out_features = levels.size(0)
        packed = torch.ops.onednn.qlinear_prepack(levels, None)
        dynamic.__class__ = cls
        dynamic.min_rows = min_rows
        dynamic.weight_packed = packed
        dynamic.weight_scales = scales.float().contiguous()
        dynamic.weight_zero_points = torch.zeros(out_features, dtype=torch.long)
        dynamic.onednn_bias = None if bias is None else bias.detach().float().contiguous()
        return dynamic

    def __deepcopy__(self, memo: dict) -> Int8RowsOnOneDNN:
        """A copy with its own oneDNN copy: oneDNN's packed weights are opaque tensors that cannot be copied, so
        the plain layer is copied and packed again from its int8 weights (the same values)."""
        packed = self.__dict__.pop("weight_packed")
        self.__class__ = DynamicQuantLinear
        try:
            plain = copy.deepcopy(self, memo)
        finally:
            self.__class__ = Int8RowsOnOneDNN
            self.weight_packed = packed
        return Int8RowsOnOneDNN.adopt(plain, self.min_rows)  # its other oneDNN fields are set afresh

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features
        if rows < self.min_rows:
            return super().forward(x)
        flat = x.reshape(rows, self.in_features).float().contiguous()
        quantised = torch.quantize_per_tensor_dynamic(flat, torch.quint8, False)
        y = torch.ops.onednn.qlinear_pointwise(
            quantised.int_repr(), quantised.q_scale(), quantised.q_zero_point(), self.weight_packed,
            self.weight_scales, self.weight_zero_points, self.onednn_bias, 1.0, 0, torch.float32, "none", [], "")
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, oneDNN for {self.min_rows}+ rows"


def int8_matrix_units() -> bool:
    """True when the CPU has AMX tiles and torch's oneDNN int8 linear runs and agrees with fbgemm's here."""
    try:
        if not (torch.cpu._is_amx_tile_supported() and hasattr(torch.ops.onednn, "qlinear_pointwise")):
            return False
        generator = torch.Generator().manual_seed(0)  # a private RNG: the global one stays untouched
        probe = nn.Sequential(nn.utils.skip_init(nn.Linear, 64, 48))
        with torch.no_grad():
            probe[0].weight.copy_(torch.randn(48, 64, generator=generator))
            probe[0].bias.copy_(torch.randn(48, generator=generator))
        quantize_linears_int8(probe)
        x = torch.randn(INT8_ONEDNN_MIN_ROWS, 64, generator=generator)
        with torch.inference_mode():
            theirs = probe[0](x)
            ours = Int8RowsOnOneDNN.adopt(probe[0])(x)
        return bool((ours - theirs).abs().max() <= 0.05 * theirs.abs().max())
    except (AttributeError, RuntimeError, ValueError):
        return False


def int8_rows_on_onednn(module: nn.Module, min_rows: int = INT8_ONEDNN_MIN_ROWS) -> int:
    """Make every int8 dynamic linear under `module` an `Int8RowsOnOneDNN`, in place. Returns how many."""
    targets = [m for m in module.modules() if type(m) is DynamicQuantLinear]
    for linear in targets:
        Int8RowsOnOneDNN.adopt(linear, min_rows)
    return len(targets)

