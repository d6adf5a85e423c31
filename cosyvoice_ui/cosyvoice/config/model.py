"""`ModelConfig`: one parsed official yaml, whichever generation wrote it.

Its own module because it names the records of every generation (`hyperparameters.py`, `hyperparameters_qwen.py`),
which import nothing back: the config records form no import circle.
"""

from __future__ import annotations

from dataclasses import dataclass

from .hyperparameters import FlowConfig, HiFTConfig, LLMConfig, MelConfig
from .hyperparameters_qwen import CausalFlowConfig, ChunkingConfig, DiTFlowConfig, QwenLMConfig


@dataclass(frozen=True)
class ModelConfig:
    """Everything the engine needs from one official yaml."""

    sample_rate: int
    llm_class: str  # the yaml's upstream class paths, checked against the registry's allow-list
    flow_class: str
    estimator_class: str
    hift_class: str
    llm: LLMConfig | QwenLMConfig
    flow: FlowConfig | CausalFlowConfig | DiTFlowConfig
    hift: HiFTConfig
    mel: MelConfig
    tokenizer: dict  # the get_tokenizer arguments (v1: multilingual, num_languages; v2/v3: version, ...)
    chunking: ChunkingConfig | None = None  # token/mel framing and streaming chunk (the Qwen2-LM generations)
