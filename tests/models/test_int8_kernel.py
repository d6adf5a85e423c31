"""The project's own int8 linear kernel (kernels/int8_linear.cpp) and its layer (models/int8_kernel_linear.py):
the same bits as its reference arithmetic in plain torch, a row's output independent of the rows beside it (so a
batched decode or a prefill gives each row what a one-row step gives it), its input checks, and the fast tiny
LLM on it (its batched rows against solo rows: test_decode_batcher.py). Where the kernel cannot be built (no AVX-512 VNNI, no C++
compiler) the kernel tests skip with the reason and the reference tests still run."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantLinear

from cosyvoice_ui import load_engine
from cosyvoice_ui.cosyvoice import kernels
from cosyvoice_ui.cosyvoice.kernels import pack_levels, reference_int8_linear, why_not_built
from cosyvoice_ui.cosyvoice.models.int8_kernel_linear import KernelInt8Linear, int8_linears_on_kernel
from cosyvoice_ui.cosyvoice.models.linears import int8_matrix_units, quantize_linears_int8

@pytest.fixture
def kernel_built() -> None:
    """Skips where the kernel cannot be built or loaded; built (once per process) when the first test asks, not at
    collection."""
    if not kernels.int8_linear_available():
        pytest.skip(f"the int8 kernel is not available here: {why_not_built() or 'build failed'}")


needs_kernel = pytest.mark.usefixtures("kernel_built")


def _layer(n: int, k: int, seed: int, bias: bool = True):
    g = torch.Generator().manual_seed(seed)
    levels = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g)
    scales = torch.rand(n, generator=g) * 0.01 + 1e-3
    return levels, scales, (torch.randn(n, generator=g) if bias else None)


def test_the_reference_quantises_each_row_on_its_own() -> None:
    levels, scales, bias = _layer(24, 40, 0)
    x = torch.randn(5, 40, generator=torch.Generator().manual_seed(1))
    x[2] *= 1000  # one row of a far larger range does not coarsen the others (one scale per row)
    every = reference_int8_linear(x, levels, scales, bias)
    for i in range(5):
        assert torch.equal(reference_int8_linear(x[i : i + 1], levels, scales, bias), every[i : i + 1])
    # close to the float product of the same int8 weights: 8-bit rows, ~0.4 % of a row's range per input
    exact = x @ (levels.float() * scales[:, None]).t() + bias
    assert float((every - exact).abs().max() / exact.abs().max()) < 0.02
    assert torch.equal(reference_int8_linear(torch.zeros(1, 40), levels, scales, bias), bias[None])  # zero row


def test_the_packed_layout_holds_every_value_once_zero_padded() -> None:
    levels, _, _ = _layer(21, 10, 2)
    packed = pack_levels(levels)
    assert packed.shape == (2, 3, 16, 4) and packed.dtype == torch.int8
    unpacked = packed.permute(0, 2, 1, 3).reshape(32, 12)
    assert torch.equal(unpacked[:21, :10], levels)
    assert not bool(unpacked[21:].any()) and not bool(unpacked[:, 10:].any())


@needs_kernel
# Blocks of 16 outputs: 1, 3, 72 (four streams a thread, no remainder), 10 and 7 (streams and a remainder).
@pytest.mark.parametrize("n,k", [(16, 64), (37, 70), (1152, 896), (5, 3), (40, 4864), (150, 40), (100, 1030)])
@pytest.mark.parametrize("bias", [True, False])
def test_the_kernel_gives_the_reference_bits_for_any_row_count(n: int, k: int, bias: bool) -> None:
    levels, scales, b = _layer(n, k, n + k, bias)
    op = torch.ops.cosyvoice_kernels.int8_linear
    packed, sums = pack_levels(levels), levels.sum(dim=1, dtype=torch.int32)
    x = torch.randn(33, k, generator=torch.Generator().manual_seed(3))
    threads = torch.get_num_threads()
    try:
        for count in (1, 2):  # the blocks split over one thread and over two
            torch.set_num_threads(count)
            with torch.inference_mode():
                every = op(x, packed, n, scales, sums, b)
                assert torch.equal(every, reference_int8_linear(x, levels, scales, b))
                for rows in (0, 1, 2, 3, 4, 5, 17):  # decoding steps (1-4 rows), a small batch, a prefill-like call
                    assert torch.equal(op(x[:rows], packed, n, scales, sums, b), every[:rows])
    finally:
        torch.set_num_threads(threads)


@needs_kernel
def test_the_kernel_refuses_mismatched_inputs_with_a_message() -> None:
    levels, scales, bias = _layer(16, 64, 4)
    op = torch.ops.cosyvoice_kernels.int8_linear
    packed, sums = pack_levels(levels), levels.sum(dim=1, dtype=torch.int32)
    x = torch.randn(1, 64)
    with pytest.raises(RuntimeError, match="x has 60 columns"):
        op(torch.randn(1, 60), packed, 16, scales, sums, bias)
    with pytest.raises(RuntimeError, match="float32"):
        op(x.double(), packed, 16, scales, sums, bias)
    with pytest.raises(RuntimeError, match="int8"):
        op(x, packed.float(), 16, scales, sums, bias)
    with pytest.raises(RuntimeError, match="outputs do not fit"):
        op(x, packed, 17, scales, sums, bias)
    with pytest.raises(RuntimeError, match="weight_sum"):
        op(x, packed, 16, scales, sums.long(), bias)


@needs_kernel
def test_a_layer_on_the_kernel_takes_the_dynamic_layers_own_int8_weights() -> None:
    torch.manual_seed(5)
    model = nn.Sequential(nn.Linear(96, 50), nn.Linear(50, 30, bias=False))
    reference = [(m.weight.detach().clone(), None if m.bias is None else m.bias.detach().clone()) for m in model]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_linears_int8(model)
    levels = [layer._packed_params._weight_bias()[0] for layer in model]
    assert int8_linears_on_kernel(model) == 2 and all(isinstance(m, KernelInt8Linear) for m in model)
    x = torch.randn(3, 7, 96)
    with torch.inference_mode():
        y = model(x)
        first = reference_int8_linear(x.reshape(-1, 96), levels[0].int_repr(),
                                      levels[0].q_per_channel_scales().float(), reference[0][1])
        assert torch.equal(model[0](x), first.reshape(3, 7, 50))
    assert y.shape == (3, 7, 30)
    exact = (x @ reference[0][0].t() + reference[0][1]) @ reference[1][0].t()
    assert float((y - exact).abs().max() / exact.abs().max()) < 0.05  # int8 weights and rows: close to float


@needs_kernel
def test_the_fast_llm_decodes_on_the_kernel(tiny_v3: Path) -> None:
    if int8_matrix_units():
        pytest.skip("this CPU has int8 matrix units: fast prefills there run oneDNN's kernel instead")
    engine = load_engine(tiny_v3, device="cpu", precision="fast")
    assert engine.info.precision.llm_rows.startswith("own int8 kernel")
    assert any(isinstance(m, KernelInt8Linear) for m in engine.llm.modules())
    assert not any(type(m) is DynamicQuantLinear for m in engine.llm.modules())  # every int8 layer moved
    assert engine.llm.has_decode_step()  # recorded again after the re-layout
    # Batched rows against solo rows on this engine: tests/models/test_decode_batcher.py (`rows_engine`).


def test_the_kernel_can_be_turned_off(monkeypatch) -> None:
    monkeypatch.setenv(kernels.KERNEL_ENV, "0")
    assert why_not_built() == f"{kernels.KERNEL_ENV}=0"
    monkeypatch.delenv(kernels.KERNEL_ENV)
    monkeypatch.setenv(kernels.OLD_KERNEL_ENV, "0")  # the fifteenth pass's name still works
    assert why_not_built() == f"{kernels.OLD_KERNEL_ENV}=0"
    monkeypatch.setenv(kernels.KERNEL_DIR_ENV, "/nonexistent-cache")
    assert str(kernels.kernel_dir()) == "/nonexistent-cache"


def test_a_failed_build_keeps_fbgemm_and_is_not_retried_by_every_process(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(kernels.KERNEL_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(kernels, "why_not_built", lambda: None)
    monkeypatch.setattr(kernels, "_load", lambda: (_ for _ in ()).throw(RuntimeError("x.cpp:1: error: no compiler")))
    available = kernels.built.__wrapped__  # the uncached function: a fresh process's first call
    assert available() is False
    mark = kernels.build_folder() / kernels.FAILED_MARK
    assert mark.read_text(encoding="utf-8").strip() == "x.cpp:1: error: no compiler"
    calls = []
    monkeypatch.setattr(kernels, "_load", lambda: calls.append(1))
    assert available() is False and calls == []  # the next process does not build again
    mark.unlink()
    assert available() is True and calls == [1]  # deleting the mark retries


def test_an_unwritable_cache_keeps_fbgemm(monkeypatch, tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(kernels.KERNEL_DIR_ENV, str(blocker / "kernels"))  # a folder cannot be made under a file
    monkeypatch.setattr(kernels, "why_not_built", lambda: None)
    assert kernels.built.__wrapped__() is False


def test_a_load_says_when_it_builds_the_kernel(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(kernels.KERNEL_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(kernels, "why_not_built", lambda: None)
    monkeypatch.setattr(kernels.built, "cache_info", lambda: type("Info", (), {"currsize": 0})())
    assert kernels.builds_now()  # an empty cache: the next call compiles
    (kernels.build_folder() / "cosyvoice_kernels_x.so").write_bytes(b"")
    assert not kernels.builds_now()  # built before: loaded in a moment
    monkeypatch.setattr(kernels, "why_not_built", lambda: "no C++ compiler")
    assert not kernels.builds_now()


def test_a_layer_with_zero_points_stays_on_fbgemm() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer = DynamicQuantLinear(8, 4, dtype=torch.qint8)
        layer.set_weight_bias(torch.quantize_per_tensor(torch.randn(4, 8), 0.05, 3, torch.qint8), None)
    model = nn.Sequential(layer)
    with pytest.raises(ValueError, match="zero points"):
        KernelInt8Linear.from_dynamic(layer)
    assert int8_linears_on_kernel(model) == 0 and model[0] is layer
