"""Audio for the players: float samples become int16 here (clipped, fixed scale), so Gradio neither warns on
every result nor rescales a take by its own peak."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import soundfile as sf

from cosyvoice_ui.ui.audio_out import INT16_SCALE, player_audio

gr = pytest.importorskip("gradio")


def played(value, tmp_path, monkeypatch) -> tuple[list[warnings.WarningMessage], np.ndarray]:
    """What gr.Audio makes of `value` (the file it would serve, read back) and the warnings on the way."""
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = gr.Audio(format="wav").postprocess(value)
    samples, _ = sf.read(data.path, dtype="int16")
    return caught, samples


def test_float_samples_play_without_gradios_warning_at_their_own_level(tmp_path, monkeypatch) -> None:
    quiet = (0.1 * np.sin(np.linspace(0, 200, 24000))).astype(np.float32)
    caught, samples = played(player_audio(24000, quiet), tmp_path, monkeypatch)
    assert not [w for w in caught if issubclass(w.category, UserWarning)], [str(w.message) for w in caught]
    assert abs(int(np.abs(samples).max()) - round(0.1 * INT16_SCALE)) <= 2  # not pushed to full scale
    # The same array given as float: Gradio warns and rescales it by its peak (what the helper avoids).
    caught, raw = played((24000, quiet), tmp_path, monkeypatch)
    assert any("16-bit int" in str(w.message) for w in caught) and np.abs(raw).max() > 30000


def test_out_of_range_and_broken_samples_are_clipped() -> None:
    rate, data = player_audio(22050, np.array([0.0, 0.5, -0.5, 1.7, -3.0, np.nan, np.inf, -np.inf]))
    assert rate == 22050 and data.dtype == np.int16
    assert data.tolist() == [0, 16384, -16384, 32767, -32767, 0, 32767, -32767]


def test_int16_and_stereo_pass_through_in_shape() -> None:
    ints = np.array([1, -2, 3], dtype=np.int16)
    assert player_audio(16000, ints)[1] is ints
    stereo = np.zeros((100, 2), dtype=np.float64)
    assert player_audio(16000, stereo)[1].shape == (100, 2)
