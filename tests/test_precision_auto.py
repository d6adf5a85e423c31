"""The default precision "auto" (issue 25): fast on a CPU, stock on a GPU, an explicit mode wins; resolved before
anything shows it (the manager's load options) and at load (the loader), so "auto" is never reported. No GPU is
needed: the device is named, or torch's CUDA check is replaced."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cosyvoice_ui.cosyvoice.precision import AUTO, CHOICES, PRECISIONS, resolve_precision
from cosyvoice_ui.serving.backends import resolve_load_options
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import LoadOptions, Settings
from cosyvoice_ui.testing.fakes import FakeEngine


@pytest.mark.parametrize(("device", "mode"), [("cpu", "fast"), ("cuda", "stock"), ("cuda:1", "stock"),
                                              ("CPU", "fast")])
def test_auto_is_fast_on_a_cpu_and_stock_on_a_gpu(device: str, mode: str) -> None:
    assert resolve_precision(AUTO, device) == mode


@pytest.mark.parametrize("explicit", PRECISIONS)
@pytest.mark.parametrize("device", ["cpu", "cuda", "auto"])
def test_an_explicit_mode_wins_on_every_device(explicit: str, device: str) -> None:
    assert resolve_precision(explicit, device) == explicit


@pytest.mark.parametrize(("gpu", "mode"), [(False, "fast"), (True, "stock")])
def test_device_auto_follows_whether_a_gpu_is_usable(monkeypatch, gpu: bool, mode: str) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    assert resolve_precision(AUTO, "auto") == mode
    assert resolve_load_options(LoadOptions()).precision == mode  # the defaults: device auto, precision auto


def test_auto_is_the_default_everywhere_and_a_choice_of_its_own() -> None:
    assert Settings().precision == LoadOptions().precision == Settings().load_options().precision == AUTO
    assert CHOICES == (AUTO, *PRECISIONS) and AUTO not in PRECISIONS  # a default, not a mode of its own


def manager_with(options: LoadOptions, seen: list[LoadOptions] | None = None) -> ModelManager:
    engine = FakeEngine()

    def load(model_id: str, opts: LoadOptions, progress) -> FakeEngine:
        if seen is not None:
            seen.append(opts)
        return engine

    return ModelManager("fake", loader=load, idle_unload_s=0, load_options=options)


def test_the_manager_shows_and_loads_the_resolved_mode() -> None:
    seen: list[LoadOptions] = []
    manager = manager_with(LoadOptions(device="cpu"), seen)
    assert manager.load_options.precision == "fast"  # what the UI radio and /health read
    with manager.job():
        pass
    assert [o.precision for o in seen] == ["fast"]  # the loader never sees "auto"
    assert manager.set_load_options(precision="fast") is False  # picking the mode in effect reloads nothing
    assert manager.loaded is not None
    assert manager.set_load_options(precision="auto") is False  # "auto" again: still fast here
    assert manager.set_load_options(precision="stock") is True and manager.load_options.precision == "stock"
    assert manager.loaded is None  # released, to load again in stock
    assert manager_with(LoadOptions(device="cuda")).load_options.precision == "stock"
    assert manager_with(LoadOptions(device="cpu", precision="extra-fast")).load_options.precision == "extra-fast"


def test_the_loader_resolves_auto_and_a_tiny_model_speaks_in_fast(tiny_sft: Path) -> None:
    """A tiny random model under auto on a CPU: fast's int8 LLM and 2 flow steps, and it speaks end to end."""
    from cosyvoice_ui.cosyvoice.engine import load_engine
    from cosyvoice_ui.types import Mode, SynthesisRequest

    engine = load_engine(tiny_sft, device="cpu", precision=AUTO)
    try:
        record = engine.info.precision
        assert record.mode == "fast" and record.llm.startswith("int8") and record.flow_steps == 2
        chunks = list(engine.synthesize(SynthesisRequest(Mode.SFT, text="Hello there.", speaker="英文女", seed=1)))
        assert sum(len(c.samples) for c in chunks) > 0
    finally:
        engine.close()
