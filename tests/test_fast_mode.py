"""precision="fast" and "extra-fast" end to end on tiny models: what they report, that they apply their
settings (extra-fast: no classifier-free guidance, one estimator row), and that they still produce sane audio;
stock stays stock."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cosyvoice_ui import Mode, SynthesisRequest, load_engine
from cosyvoice_ui.cosyvoice.precision import bf16_matrix_units, settings_for
from cosyvoice_ui.errors import ConfigError
from cosyvoice_ui.testing.signals import voice_clip

REQUEST = SynthesisRequest(Mode.ZERO_SHOT, text="A quick test of the fast mode.", prompt_audio=voice_clip(4.0),
                           prompt_text="A prompt transcript.", seed=4)


@pytest.fixture(scope="module")
def fast_engine(tiny_base: Path):
    return load_engine(tiny_base, device="cpu", precision="fast")


def test_fast_engine_says_what_it_changed(fast_engine) -> None:
    precision = fast_engine.info.precision
    assert precision.mode == "fast"
    steps = settings_for("fast").n_timesteps
    assert precision.llm.startswith("int8") and precision.flow_steps == steps
    assert precision.flow_prompt_seconds == 3.0 and precision.flow_guidance is True
    assert precision.bf16_hift == precision.bf16_flow  # both follow the CPU's native bf16
    assert fast_engine.n_timesteps == steps and fast_engine.flow_prompt_seconds == 3.0
    assert fast_engine.flow.decoder.inference_cfg_rate > 0


def test_fast_engine_synthesises_plausible_audio(fast_engine) -> None:
    chunks = list(fast_engine.synthesize(REQUEST))
    wave = np.concatenate([c.samples for c in chunks])
    assert chunks[-1].final and len(wave) > 0.2 * 22050
    assert np.all(np.isfinite(wave)) and 0 < np.abs(wave).max() <= 0.99 + 1e-6


def test_stock_engine_is_stock_and_explicit_steps_win(tiny_base: Path) -> None:
    stock = load_engine(tiny_base, device="cpu")
    assert stock.info.precision.mode == "stock" and stock.flow_prompt_seconds is None
    assert stock.n_timesteps is None  # the yaml's 10
    fast3 = load_engine(tiny_base, device="cpu", precision="fast", n_timesteps=3)
    assert fast3.n_timesteps == 3 and fast3.info.precision.flow_steps == 3


def test_unknown_precision_is_a_config_error(tiny_base: Path) -> None:
    with pytest.raises(ConfigError, match="stock, fast"):
        load_engine(tiny_base, device="cpu", precision="turbo")


def test_extra_fast_v3_drops_guidance_and_still_speaks(tiny_v3: Path) -> None:
    engine = load_engine(tiny_v3, device="cpu", precision="extra-fast")
    precision = engine.info.precision
    assert precision.mode == "extra-fast" and precision.flow_guidance is False
    assert precision.llm.startswith("int4 grouped") and precision.flow_steps == settings_for("extra-fast").n_timesteps
    # The DiT takes int8 linears in both fast modes, or bf16 where the CPU has bf16 matrix units (faster there).
    assert precision.bf16_flow if bf16_matrix_units() else precision.int8_flow
    assert engine.flow.decoder.inference_cfg_rate == 0
    rows = []  # the estimator's batch per call: 1 without guidance (2 with it)
    hook = engine.flow.decoder.estimator.register_forward_pre_hook(lambda module, args: rows.append(args[0].size(0)))
    try:
        chunks = list(engine.synthesize(SynthesisRequest(Mode.ZERO_SHOT, text="Hello there.",
                                                         prompt_audio=voice_clip(4.0),
                                                         prompt_text="A prompt transcript.", seed=4)))
    finally:
        hook.remove()
    wave = np.concatenate([c.samples for c in chunks])
    assert chunks[-1].final and len(wave) > 0.1 * engine.info.sample_rate
    assert np.all(np.isfinite(wave)) and 0 < np.abs(wave).max() <= 0.99 + 1e-6
    assert rows and set(rows) == {1}
