"""Loading without a second copy: modules are built with their weights left uninitialised and take the
file's tensors (`checkpoint.weights_left_uninitialised`, `load_strict(..., assign=True)`)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cosyvoice_ui.cosyvoice.checkpoint import load_strict, weights_left_uninitialised
from cosyvoice_ui.errors import CheckpointError


def test_init_fills_do_nothing_inside_the_block_and_work_again_after() -> None:
    sentinel = torch.full((4, 3), 7.0)
    with weights_left_uninitialised():
        assert nn.init.normal_(sentinel) is sentinel and torch.all(sentinel == 7.0)
        nn.init.kaiming_uniform_(sentinel)
        nn.init.zeros_(sentinel)
        assert torch.all(sentinel == 7.0)
    nn.init.zeros_(sentinel)
    assert torch.all(sentinel == 0.0)


def test_the_patch_is_undone_when_the_build_fails() -> None:
    with pytest.raises(RuntimeError), weights_left_uninitialised():
        raise RuntimeError("a broken yaml")
    t = torch.ones(3)
    nn.init.zeros_(t)
    assert torch.all(t == 0)


def test_assign_takes_the_files_tensors_and_casts_to_the_modules_dtypes() -> None:
    with weights_left_uninitialised():
        model = nn.Sequential(nn.Linear(5, 4), nn.LayerNorm(4))
    g = torch.Generator().manual_seed(0)
    sd = {"0.weight": torch.randn(4, 5, generator=g), "0.bias": torch.randn(4, generator=g).half(),
          "1.weight": torch.rand(4, generator=g), "1.bias": torch.zeros(4)}
    load_strict(model, sd, "tiny.pt", assign=True)
    assert model[0].weight.data_ptr() == sd["0.weight"].data_ptr()  # no copy
    assert model[0].bias.dtype == torch.float32 and torch.allclose(model[0].bias, sd["0.bias"].float())
    with torch.inference_mode():
        out = model(torch.randn(2, 5, generator=g))
    assert torch.isfinite(out).all()


def test_a_mismatched_file_is_still_refused_with_names() -> None:
    model = nn.Linear(5, 4)
    with pytest.raises(CheckpointError, match="missing"):
        load_strict(model, {"weight": torch.zeros(4, 5)}, "tiny.pt", assign=True)
