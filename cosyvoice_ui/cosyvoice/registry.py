"""The only map from a CosyVoice family to our classes: one `FamilyBackend` per family this engine runs.

A family's facts are data in `families.py`; which of our classes build and run it is said here, once:
config parser, LLM, flow, flow estimator, vocoder and its sine generator, text tokenizer, input recipe
and streaming chunker. The upstream yaml's class paths are an allow-list: a folder whose yaml names
other classes than its family's is refused before any weight is read.

Adding a family (v2, v3): write its modules, add a `FamilyBackend` to `BACKENDS`, set `supported=True` on
its `FamilySpec`. Nothing else in the package branches on families (tests/test_family_checks.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from torch import nn

from ..errors import ConfigError
from .checkpoint import StateDict, fold_weight_norm, load_strict, strip_generator_prefix
from .config import FlowConfig, HiFTConfig, LLMConfig, ModelConfig, parse_v1
from .families import FAMILIES, V1, FamilySpec
from .frontend.tokenizer import WhisperTokenizer
from .models.estimators.unet import ConditionalDecoder
from .models.flow import MaskedDiffWithXvec
from .models.hift import HiFTGenerator
from .models.llm import TransformerLM
from .models.nsf import SineGen
from .recipes import InputRecipe, V1InputRecipe
from .streaming import Chunker, TokenToWave, stream_tokens


class TextTokenizer(Protocol):
    """Text → ids, as the family's LLM was trained (specials such as language tags are single ids)."""

    def encode(self, text: str) -> list[int]: ...

    @property
    def n_vocab(self) -> int: ...


@dataclass(frozen=True)
class UpstreamClasses:
    """The upstream class paths a family's yaml must declare (the allow-list)."""

    llm: str
    flow: str
    estimator: str
    vocoder: str


@dataclass(frozen=True)
class FamilyBackend:
    """Our classes for one family, and how they are built from its parsed config.

    Does not: read files other than through `load_*` (the loader passes the state dicts), move models to
    a device, or apply a precision (`precision.py`).
    """

    family: FamilySpec
    upstream: UpstreamClasses
    parse_config: Callable[[dict, str], ModelConfig]  # (read_yaml's data, file name for messages)
    llm: type[TransformerLM]
    flow: type[MaskedDiffWithXvec]
    estimator: type[ConditionalDecoder]
    vocoder: type[HiFTGenerator]
    sine_generator: type[SineGen]
    text_tokenizer: Callable[[Path], TextTokenizer]  # from the model folder
    input_recipe: Callable[[ModelConfig], InputRecipe]
    chunker: Chunker

    def check_classes(self, config: ModelConfig, source: str) -> None:
        """Refuse a yaml whose class paths are not this family's (a renamed or mixed-up folder)."""
        declared = {"llm": config.llm_class, "flow": config.flow_class, "estimator": config.estimator_class,
                    "vocoder": config.hift_class}
        for part, path in declared.items():
            expected = getattr(self.upstream, part)
            if path != expected:
                raise ConfigError(f"{source} declares {part} {path}, expected {expected}; the yaml does not "
                                  f"belong to a {self.family.title} folder")

    # Built from the parsed config's parts (`config.llm`, `config.flow`, `config.hift`), with random weights.

    def build_llm(self, config: LLMConfig) -> TransformerLM:
        return self.llm(config)

    def build_flow(self, config: FlowConfig) -> MaskedDiffWithXvec:
        return self.flow(config, self.estimator)

    def build_vocoder(self, config: HiFTConfig) -> HiFTGenerator:
        return self.vocoder(config, self.sine_generator)

    def load_llm(self, config: LLMConfig, state_dict: StateDict) -> TransformerLM:
        """The LLM with `llm.pt`'s weights loaded strictly, in eval mode, on the CPU."""
        return _loaded(self.build_llm(config), state_dict, "llm.pt")

    def load_flow(self, config: FlowConfig, state_dict: StateDict) -> MaskedDiffWithXvec:
        """The flow with `flow.pt`'s weights loaded strictly, in eval mode, on the CPU."""
        return _loaded(self.build_flow(config), state_dict, "flow.pt")

    def load_vocoder(self, config: HiFTConfig, state_dict: StateDict) -> HiFTGenerator:
        """The vocoder with `hift.pt`'s weights (either weight-norm spelling, with or without the GAN
        wrapper's `generator.` prefix: both occur in every generation's releases) loaded strictly."""
        return _loaded(self.build_vocoder(config), fold_weight_norm(strip_generator_prefix(state_dict)), "hift.pt")


def _loaded(module: nn.Module, state_dict: StateDict, file_name: str):
    load_strict(module, state_dict, file_name)
    return module.eval()


def _whisper_tokenizer(model_dir: Path) -> WhisperTokenizer:
    return WhisperTokenizer()  # v1's vocabulary ships with this package, not with the folder


def _v1_recipe(config: ModelConfig) -> V1InputRecipe:
    return V1InputRecipe(n_mels=config.mel.num_mels)


BACKENDS: dict[FamilySpec, FamilyBackend] = {
    V1: FamilyBackend(
        family=V1,
        upstream=UpstreamClasses(llm="cosyvoice.llm.llm.TransformerLM", flow="cosyvoice.flow.flow.MaskedDiffWithXvec",
                                 estimator="cosyvoice.flow.decoder.ConditionalDecoder",
                                 vocoder="cosyvoice.hifigan.generator.HiFTGenerator"),
        parse_config=parse_v1,
        llm=TransformerLM,
        flow=MaskedDiffWithXvec,
        estimator=ConditionalDecoder,
        vocoder=HiFTGenerator,
        sine_generator=SineGen,  # upstream's choice at 22050 Hz
        text_tokenizer=_whisper_tokenizer,
        input_recipe=_v1_recipe,
        chunker=Chunker(renderer=TokenToWave, schedule=stream_tokens),
    ),
}


def backend_for(family: FamilySpec) -> FamilyBackend:
    """The classes of `family`; ConfigError for a family this engine cannot run yet."""
    backend = BACKENDS.get(family)
    if backend is None:
        runnable = ", ".join(f.title for f in FAMILIES if f in BACKENDS)
        raise ConfigError(f"this engine has no {family.title} models yet ({family.yaml_name}); it runs {runnable}")
    return backend
