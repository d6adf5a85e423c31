"""cosyvoice_ui: an inference engine for the official CosyVoice models, with a web app, REST API and CLI.

Public surface (importing this package loads no model and no torch):

    from cosyvoice_ui import load_engine, Mode, SynthesisRequest
    engine = load_engine("pretrained_models/CosyVoice-300M")
    for chunk in engine.synthesize(SynthesisRequest(Mode.CROSS_LINGUAL, text="Hello!", prompt_audio=audio)):
        ...
"""

from .openmp import share_cores_politely

share_cores_politely()  # before anything loads torch: OpenMP reads it once, when torch is loaded

from .cosyvoice import families as _families  # noqa: F401, E402  # light data: fills `known_models` with the checkpoints
from .engine import Engine  # noqa: E402
from .errors import Cancelled, CheckpointError, ConfigError, CosyVoiceError, InvalidRequest  # noqa: E402
from .types import Audio, AudioChunk, EngineInfo, Mode, ProgressEvent, SynthesisRequest  # noqa: E402

__all__ = [
    "Audio", "AudioChunk", "Cancelled", "CheckpointError", "ConfigError", "CosyVoiceError", "Engine", "EngineInfo",
    "InvalidRequest", "Mode", "ProgressEvent", "SynthesisRequest", "load_engine",
]


def load_engine(model_dir, device: str = "auto", progress=None, **options) -> Engine:
    """Load a model folder (see `cosyvoice_ui.cosyvoice.engine.load_engine`)."""
    from .cosyvoice.engine import load_engine as _load

    return _load(model_dir, device=device, progress=progress, **options)
