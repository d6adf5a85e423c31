"""The only map from a CosyVoice family to our classes: one `FamilyBackend` per family this engine runs.

A family's facts are data in `families.py`; which of our classes build and run it is said here, once:
config parser, LLM, flow, flow estimator, vocoder and its sine generator, text tokenizer, input recipe
and streaming chunker. The upstream yaml's class paths are an allow-list: a folder whose yaml names
other classes than its family's is refused before any weight is read.

Adding a family: write its modules, add a `FamilyBackend` to `BACKENDS`, set `supported=True` on its
`FamilySpec` (the checklist is in docs/ARCHITECTURE.md, "Adding a model family"; a family made at run time,
as the tests' toy one, goes through `families.register` and `register` here). Nothing else in the package
branches on families (tests/test_family_checks.py). The Qwen2-LM generations (v2, v3) build their LLM with
the folder's `CosyVoice-BlankEN/config.json` (`build_llm`'s `model_dir`) and v3's causal vocoder with upstream's
fixed NSF noise (`_causal_vocoder`). Each entry also names its family's golden-parity run (`parity`, loaded lazily).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from torch import nn

from ..errors import ConfigError
from .checkpoint import StateDict, fold_weight_norm, load_strict, strip_generator_prefix, weights_left_uninitialised
from .config import ModelConfig, Qwen2Config, parse_v1, parse_v2, parse_v3
from .families import FAMILIES, V1, V2, V3, FamilySpec
from .frontend.qwen_tokenizer import QWEN_FOLDER, QwenTokenizer
from .frontend.tokenizer import WhisperTokenizer
from .models.estimators.dit import DiT
from .models.estimators.unet import ConditionalDecoder
from .models.estimators.unet_causal import CausalConditionalDecoder
from .models.flow import MaskedDiffWithXvec
from .models.flow_causal import CausalMaskedDiffWithXvec
from .models.flow_dit import CausalMaskedDiffWithDiT
from .models.hift import HiFTGenerator
from .models.hift_causal import CausalHiFTGenerator, construction_rng_ops, upstream_fixed_noise
from .models.llm import TransformerLM
from .models.llm_qwen import CosyVoice3LM, Qwen2LM
from .models.nsf import CausalSineGen2, SineGen, SineGen2
from .recipes import InputRecipe, V1InputRecipe, V2InputRecipe, V3InputRecipe
from .streaming import Chunker, TokenToWave, stream_tokens
from .streaming_qwen import CausalVocoderStream, ChunkedVocoderStream, stream_with_lookahead


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
    llm: Callable[..., nn.Module]  # (the llm record) → a speech LLM (`TransformerLM`, `Qwen2LM`, ...)
    flow: Callable[..., nn.Module]  # (the flow record, estimator class) → a flow
    estimator: Callable[..., nn.Module]
    vocoder: Callable[..., nn.Module]  # (the hift record, sine generator class) → a vocoder
    sine_generator: type[nn.Module]
    text_tokenizer: Callable[[Path, ModelConfig], TextTokenizer]  # from the model folder and its config
    input_recipe: Callable[[ModelConfig], InputRecipe]
    chunker: Chunker
    # the LLM record completed from the folder (v2/v3: the Qwen2 backbone's config.json); None: as parsed
    llm_config: Callable[[Any, Path], Any] | None = None
    # the vocoder after construction (v3: upstream's fixed NSF noise); None: as built
    finish_vocoder: Callable[[nn.Module, ModelConfig], nn.Module] | None = None
    # the family's golden-parity run class (`parity/`), loaded only when a parity run asks; None: no goldens
    parity: Callable[[], type] | None = None

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

    def build_llm(self, config: Any, model_dir: Path | None = None) -> nn.Module:
        """config: the parsed `config.llm`; model_dir: the folder, where the family completes the record
        from it (the Qwen2 backbone's shape)."""
        if self.llm_config is not None and model_dir is not None:
            config = self.llm_config(config, model_dir)
        return self.llm(config)

    def build_flow(self, config: Any) -> nn.Module:
        return self.flow(config, self.estimator)

    def build_vocoder(self, config: Any, model: ModelConfig | None = None) -> nn.Module:
        """model: the whole parsed config, where the family finishes the vocoder from it (v3's noise)."""
        vocoder = self.vocoder(config, self.sine_generator)
        if self.finish_vocoder is not None and model is not None:
            vocoder = self.finish_vocoder(vocoder, model)
        return vocoder

    def load_llm(self, config: Any, state_dict: StateDict, model_dir: Path | None = None) -> nn.Module:
        """The LLM with `llm.pt`'s weights loaded strictly, in eval mode, on the CPU."""
        with weights_left_uninitialised():  # the file's tensors replace them (see `_loaded`)
            module = self.build_llm(config, model_dir)
        return _loaded(module, state_dict, "llm.pt")

    def load_flow(self, config: Any, state_dict: StateDict) -> nn.Module:
        """The flow with `flow.pt`'s weights loaded strictly, in eval mode, on the CPU."""
        with weights_left_uninitialised():
            module = self.build_flow(config)
        return _loaded(module, state_dict, "flow.pt")

    def load_vocoder(self, config: Any, state_dict: StateDict, model: ModelConfig | None = None) -> nn.Module:
        """The vocoder with `hift.pt`'s weights (either weight-norm spelling, with or without the GAN
        wrapper's `generator.` prefix: both occur in every generation's releases) loaded strictly."""
        with weights_left_uninitialised():
            module = self.build_vocoder(config, model)
        return _loaded(module, fold_weight_norm(strip_generator_prefix(state_dict)), "hift.pt")


def _loaded(module: nn.Module, state_dict: StateDict, file_name: str):
    # assign: the module keeps the file's tensors (one copy in memory). A caller's dict is still usable
    # for reading; the modules never write their weights in place.
    load_strict(module, state_dict, file_name, assign=True)
    return module.eval()


def _whisper_tokenizer(model_dir: Path, config: ModelConfig | None = None) -> WhisperTokenizer:
    return WhisperTokenizer()  # v1's vocabulary ships with this package, not with the folder


def _qwen_tokenizer(model_dir: Path, config: ModelConfig) -> QwenTokenizer:
    return QwenTokenizer.for_model(model_dir, config.tokenizer)


def _qwen_llm_config(config: Any, model_dir: Path) -> Any:
    """The yaml's LLM record with the backbone's shape from `CosyVoice-BlankEN/config.json`."""
    return replace(config, qwen=Qwen2Config.from_json(model_dir / QWEN_FOLDER))


# Upstream's NSF noise buffer: 300 s at the model's rate, drawn after the CFM's noise of 15000 frames (§5.5).
FIXED_NOISE_SECONDS = 300
CFM_NOISE_FRAMES = 15000


def _causal_vocoder(vocoder: CausalHiFTGenerator, config: ModelConfig) -> CausalHiFTGenerator:
    """v3: the fixed source noise upstream's constructors leave behind (`hift_causal.upstream_fixed_noise`)."""
    flow = config.flow
    ops = construction_rng_ops(config.hift, cfm_noise_shape=(1, flow.output_size, CFM_NOISE_FRAMES),
                               flow_vocab_size=flow.vocab_size, flow_input_size=flow.input_size,
                               flow_output_size=flow.output_size, spk_embed_dim=flow.spk_embed_dim)
    vocoder.set_fixed_noise(upstream_fixed_noise(ops, config.hift.nb_harmonics + 1,
                                                 FIXED_NOISE_SECONDS * config.hift.sampling_rate))
    return vocoder


def _v1_recipe(config: ModelConfig) -> V1InputRecipe:
    return V1InputRecipe(n_mels=config.mel.num_mels)


def _v2_recipe(config: ModelConfig) -> V2InputRecipe:
    return V2InputRecipe(n_mels=config.mel.num_mels, token_mel_ratio=config.chunking.token_mel_ratio)


def _v3_recipe(config: ModelConfig) -> V3InputRecipe:
    return V3InputRecipe(n_mels=config.mel.num_mels, token_mel_ratio=config.chunking.token_mel_ratio)


# The parity runs load lazily: the engine never needs the dev tool's modules.

def _v1_parity() -> type:
    from .parity.v1 import TransformerLMParity

    return TransformerLMParity


def _v2_parity() -> type:
    from .parity.v2 import CausalFlowParity

    return CausalFlowParity


def _v3_parity() -> type:
    from .parity.v3 import DiTFlowParity

    return DiTFlowParity


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
        parity=_v1_parity,
    ),
    V2: FamilyBackend(
        family=V2,
        upstream=UpstreamClasses(llm="cosyvoice.llm.llm.Qwen2LM", flow="cosyvoice.flow.flow.CausalMaskedDiffWithXvec",
                                 estimator="cosyvoice.flow.decoder.CausalConditionalDecoder",
                                 vocoder="cosyvoice.hifigan.generator.HiFTGenerator"),
        parse_config=parse_v2,
        llm=Qwen2LM,
        flow=CausalMaskedDiffWithXvec,
        estimator=CausalConditionalDecoder,
        vocoder=HiFTGenerator,
        sine_generator=SineGen2,  # upstream's choice at 24000 Hz
        text_tokenizer=_qwen_tokenizer,
        input_recipe=_v2_recipe,
        chunker=Chunker(renderer=ChunkedVocoderStream, schedule=stream_with_lookahead),
        llm_config=_qwen_llm_config,
        parity=_v2_parity,
    ),
    V3: FamilyBackend(
        family=V3,
        upstream=UpstreamClasses(llm="cosyvoice.llm.llm.CosyVoice3LM",
                                 flow="cosyvoice.flow.flow.CausalMaskedDiffWithDiT",
                                 estimator="cosyvoice.flow.DiT.dit.DiT",
                                 vocoder="cosyvoice.hifigan.generator.CausalHiFTGenerator"),
        parse_config=parse_v3,
        llm=CosyVoice3LM,
        flow=CausalMaskedDiffWithDiT,
        estimator=DiT,
        vocoder=CausalHiFTGenerator,
        sine_generator=CausalSineGen2,
        text_tokenizer=_qwen_tokenizer,
        input_recipe=_v3_recipe,
        chunker=Chunker(renderer=CausalVocoderStream, schedule=stream_with_lookahead),
        llm_config=_qwen_llm_config,
        finish_vocoder=_causal_vocoder,
        parity=_v3_parity,
    ),
}


def backend_for(family: FamilySpec) -> FamilyBackend:
    """The classes of `family`; ConfigError for a family this engine cannot run yet."""
    backend = BACKENDS.get(family)
    if backend is None:
        runnable = ", ".join(f.title for f in FAMILIES if f in BACKENDS)
        raise ConfigError(f"this engine has no {family.title} models yet ({family.yaml_name}); it runs {runnable}")
    return backend


def register(backend: FamilyBackend) -> None:
    """Run `backend.family` with these classes from now on (the family itself is `families.register`ed)."""
    if backend.family in BACKENDS:
        raise ConfigError(f"{backend.family.title} already has its classes registered")
    BACKENDS[backend.family] = backend


def unregister(family: FamilySpec) -> None:
    """Forget the classes `register` gave `family` (nothing happens for a family without any)."""
    BACKENDS.pop(family, None)
