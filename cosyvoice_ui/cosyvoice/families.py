"""The only place where CosyVoice generations differ: one `FamilySpec` each, and `detect(model_dir)`.

Upstream picks the generation by which yaml file exists; we do the same, then check the yaml's class
paths so a renamed or mixed-up folder fails with a clear message instead of a shape error later.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import CheckpointError, ConfigError
from ..types import Mode

# A small optional file a folder may carry to say which variant it is (our tiny test models write it);
# official folders don't have it, so the folder name decides, as upstream does ("-Instruct" in the path).
VARIANT_FILE = "cosyvoice_ui.json"


@dataclass(frozen=True)
class StreamingSpec:
    """v1 token → wave chunking constants (cosyvoice-models.md §7.3).

    The defaults are upstream's schedule: every chunk waits for hop (100) + overlap (20) tokens.
    `token_first_hop_len` lets the first chunk go out earlier; later hops are unchanged (see
    `streaming.stream_tokens`). With the first hop equal to `token_min_hop_len` the schedule is
    exactly upstream's.
    """

    token_min_hop_len: int = 100
    token_max_hop_len: int = 200
    token_overlap_len: int = 20
    mel_overlap_len: int = 34
    mel_cache_len: int = 20
    source_cache_len: int = 20 * 256
    stream_scale_factor: float = 1.0
    token_first_hop_len: int = 100


# Upstream's v1 schedule, bit for bit (the parity check streams with it).
UPSTREAM_STREAMING_V1 = StreamingSpec()
# Our default: the first chunk after 32 + 20 tokens instead of 100 + 20. On a CPU the first chunk's
# cost is dominated by the LLM prefill and by re-denoising the prompt frames, so waiting for ~70 more
# tokens (1.4 s of audio) only adds decode time. 32 keeps the chunk above the 40 tokens at which the
# length regulator splits off the overlap edges (so joins are built as upstream's are), and its mel
# rounds down like upstream's hop does: int(52 · 22050/256/50) − 34 overlap = 55 frames ≤ 32 tokens'
# worth (55.1), as 172 ≤ 172.3 for a hop of 100 (a hop of 30 would emit 52 frames for 51.7).
LOW_LATENCY_STREAMING_V1 = StreamingSpec(token_first_hop_len=32)


@dataclass(frozen=True)
class FamilySpec:
    """Static facts of one CosyVoice generation."""

    name: str  # "v1", "v2", "v3"
    title: str  # human name of the family
    yaml_name: str
    llm_class: str
    speech_tokenizer_file: str
    sample_rate: int
    token_rate: int  # speech tokens per second
    tokenizer: str  # "whisper" or "qwen"
    base_modes: tuple[Mode, ...]  # modes every folder of this family can do
    streaming: StreamingSpec
    supported: bool  # False: recognised, but this engine cannot run it yet
    required_files: tuple[str, ...]


V1 = FamilySpec(
    name="v1",
    title="CosyVoice-300M",
    yaml_name="cosyvoice.yaml",
    llm_class="cosyvoice.llm.llm.TransformerLM",
    speech_tokenizer_file="speech_tokenizer_v1.onnx",
    sample_rate=22050,
    token_rate=50,
    tokenizer="whisper",
    base_modes=(Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.VC),
    streaming=LOW_LATENCY_STREAMING_V1,
    supported=True,
    required_files=("cosyvoice.yaml", "llm.pt", "flow.pt", "hift.pt", "campplus.onnx", "speech_tokenizer_v1.onnx"),
)

V2 = FamilySpec(
    name="v2",
    title="CosyVoice2-0.5B",
    yaml_name="cosyvoice2.yaml",
    llm_class="cosyvoice.llm.llm.Qwen2LM",
    speech_tokenizer_file="speech_tokenizer_v2.onnx",
    sample_rate=24000,
    token_rate=25,
    tokenizer="qwen",
    base_modes=(Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.INSTRUCT, Mode.VC),
    streaming=StreamingSpec(),
    supported=False,
    required_files=("cosyvoice2.yaml", "llm.pt", "flow.pt", "hift.pt", "campplus.onnx", "speech_tokenizer_v2.onnx"),
)

V3 = FamilySpec(
    name="v3",
    title="Fun-CosyVoice3-0.5B",
    yaml_name="cosyvoice3.yaml",
    llm_class="cosyvoice.llm.llm.CosyVoice3LM",
    speech_tokenizer_file="speech_tokenizer_v3.onnx",
    sample_rate=24000,
    token_rate=25,
    tokenizer="qwen",
    base_modes=(Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.INSTRUCT, Mode.VC),
    streaming=StreamingSpec(),
    supported=False,
    required_files=("cosyvoice3.yaml", "llm.pt", "flow.pt", "hift.pt", "campplus.onnx", "speech_tokenizer_v3.onnx"),
)

FAMILIES: tuple[FamilySpec, ...] = (V1, V2, V3)


@dataclass(frozen=True)
class ModelFolder:
    """A detected model folder: its family and which variant (base / SFT / Instruct) it is."""

    path: Path
    family: FamilySpec
    instruct: bool  # a v1 -Instruct model (instruct mode with preset speakers)
    has_spk2info: bool

    @property
    def name(self) -> str:
        return self.path.name


def _read_variant(model_dir: Path) -> dict:
    marker = model_dir / VARIANT_FILE
    if not marker.is_file():
        return {}
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{VARIANT_FILE} in {model_dir.name}/ is not valid JSON: {exc}") from exc
    return data if isinstance(data, dict) else {}


def detect(model_dir: str | Path) -> ModelFolder:
    """Identify the CosyVoice generation of `model_dir` and check that every required file is there.

    Raises ConfigError (not a model folder, several or unsupported generations) or CheckpointError
    (a weight or ONNX file is missing; the message names it).
    """
    path = Path(model_dir)
    if not path.exists():
        raise ConfigError(f"model folder {path} does not exist; download a model "
                          "(`python -m cosyvoice_ui download CosyVoice-300M`) or pass --model-dir")
    if not path.is_dir():
        raise ConfigError(f"{path} is a file; --model-dir expects the folder that holds cosyvoice.yaml, llm.pt, ...")
    found = [f for f in FAMILIES if (path / f.yaml_name).is_file()]
    if not found:
        names = ", ".join(f.yaml_name for f in FAMILIES)
        raise ConfigError(f"{path.name}/ is not a CosyVoice model folder: none of {names} is in it")
    if len(found) > 1:
        raise ConfigError(f"{path.name}/ holds yaml files of several generations "
                          f"({', '.join(f.yaml_name for f in found)}); keep the one that matches its weights")
    family = found[0]
    if not family.supported:
        raise ConfigError(f"{path.name}/ is a {family.title} folder ({family.yaml_name}); this version of the engine "
                          f"runs CosyVoice-300M / -SFT / -Instruct ({V1.yaml_name}) only")
    missing = [name for name in family.required_files if not (path / name).is_file()]
    if missing:
        raise CheckpointError(f"{path.name}/ is incomplete: missing {', '.join(missing)} "
                          f"(a {family.title} folder needs {', '.join(family.required_files)}); "
                          "re-download it or copy the missing files in")
    variant = _read_variant(path)
    instruct = bool(variant.get("instruct", "instruct" in path.name.lower()))
    return ModelFolder(path=path, family=family, instruct=instruct, has_spk2info=(path / "spk2info.pt").is_file())


def modes_for(folder: ModelFolder, speakers: tuple[str, ...]) -> tuple[Mode, ...]:
    """The modes a detected folder supports, given the preset speakers it ships."""
    if folder.family.name == "v1" and folder.instruct:
        # The -Instruct model conditions on instruct text + a preset speaker's embedding. Upstream refuses
        # cross-lingual on it and still allows zero-shot and voice conversion.
        preset = [Mode.INSTRUCT, Mode.SFT] if speakers else []
        return tuple(preset) + (Mode.ZERO_SHOT, Mode.VC)
    modes = list(folder.family.base_modes)
    if speakers:
        modes.insert(0, Mode.SFT)
    return tuple(modes)


def model_that_can(mode: Mode) -> str:
    """Name an official model that supports `mode` (for 'this model can't do that' messages)."""
    return {
        Mode.SFT: "CosyVoice-300M-SFT (preset speakers)",
        Mode.INSTRUCT: "CosyVoice-300M-Instruct",
        Mode.ZERO_SHOT: "CosyVoice-300M (or -SFT)",
        Mode.CROSS_LINGUAL: "CosyVoice-300M (or -SFT)",
        Mode.VC: "CosyVoice-300M",
    }[mode]
