"""Model configuration: the inert HyperPyYAML reader, the frozen hyperparameter records and each family's
parser (the registry says which parser a family uses)."""

from .hyperparameters import (CFMConfig, DiTConfig, EncoderConfig, EstimatorConfig, FlowConfig, HiFTConfig,
                              LLMConfig, MelConfig, SamplingConfig)
from .hyperparameters_qwen import CausalFlowConfig, ChunkingConfig, DiTFlowConfig, QwenLMConfig
from .inert_yaml import Ref, Tagged, read_yaml
from .model import ModelConfig
from .qwen2 import Qwen2Config
from .v1 import parse_v1
from .v2 import parse_v2
from .v3 import parse_v3

__all__ = ["CFMConfig", "CausalFlowConfig", "ChunkingConfig", "DiTConfig", "DiTFlowConfig", "EncoderConfig",
           "EstimatorConfig", "FlowConfig", "HiFTConfig", "LLMConfig", "MelConfig", "ModelConfig", "Qwen2Config",
           "QwenLMConfig", "Ref", "SamplingConfig", "Tagged", "parse_v1", "parse_v2", "parse_v3", "read_yaml"]
