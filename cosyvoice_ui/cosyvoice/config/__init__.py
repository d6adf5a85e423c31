"""Model configuration: the inert HyperPyYAML reader, the frozen hyperparameter records and each family's
parser (the registry says which parser a family uses)."""

from .hyperparameters import (CFMConfig, EncoderConfig, EstimatorConfig, FlowConfig, HiFTConfig, LLMConfig,
                              MelConfig, ModelConfig, SamplingConfig)
from .inert_yaml import Ref, Tagged, read_yaml
from .v1 import parse_v1

__all__ = ["CFMConfig", "EncoderConfig", "EstimatorConfig", "FlowConfig", "HiFTConfig", "LLMConfig", "MelConfig",
           "ModelConfig", "Ref", "SamplingConfig", "Tagged", "parse_v1", "read_yaml"]
