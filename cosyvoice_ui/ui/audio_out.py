"""Audio handed to a gr.Audio player as (rate, array): 16-bit samples made here.

Given float samples, Gradio converts them itself with a UserWarning on every result, and it scales each array
by its own peak: a quiet take would play louder than the file that was saved, and each streamed chunk would be
scaled differently. Clipping to [-1, 1] and scaling by the fixed 32767 keeps the player's level the file's.
"""

from __future__ import annotations

import numpy as np

INT16_SCALE = 32767


def player_audio(rate: int, samples: np.ndarray) -> tuple[int, np.ndarray]:
    """(rate, int16 samples) for gr.Audio from float samples in [-1, 1] (beyond: clipped; NaN/inf: silence or
    full scale); int16 input is passed through as it is."""
    data = np.asarray(samples)
    if data.dtype == np.int16:
        return int(rate), data
    data = np.nan_to_num(data.astype(np.float32, copy=False), nan=0.0, posinf=1.0, neginf=-1.0)
    return int(rate), np.round(np.clip(data, -1.0, 1.0) * INT16_SCALE).astype(np.int16)
